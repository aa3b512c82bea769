"""Zen as a drop-in for DDP: the natural-sparsity hook gives stock DDP's parameters after every step (dense and
``sparse=True`` embeddings, the embedding in a bucket of its own or sharing one, 2 and 4 gloo ranks); the top-k hook
equals top-k + AGsparse under the same masks, with either threshold, inline or overlapped; its residuals follow
their parameters through DDP's bucket rebuild."""

import pytest
import torch
from torch import nn

from zen_analysis.ranks.procs import fork_launch


class _LM(nn.Module):
    def __init__(self, tie: bool = False, sparse: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(600, 16, sparse=sparse)
        self.hidden = nn.Linear(16, 16)
        self.head = nn.Linear(16, 600, bias=False)
        if tie:
            self.head.weight = self.embed.weight

    def forward(self, x):
        return self.head(torch.tanh(self.hidden(self.embed(x))))


AUTO = {"topology": "paper-tcp25", "planner_every": 1, "hysteresis": 0.0}
"""``scheme="auto"`` in tests: a preset topology (no calibration), a decision every step, no hysteresis."""


def _scheme_kwargs(scheme: str) -> dict:
    return {"scheme": scheme, **(AUTO if scheme == "auto" else {})}


def _train(rank, world, bucket_cap_mb, scheme, sparse=False):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from zen_analysis.sync.ddp import register

    out = {}
    for hook in ("stock", "natural"):
        torch.manual_seed(0)
        model = DDP(_LM(sparse=sparse), bucket_cap_mb=bucket_cap_mb)
        state = register(model, mode="natural", **_scheme_kwargs(scheme)) if hook == "natural" else None
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        params = []
        for step in range(4):
            x = torch.randint(0, 600, (6, 5), generator=torch.Generator().manual_seed(100 * step + rank))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, 600), x[:, 1:].reshape(-1)).backward()
            opt.step()
            params.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone())
            if sparse:
                assert model.module.embed.weight.grad.is_sparse  # what DDP expects back for a sparse bucket
        out[hook] = torch.stack(params)
        if state is not None:
            out["state"] = (state.sparse_buckets, state.dense_buckets, state.bytes_sent)
            dense_numel = sum(p.numel() for n, p in model.module.named_parameters() if not n.startswith("embed."))
            # every other gradient went through the hook's dense all-reduces: 4 steps of ring volume, 2 (W - 1) / W
            out["allreduce"] = (state.allreduce_bytes_sent, 4 * 2 * (world - 1) / world * dense_numel * 4)
            out["decisions"] = state.decisions
        dist.barrier()
    return out


@pytest.mark.parametrize(
    "world, bucket_cap_mb, scheme",
    [
        pytest.param(2, 0.001, "zen", marks=pytest.mark.smoke),
        (4, 0.001, "zen"),
        (4, 25.0, "zen"),
        (2, 25.0, "agsparse"),
        (2, 0.001, "auto"),
        (4, 25.0, "auto"),
    ],
)
def test_natural_hook_gives_stock_ddp_parameters_every_step(world, bucket_cap_mb, scheme):
    for r in fork_launch(_train, world, bucket_cap_mb, scheme):
        torch.testing.assert_close(r["natural"], r["stock"], rtol=1e-5, atol=1e-6)
        sparse_buckets, dense_buckets, sent = r["state"]
        assert sparse_buckets == 4 and sent > 0  # the embedding went through the scheme every step
        assert r["allreduce"][0] == pytest.approx(r["allreduce"][1], rel=1e-3)
        # small buckets: the dense layers in buckets of their own (async stock path); one big bucket: shared
        assert (dense_buckets > 0) == (bucket_cap_mb < 1)
        if scheme == "auto":  # whatever the planner picked, step by step, the parameters are stock DDP's
            history = r["decisions"]["embed.weight"]["history"]
            assert [h["step"] for h in history] == [0, 1, 2, 3]
            assert r["decisions"]["embed.weight"]["scheme"] in r["decisions"]["embed.weight"]["modelled_s"]


