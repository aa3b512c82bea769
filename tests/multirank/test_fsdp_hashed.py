"""Hashed row ownership under FSDP2: a table stored in Zen's h0 order trains to stock FSDP2's table (compared in the
original row order: gradients every step, parameters after 5 steps, bit for bit on integer-valued gradients); each
rank's shard receives the rows :func:`~zen_analysis.fsdp.hashed.received_rows` predicts; and a checkpoint written
through ``torch.distributed.checkpoint`` is in the original order, loadable by an unhashed model and back."""

import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from test_fsdp import STEPS, VOCAB, _Integer  # a sibling test module: pytest puts its folder on the path
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from zen_analysis import recipes
from zen_analysis.fsdp import install, shard
from zen_analysis.fsdp.hashed import hashed_rows_of, received_rows, to_original
from zen_analysis.fsdp.training import transformer_blocks
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.workload.models import build_model, lm_loss


def _ids(rank: int, step: int) -> torch.Tensor:
    """Zipf-like ids, low ids most frequent (a frequency-ordered vocabulary): the first shard is the hot one."""
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.clamp((torch.rand(6, 9, generator=g) ** 3 * VOCAB).long(), max=VOCAB - 1)


def _model(mesh, hashed: bool):
    """Sharded by hand (the table a unit of its own, then the root), or by ``zen_analysis.fsdp.shard``, which hashes
    the table's rows too."""

    torch.manual_seed(0)
    model = _Integer()
    if hashed:
        return model, shard(model, mesh=mesh, seed=3)
    fully_shard(model.embed, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, None


def _full(state: dict) -> dict:
    return {k: v.full_tensor() for k, v in state.items()}


def _run(rank, world, ckpt):

    mesh = init_device_mesh("cpu", (world,))
    out = {}
    for variant in ("stock", "contiguous", "hashed"):
        model, zen = _model(mesh, hashed=variant == "hashed")
        zen = install(model) if variant == "contiguous" else zen
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        grads, received = [], []
        for step in range(STEPS):
            model(_ids(rank, step), step).backward()
            grad = model.embed.weight.grad
            if variant == "hashed":
                grad = to_original(grad, hashed_rows_of(model.embed))
            grads.append(grad.full_tensor())
            if zen is not None:
                got = torch.zeros(world, dtype=torch.int64)
                got[rank] = zen.reduce_scatters["embed"].last["received"]
                dist.all_reduce(got)
                h = hashed_rows_of(model.embed)
                sets = [_ids(r, step) for r in range(world)]
                received.append((got, received_rows(sets, VOCAB, world, h.row_of_id_R if h else None)))
            opt.step()
            opt.zero_grad()
        out[variant] = {"grads": grads, "state": _full(model.state_dict()), "received": received}
        if variant == "hashed":
            dcp.save(model.state_dict(), checkpoint_id=ckpt)
            x = _ids(rank, 99)
            out["hashed_lookup"] = model.embed(x).detach().clone()
    dist.barrier()
    # the hashed model's checkpoint, read by an unhashed model and by a hashed one
    for variant in ("stock", "hashed"):
        model, _ = _model(mesh, hashed=variant == "hashed")
        state = model.state_dict()
        dcp.load(state, checkpoint_id=ckpt)
        model.load_state_dict(state)
        out[f"loaded_{variant}"] = (_full(model.state_dict()), model.embed(_ids(rank, 99)).detach().clone())
    return out


def test_hashed_rows_train_to_stock_fsdp2_and_checkpoint_in_the_original_order(tmp_path):
    world = 4
    for r in fork_launch(_run, world, str(tmp_path / "ckpt"), timeout_s=240):
        for variant in ("contiguous", "hashed"):
            for step, (a, b) in enumerate(zip(r[variant]["grads"], r["stock"]["grads"])):
                assert torch.equal(a, b), f"{variant}: step {step}'s gradient differs from stock FSDP2's"
            for k, v in r["stock"]["state"].items():
                assert torch.equal(r[variant]["state"][k], v), f"{variant}: {k} after {STEPS} steps differs"
            for got, predicted in r[variant]["received"]:
                assert torch.equal(got, predicted), (variant, got, predicted)
        # the hot first shard: contiguous rows load one rank; hashed rows spread them
        busiest = {
            v: max(int(g.max()) / float(g.double().mean()) for g, _ in r[v]["received"])
            for v in r
            if v in ("contiguous", "hashed")
        }
        assert busiest["contiguous"] > 2.0 and busiest["hashed"] < 1.5, busiest
        for variant in ("stock", "hashed"):
            state, lookup = r[f"loaded_{variant}"]
            for k, v in r["hashed"]["state"].items():
                assert torch.equal(state[k], v), f"the checkpoint read by a {variant} model: {k} differs"
            assert torch.equal(lookup, r["hashed_lookup"]), variant


class _Options(_Integer):
    """:class:`_Integer` with the table's ``nn.Embedding`` options (``padding_idx``, ``max_norm``, ...)."""

    def __init__(self, **options) -> None:
        super().__init__()
        weight = self.embed.weight.detach().clone()
        self.embed = torch.nn.Embedding(VOCAB, weight.shape[1], **options)
        with torch.no_grad():
            self.embed.weight.copy_(weight)


OPTIONS = (
    {"padding_idx": 0},
    {"padding_idx": -1},  # nn.Embedding reads it as VOCAB - 1
    {"padding_idx": 5, "scale_grad_by_freq": True},
    {"max_norm": 4.0},
)


def _with_options(rank, world):
    """Each of OPTIONS under stock FSDP2 and under ``shard()``: the gradient each step and the state after STEPS,
    in the original order, with the padding id at a few places of every batch."""
    mesh = init_device_mesh("cpu", (world,))
    out = []
    for options in OPTIONS:
        runs = {}
        for variant in ("stock", "hashed"):
            torch.manual_seed(0)
            model = _Options(**options)
            pad = model.embed.padding_idx
            if variant == "hashed":
                shard(model, mesh=mesh, seed=3)
            else:
                fully_shard(model.embed, mesh=mesh)
                fully_shard(model, mesh=mesh)
            opt = torch.optim.SGD(model.parameters(), lr=1.0)
            grads = []
            for step in range(STEPS):
                ids = _ids(rank, step)
                if pad is not None:
                    ids[:, 0] = pad
                model(ids, step).backward()
                grad = model.embed.weight.grad
                h = hashed_rows_of(model.embed)
                grads.append((to_original(grad, h) if h else grad).full_tensor())
                opt.step()
                opt.zero_grad()
            runs[variant] = (grads, _full(model.state_dict()), pad)
        out.append(runs)
    return out


def test_padding_max_norm_and_scale_grad_by_freq_train_under_hashed_rows_as_under_stock_fsdp2():
    for r in fork_launch(_with_options, 2, timeout_s=240):
        for options, runs in zip(OPTIONS, r):
            (stock, state, pad), (hashed, hashed_state, _) = runs["stock"], runs["hashed"]
            for step, (a, b) in enumerate(zip(hashed, stock)):
                assert torch.equal(a, b), f"{options}: step {step}'s gradient differs from stock FSDP2's"
            for k, v in state.items():
                assert torch.equal(hashed_state[k], v), f"{options}: {k} after {STEPS} steps differs"
            if pad is not None:  # the padding row never moved
                assert not stock[-1][pad].any()


FAMILIES = {
    "gpt2": ("transformer.wte", "transformer.wpe"),
    "opt": ("model.decoder.embed_tokens", "model.decoder.embed_positions"),
}


def _families(rank, world):
    """The GPT-2 and OPT smoke models under stock FSDP2 (the token table a unit, the blocks, the root) and under
    ``shard()``: each step's loss, the state after 3 SGD steps, and what ``shard()`` put Zen on."""
    mesh = init_device_mesh("cpu", (world,))
    out = {}
    for arch in FAMILIES:
        cfg = recipes.gpt2_smoke() if arch == "gpt2" else recipes.opt_smoke()
        for variant in ("stock", "shard"):
            torch.manual_seed(0)
            model = build_model(cfg.model, vocab_size=cfg.data.vocab_size, max_seq_len=cfg.train.seq_len)
            blocks = transformer_blocks(model)
            if variant == "shard":
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    zen = shard(model, mesh=mesh, blocks=blocks, seed=3)
                out[arch, "zen"] = list(zen.reduce_scatters), [str(w.message) for w in caught]
                out[arch, "units"] = [n for n, m in model.named_modules() if isinstance(m, FSDPModule)]
            else:
                fully_shard(model.get_input_embeddings(), mesh=mesh)
                for block in blocks:
                    fully_shard(block, mesh=mesh)
                fully_shard(model, mesh=mesh)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            losses = []
            for step in range(3):
                x = torch.randint(0, cfg.data.vocab_size, (2, 33), generator=torch.Generator().manual_seed(step + rank))
                loss = lm_loss(model, x[:, :-1], x[:, 1:])
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
            out[arch, variant] = losses, _full(model.state_dict())
    return out


def test_shard_sums_gpt2s_and_opts_token_table_and_leaves_the_position_table_to_stock_fsdp2():
    """The position table stays in the root, unhashed (OPT's forward takes the attention mask, which the hashed
    order's pre-hook used to remap: the first loss already differed), and Zen sums the token table alone, without a
    warning; 2 ranks: stock's losses and parameters bit for bit."""
    for r in fork_launch(_families, 2, timeout_s=240):
        for arch, (token, position) in FAMILIES.items():
            assert r[arch, "zen"] == ([token], [])
            assert token in r[arch, "units"] and position not in r[arch, "units"]
            (losses, state), (stock_losses, stock_state) = r[arch, "shard"], r[arch, "stock"]
            assert losses == stock_losses, arch
            assert state.keys() == stock_state.keys()
            for k, v in stock_state.items():
                assert torch.equal(state[k], v), f"{arch}: {k} after 3 steps differs from stock FSDP2's"
