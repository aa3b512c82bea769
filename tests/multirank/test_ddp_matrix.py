"""Both DDP hooks against stock DDP, configuration by configuration: dense and ``sparse=True`` embeddings (the latter
also under SGD momentum and Adagrad, which keep sparse state), ``find_unused_parameters``, ``no_sync`` accumulation,
``static_graph``, ``gradient_as_bucket_view``, tiny buckets, fp16, bf16 and float64 models on 2 ranks, and a DDP
subgroup (two replicas of 2 ranks) on 4. The natural hook and the top-k hook at ratio 1 (nothing held back) give
stock DDP's parameters after every step, bit for bit: on two ranks a sum then a halving is the same rounding as
halves summed (fp16 aside: a halved small gradient is subnormal there, so a few elements are one unit in the last
place apart); a bf16 model's values travel at 2 bytes."""

import pytest
import torch
from torch import nn

from zen_analysis.ranks.procs import fork_launch

VOCAB, DIM = 400, 16


class _LM(nn.Module):
    def __init__(self, sparse: bool = False, unused: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM, sparse=sparse)
        self.hidden = nn.Linear(DIM, DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.unused = nn.Linear(DIM, DIM) if unused else None  # never in the graph: find_unused_parameters

    def forward(self, x):
        return self.head(torch.tanh(self.hidden(self.embed(x))))


CONFIGS = {
    "dense": {},
    "sparse_embedding": {"sparse": True},
    # the hook's summed rows come back coalesced, as stock's: an optimizer merges them into its sparse state rather
    # than appending them (before: SGD momentum's buffer appended rows, 2.4e-7 from stock from step 2 on)
    "sparse_momentum": {"sparse": True, "optim": {"momentum": 0.9}},
    "sparse_adagrad": {"sparse": True, "optim": {"name": "adagrad"}},
    "find_unused_parameters": {"unused": True, "ddp": {"find_unused_parameters": True}},
    "no_sync": {"accumulate": 2},
    "static_graph": {"ddp": {"static_graph": True}},
    "gradient_as_bucket_view": {"ddp": {"gradient_as_bucket_view": True}},
    "tiny_buckets": {"ddp": {"bucket_cap_mb": 0.001}},
    "fp16": {"dtype": torch.float16},
    "bf16": {"dtype": torch.bfloat16},
    "float64": {"dtype": torch.float64},
}


def _trajectory(rank, config: dict, hook: str, group, steps: int = 3):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from zen_analysis.sync.ddp import register

    torch.manual_seed(0)
    module = _LM(sparse=config.get("sparse", False), unused=config.get("unused", False)).to(
        config.get("dtype", torch.float32)
    )
    model = DDP(module, process_group=group, **config.get("ddp", {}))
    state = None
    if hook == "natural":
        state = register(model, mode="natural")
    elif hook == "topk":
        state = register(model, mode="topk", ratio=1.0)
    optim = dict(config.get("optim", {}))
    if optim.pop("name", "sgd") == "adagrad":
        opt = torch.optim.Adagrad(model.parameters(), lr=0.1, **optim)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.5, **optim)
    params, payload = [], []
    for step in range(steps):
        opt.zero_grad()
        micro = config.get("accumulate", 1)
        for m in range(micro):
            x = torch.randint(0, VOCAB, (4, 6), generator=torch.Generator().manual_seed(1000 * step + 10 * rank + m))
            ctx = model.no_sync() if m < micro - 1 else torch.enable_grad()
            with ctx:
                logits = model(x[:, :-1]).float()
                nn.functional.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1)).backward()
        opt.step()
        params.append(torch.cat([p.detach().double().reshape(-1) for p in model.parameters()]).clone())
        if state is not None:
            m = state._scheme.last_measured()
            payload.append(int(m[m["kind"] == "payload"]["bytes_sent"].sum()))
    counters = None if state is None else (state.bytes_sent, len(state.last_step))
    del model, state
    dist.barrier()
    return torch.stack(params), payload, counters


def _matrix(rank, world, names):
    out = {}
    for name in names:
        for hook in ("stock", "natural", "topk"):
            if hook == "topk" and CONFIGS[name].get("sparse"):
                continue  # top-k needs dense gradients (register refuses sparse=True)
            out[name, hook] = _trajectory(rank, CONFIGS[name], hook, None)
    return out


def test_both_hooks_equal_stock_ddp_in_every_configuration():
    names = list(CONFIGS)
    for per_rank in fork_launch(_matrix, 2, names, timeout_s=300):
        for name in names:
            stock = per_rank[name, "stock"][0]
            for hook in ("natural", "topk"):
                if (name, hook) not in per_rank:
                    continue
                params, payload, (sent, buckets) = per_rank[name, hook]
                assert sent > 0 and buckets > 0, f"{hook} on {name}: the hook did not run"
                # fp16: stock DDP halves each rank's gradient before summing, and a halved small fp16 gradient is
                # subnormal, rounded (one unit in the last place apart, on a few elements); the rest bit for bit
                tol = {"rtol": 2e-3, "atol": 1e-5} if name == "fp16" else {"rtol": 0, "atol": 0}
                torch.testing.assert_close(params, stock, **tol, msg=lambda m: f"{hook} on {name}: {m}")  # noqa: B023
        # a 2-byte model's values travel at 2 bytes: the natural hook's COO entries (Zen: int32 position + value)
        # of the same rows are 6 bytes in bf16/fp16 against 8 in float32 on the push; the pull's values 2 against 4
        for half in ("bf16", "fp16"):
            half_payload, f32_payload = per_rank[half, "natural"][1][0], per_rank["dense", "natural"][1][0]
            assert half_payload < 0.8 * f32_payload, (half, half_payload, f32_payload)


def _subgroup(rank, world):
    import torch.distributed as dist

    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    mine = groups[rank // 2]
    out = {hook: _trajectory(rank, {}, hook, mine)[0] for hook in ("stock", "natural", "topk")}
    # passing the model's group (or one of the same ranks) is fine; a group of other ranks is an error
    from torch.nn.parallel import DistributedDataParallel as DDP

    from zen_analysis.sync.ddp import register

    model = DDP(_LM(), process_group=mine)
    register(model, group=mine)
    other = DDP(_LM(), process_group=mine)
    try:
        register(other, group=groups[1 - rank // 2])
        out["error"] = None
    except ValueError as e:
        out["error"] = str(e)
    del model, other
    dist.barrier()
    return out


def test_hooks_sum_over_the_ddp_models_own_process_group():
    """Two replicas of 2 ranks on 4: the issue measured parameters 0.037 from stock DDP (the hook summed the whole
    world and divided by 4)."""
    results = fork_launch(_subgroup, 4, timeout_s=300)
    for r in results:
        torch.testing.assert_close(r["natural"], r["stock"], rtol=0, atol=0)
        torch.testing.assert_close(r["topk"], r["stock"], rtol=0, atol=0)
        assert "leave group= out" in r["error"]
    # the replicas trained on different data: different parameters, so the groups really were separate
    assert not torch.equal(results[0]["stock"], results[2]["stock"])
    assert torch.equal(results[0]["stock"], results[1]["stock"])


@pytest.mark.parametrize("mode", ["natural", "topk"])
def test_register_refuses_a_model_without_ddp(mode):
    from zen_analysis.sync.ddp import register

    with pytest.raises(ValueError, match="DistributedDataParallel"):
        register(_LM(), mode=mode)