@pytest.mark.parametrize("world, scheme", [(2, "zen"), (4, "zen"), (4, "sparcml")])
def test_natural_hook_sums_sparse_embedding_gradients_as_stock_ddp_does(world, scheme):
    """nn.Embedding(sparse=True): stock DDP all-gathers the sparse gradient on gloo (and has no sparse all-reduce on
    NCCL); the hook sums its rows with the scheme and returns a sparse gradient, with the same parameters."""
    for r in fork_launch(_train, world, 25.0, scheme, True):
        torch.testing.assert_close(r["natural"], r["stock"], rtol=1e-5, atol=1e-6)
        sparse_buckets, dense_buckets, sent = r["state"]
        assert sparse_buckets == 4 and dense_buckets == 4 and sent > 0  # its own bucket; the dense ones stock


class _Shuffled(nn.Module):
    """Layers registered in another order than they run: DDP's first buckets (reverse registration order) differ
    from those it rebuilds after step 0 (the order gradients arrived)."""

    def __init__(self) -> None:
        super().__init__()
        self.c, self.a, self.d, self.b = (nn.Linear(24, 24) for _ in range(4))
        self.embed = nn.Embedding(300, 24)

    def forward(self, x):
        h = self.embed(x)
        for layer in (self.a, self.b, self.c, self.d):
            h = torch.tanh(layer(h))
        return h @ self.embed.weight.detach().T


def _topk(rank, world, schemes, threshold, overlap, steps=5):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from zen_analysis.sync.ddp import register

    out = {}
    for scheme in schemes:
        torch.manual_seed(0)
        model = DDP(_Shuffled(), bucket_cap_mb=0.004)
        ref = _Shuffled()  # the same model without DDP: this rank's own gradients
        state = register(model, mode="topk", ratio=0.1, threshold=threshold, overlap=overlap, **_scheme_kwargs(scheme))
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        p0 = [p.detach().clone() for p in model.parameters()]
        local = [torch.zeros_like(p) for p in p0]  # this rank's gradients summed over steps
        params, layouts = [], []
        for step in range(steps):
            x = torch.randint(0, 300, (4, 6), generator=torch.Generator().manual_seed(100 * step + rank))
            ref.load_state_dict(model.module.state_dict())
            ref.zero_grad()
            ref(x).pow(2).mean().backward()
            for acc, p in zip(local, ref.parameters()):
                acc += p.grad
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            params.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone())
            layouts.append([tuple(row["params"]) for row in state.last_step])
        # error feedback conserves every gradient: what all ranks sent (= world x the parameters' change, lr 1)
        # plus what they still hold back, per parameter, is the sum of their gradients
        held = [g - state.residual(p).view_as(p) for g, p in zip(local, model.parameters())]
        for h in held:
            dist.all_reduce(h)
        moved = [world * (a - p.detach()) for a, p in zip(p0, model.parameters())]
        out[scheme] = {
            "params": torch.stack(params),
            "held": held,
            "moved": moved,
            "layouts": layouts,
            "bytes": state.bytes_sent,
            "sync_s": state.sync_s,
            "exposed_s": state.exposed_s,
            "decisions": state.decisions,
        }
        del model, state
        dist.barrier()
    return out


@pytest.mark.parametrize("world, threshold, overlap", [(2, "local", False), (4, "global", False), (4, "local", True)])
def test_topk_hook_equals_agsparse_and_residuals_follow_parameters_through_a_bucket_rebuild(world, threshold, overlap):
    for r in fork_launch(_topk, world, ("zen", "agsparse", "auto"), threshold, overlap):
        zen, ag, auto = r["zen"], r["agsparse"], r["auto"]
        torch.testing.assert_close(zen["params"], ag["params"], rtol=1e-5, atol=1e-6)  # same masks, same sums
        torch.testing.assert_close(auto["params"], ag["params"], rtol=1e-5, atol=1e-6)  # whatever auto picked
        # a decision per bucket and step: the first buckets at step 0, those DDP rebuilt at every step since
        steps = {key: [h["step"] for h in d["history"]] for key, d in auto["decisions"].items()}
        assert sorted(steps.values()) == sorted(
            [[0]] * (len(steps) - len(auto["layouts"][-1])) + [[1, 2, 3, 4]] * len(auto["layouts"][-1])
        )
        assert zen["bytes"] > 0 and ag["bytes"] > 0
        first, rebuilt = zen["layouts"][0], zen["layouts"][1]
        assert first != rebuilt and rebuilt == zen["layouts"][-1]  # DDP rebuilt its buckets once, after step 0
        for held, moved in zip(zen["held"], zen["moved"]):
            torch.testing.assert_close(held, moved, rtol=1e-4, atol=1e-5)
        if overlap:
            assert zen["sync_s"] > 0 and zen["exposed_s"] > 0  # exposed can exceed the work: GIL, queueing


