"""FSDP2 checkpoints through ``torch.distributed.checkpoint`` (:mod:`zen_analysis.fsdp.dcp`), on 2 gloo ranks
with a hashed table and Zen's reduce-scatter, AdamW, a checkpoint after every step:

* a rank SIGKILLed inside step 4's checkpoint (its shards written, the folder not yet committed) leaves step 3 the
  newest complete one; resumed from it, the run's final parameters and AdamW state equal an uninterrupted run's bit
  for bit (the batches are a pure function of (step, rank), so no RNG state is needed);
* the files are in the original row order, moments included: a stock, unhashed FSDP2 model reads step 5's
  checkpoint, takes step 6, and matches the hashed run's parameters and moments in the original order.
"""

import os
import signal
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import zen_analysis.fsdp.dcp as ckpt
from zen_analysis.atomic import partial_checkpoint_dir
from zen_analysis.fsdp import shard
from zen_analysis.fsdp.hashed import hashed_rows_of, to_original
from zen_analysis.ranks.procs import RankFailedError, fork_launch

VOCAB, DIM, CLASSES, STEPS, KILLED_AT = 1001, 8, 5, 6, 4


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A pure function of (step, rank): Zipf-like ids and their classes."""
    g = torch.Generator().manual_seed(1000 * step + rank + 1)
    ids = torch.clamp((torch.rand(4, 6, generator=g) ** 3 * VOCAB).long(), max=VOCAB - 1)
    return ids, torch.randint(0, CLASSES, (4, 6), generator=g)


def _build(mesh, hashed: bool):
    torch.manual_seed(0)
    model = _Model()
    if hashed:
        shard(model, mesh=mesh, seed=3)
    else:
        fully_shard(model.embed, mesh=mesh)
        fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)


def _step(model, opt, rank: int, step: int) -> None:
    ids, classes = _batch(rank, step)
    F.cross_entropy(model(ids).flatten(0, 1), classes.flatten()).backward()
    opt.step()
    opt.zero_grad()


def _full(t):
    return t.full_tensor() if isinstance(t, DTensor) else t.clone()


def _final(model, opt, original: bool = False) -> dict:
    """Full parameters (``state_dict``: original order) and AdamW state per parameter name (stored order, or the
    original one for a hashed table when ``original``)."""
    hashed = hashed_rows_of(model.embed)
    moments = {}
    for name, p in model.named_parameters():
        state = opt.state[p]
        convert = original and hashed is not None and name == "embed.weight"
        moments[name] = {k: _full(to_original(v, hashed) if convert and v.dim() else v) for k, v in state.items()}
    return {"params": {k: _full(v) for k, v in model.state_dict().items()}, "moments": moments}


def _train(model, opt, rank: int, root, start: int) -> None:
    for step in range(start, STEPS):
        _step(model, opt, rank, step)
        ckpt.save(root, model, opt, step=step + 1, extra={"next": step + 1}, keep=3)


def _uninterrupted(rank, world, root):
    mesh = init_device_mesh("cpu", (world,))
    model, opt = _build(mesh, hashed=True)
    _train(model, opt, rank, root, 0)
    out = {"final": _final(model, opt), "original": _final(model, opt, original=True)}
    # step 5's checkpoint read by a stock, unhashed model, which takes step 6 itself
    stock, stock_opt = _build(mesh, hashed=False)
    out["loaded"] = ckpt.load(ckpt.step_dir(root, STEPS - 1), stock, stock_opt)
    _step(stock, stock_opt, rank, STEPS - 1)
    out["stock"] = _final(stock, stock_opt)
    return out


def _killed(rank, world, root):
    mesh = init_device_mesh("cpu", (world,))
    model, opt = _build(mesh, hashed=True)
    if rank == 1:  # dies right after its shards of step 4's checkpoint are written, before the commit
        real = ckpt.dcp.save

        def save_then_die(state, checkpoint_id):
            real(state, checkpoint_id=checkpoint_id)
            if Path(checkpoint_id) == partial_checkpoint_dir(root, KILLED_AT):
                os.kill(os.getpid(), signal.SIGKILL)

        ckpt.dcp = types.SimpleNamespace(save=save_then_die, load=ckpt.dcp.load)
    _train(model, opt, rank, root, 0)


def _resumed(rank, world, root):
    mesh = init_device_mesh("cpu", (world,))
    model, opt = _build(mesh, hashed=True)
    start, extra = ckpt.load(ckpt.newest(root), model, opt)
    assert extra == {"next": start}
    _train(model, opt, rank, root, start)
    return start, _final(model, opt)


def _assert_equal(got: dict, want: dict, what: str) -> None:
    for kind in ("params", "moments"):
        for name, v in want[kind].items():
            pairs = v.items() if kind == "moments" else [("", v)]
            for k, t in pairs:
                g = got[kind][name][k] if kind == "moments" else got[kind][name]
                assert torch.equal(g, t), f"{what}: {kind} {name} {k} differ"


def test_killed_mid_checkpoint_resumes_bit_for_bit_and_files_are_in_the_original_order(tmp_path):
    world = 2
    whole = fork_launch(_uninterrupted, world, tmp_path / "whole", timeout_s=60)
    for r in whole:
        assert r["loaded"] == (STEPS - 1, {"next": STEPS - 1})
        _assert_equal(r["stock"], r["original"], "an unhashed model from the hashed checkpoint, one step on")
    assert ckpt.complete(tmp_path / "whole") == [ckpt.step_dir(tmp_path / "whole", s) for s in (4, 5, 6)]  # keep=3

    with pytest.raises(RankFailedError):
        fork_launch(_killed, world, tmp_path / "run", timeout_s=60)
    assert ckpt.newest(tmp_path / "run") == ckpt.step_dir(tmp_path / "run", KILLED_AT - 1)
    assert (partial_checkpoint_dir(tmp_path / "run", KILLED_AT) / ".metadata").exists()  # DCP's files, uncommitted

    resumed = fork_launch(_resumed, world, tmp_path / "run", timeout_s=60)
    for r, w in zip(resumed, whole):
        assert r[0] == KILLED_AT - 1
        _assert_equal(r[1], w["final"], "resumed vs uninterrupted")
    assert ckpt.newest(tmp_path / "run") == ckpt.step_dir(tmp_path / "run", STEPS)
    assert not list((tmp_path / "run").glob("*.partial"))