def test_overlapped_topk_hook_gives_the_inline_hook_parameters():
    def run(rank, world):
        inline = _topk(rank, world, ("zen",), "local", False, steps=3)["zen"]["params"]
        overlapped = _topk(rank, world, ("zen",), "local", True, steps=3)["zen"]["params"]
        return inline, overlapped

    for inline, overlapped in fork_launch(run, 2):
        torch.testing.assert_close(overlapped, inline, rtol=0, atol=0)


def test_sparse_parameters_skip_a_tied_embedding_with_a_warning():
    from zen_analysis.sync.ddp import sparse_parameters

    untied = _LM()
    assert sparse_parameters(untied) == (untied.embed.weight,)
    with pytest.warns(UserWarning, match="embed.weight is tied"):
        assert sparse_parameters(_LM(tie=True)) == ()


@pytest.mark.parametrize("model, flags", [("llama", []), ("gpt2", ["--sparse-embedding"]), ("lstm", [])])
def test_the_example_script_under_torchrun_matches_stock_ddp(tmp_path, model, flags):
    """scripts/ddp_transformers.py, as a user runs it: torchrun, 2 gloo ranks, a transformers Llama (dense embedding
    gradient, its rows the ids its embedding looked up), GPT-2 with an nn.Embedding(sparse=True) (stock DDP
    all-gathers it; the hook sums it with Zen), or the plain-PyTorch word LSTM (an adaptive softmax)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "ddp_transformers.py"
    results = {}
    for zen in ("off", "natural"):
        out = tmp_path / f"{zen}.json"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node=2",
                str(script),
                "--size",
                "smoke",
                "--steps",
                "4",
                "--batch",
                "4",
                "--zen",
                zen,
                "--model",
                model,
                "--out",
                str(out),
                *flags,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        result = json.loads(out.read_text())
        assert result["ranks"] == 2 and result["backend"] == "gloo" and len(result["steps"]) == 4
        assert result["model"] == model and result["sparse_embedding"] == bool(flags)
        results[zen] = result["steps"]
    assert all(s["sparse_bytes"] > 0 and s["dense_bytes"] > 0 for s in results["natural"])  # Zen + stock all-reduce
    assert all(s["sparse_bytes"] == 0 for s in results["off"]) != bool(flags)  # sparse=True: stock all-gathers rows
    losses = {zen: torch.tensor([s["loss"] for s in steps]) for zen, steps in results.items()}
    torch.testing.assert_close(losses["natural"], losses["off"], rtol=1e-4, atol=1e-5)


def _tiny(family: str, tie: bool):
    """A one-layer causal LM of the family from its transformers config, with the family's own embeddings (GPT-2's
    and OPT's learned position tables), tied or not."""
    import transformers as tf

    common = {"vocab_size": 300, "num_hidden_layers": 1, "num_attention_heads": 2, "tie_word_embeddings": tie}
    common |= {"bos_token_id": 0, "eos_token_id": 0}
    if family == "gpt2":
        cfg = tf.GPT2Config(n_embd=16, n_positions=32, **{k: v for k, v in common.items() if k != "num_hidden_layers"})
        cfg.n_layer = 1
        return tf.GPT2LMHeadModel(cfg)
    common |= {"hidden_size": 16, "max_position_embeddings": 32}
    if family == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(intermediate_size=32, num_key_value_heads=2, **common))
    if family == "opt":
        return tf.OPTForCausalLM(tf.OPTConfig(ffn_dim=32, word_embed_proj_dim=16, **common))
    return tf.Gemma2ForCausalLM(tf.Gemma2Config(intermediate_size=32, num_key_value_heads=2, head_dim=8, **common))


DEFAULT_SELECTION = {
    # family: (untied: what Zen sums, what is left dense), as the README's table says
    "gpt2": ("transformer.wte.weight", ["transformer.wpe.weight"]),
    "llama": ("model.embed_tokens.weight", []),
    "opt": ("model.decoder.embed_tokens.weight", ["model.decoder.embed_positions.weight"]),
    "gemma2": ("model.embed_tokens.weight", []),
}


@pytest.mark.parametrize("family", list(DEFAULT_SELECTION))
def test_default_selection_sums_the_token_table_only_never_positions_or_a_tied_weight(family):
    """Position tables (GPT-2's wpe, OPT's embed_positions) have every row the sequence reaches touched in every
    batch: dense by nature, left to the all-reduce. A tied token table is dense too: named in a warning, and with
    nothing left the selection is empty (register then steps aside)."""
    import warnings

    from zen_analysis.sync.ddp import select_sparse, sparse_parameters

    token, positions = DEFAULT_SELECTION[family]
    model = _tiny(family, tie=False)
    names = {id(p): n for n, p in model.named_parameters()}
    chosen, left = select_sparse(model)
    assert [names[id(p)] for p in chosen] == [token]
    assert sorted(left) == positions and all("dense by nature" in why for why in left.values())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert sparse_parameters(_tiny(family, tie=True)) == ()
    assert [str(w.message) for w in caught if "tied" in str(w.message)][0].startswith(f"{token} is tied to")


def _aside_and_report(rank, world):
    import warnings

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from zen_analysis.sync.compressed import REPORT
    from zen_analysis.sync.ddp import register

    out = {}
    for hook in ("stock", "aside"):
        torch.manual_seed(0)
        model = DDP(_LM(tie=True))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            state = register(model, mode="natural") if hook == "aside" else None
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for step in range(2):
            x = torch.randint(0, 600, (4, 5), generator=torch.Generator().manual_seed(10 * step + rank))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, 600), x[:, 1:].reshape(-1)).backward()
            opt.step()
        out[hook] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        if state is not None:
            out["warnings"] = [str(w.message) for w in caught]
            out["aside_report"] = state.summary()
        del model, state
        dist.barrier()
    for mode in ("natural", "topk"):  # both states answer the same report
        torch.manual_seed(0)
        model = DDP(_LM())
        state = register(model, mode=mode)
        x = torch.randint(0, 600, (4, 5), generator=torch.Generator().manual_seed(rank))
        nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, 600), x[:, 1:].reshape(-1)).backward()
        out[mode] = ({k: hasattr(state, k) for k in REPORT}, state.summary())
        del model, state
        dist.barrier()
    return out


def test_a_tied_model_stays_stock_ddp_with_a_warning_and_both_states_report_alike():
    """Before: register raised "natural mode found no untied nn.Embedding" (Lightning crashed with it), and the top-k
    state had no allreduce_bytes_sent; what Zen sums was in no documented attribute."""
    for r in fork_launch(_aside_and_report, 2):
        torch.testing.assert_close(r["aside"], r["stock"], rtol=0, atol=0)  # stock DDP, bit for bit: no hook
        tied, aside = r["warnings"]
        assert tied.startswith("embed.weight is tied to ['head.weight']") and "stays stock DDP" in aside
        report = r["aside_report"]
        assert not report["hooked"] and report["sparse_names"] == () and report["bytes_sent"] == 0
        assert report["step"] == 0 and "embed.weight" in report["left_dense"]
        (has_nat, nat), (has_topk, topk) = r["natural"], r["topk"]
        assert all(has_nat.values()) and all(has_topk.values()) and nat.keys() == topk.keys()
        assert nat["mode"] == "natural" and nat["sparse_names"] == ("embed.weight",) and nat["bytes_sent"] > 0
        assert nat["allreduce_bytes_sent"] > 0 and nat["step"] == 1 and nat["hooked"]
        assert topk["mode"] == "topk" and topk["sparse_names"] == (
            "embed.weight",
            "hidden.weight",
            "hidden.bias",
            "head.weight",
        )
        assert topk["allreduce_bytes_sent"] == 0 and topk["bytes_sent"] > 0 and topk["step"] == 1
