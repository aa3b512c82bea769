"""Checkpoints written before the one checkpoint protocol (:mod:`zen_analysis.atomic`) still resume.

``tests/data/checkpoints_2026-12/`` holds what main wrote then (its README says how): a training run killed by
SIGKILL at step 3 with its checkpoint ``step-00000002/`` (``meta.json``, the loop's layout), and an FSDP2 model's
checkpoint through :mod:`zen_analysis.fsdp.dcp` in that module's layout (``step-3/``, ``zen.json``, no
checksums), each with what the uninterrupted run gave."""

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

import zen_analysis.fsdp.dcp as ckpt
from zen_analysis import paths
from zen_analysis.config import ExperimentConfig
from zen_analysis.fsdp import shard
from zen_analysis.fsdp.hashed import hashed_rows_of, to_original
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.runs.launch import launch
from zen_analysis.runs.rundir import list_runs

EARLIER = Path(__file__).parents[1] / "data" / "checkpoints_2026-12"


def test_a_run_checkpointed_in_the_earlier_layout_resumes_to_the_uninterrupted_runs_losses():
    stored = EARLIER / "ddp-run"
    cfg = ExperimentConfig.from_dict(json.loads((stored / "config.json").read_text()))
    run_dir = paths.run_dir(cfg.run_id)
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(stored, run_dir)
    (row,) = [r for r in list_runs() if r["run_id"] == cfg.run_id]
    assert (row["checkpoint"], row["resumable"]) == (2, True)

    resumed = launch(copy.deepcopy(cfg), resume=True, progress=False, echo=False)
    assert "resumed from step 2 (step-00000002)" in (run_dir / "logs" / "rank0.log").read_text()
    want = json.loads((EARLIER / "ddp-run.expected.json").read_text())
    got = resumed.metrics()
    assert got["step"].tolist() == list(range(cfg.train.num_steps))
    # steps 0-1 are the stored rows; 2-5 ran here from the stored state (another CPU may round otherwise: approx)
    assert got["loss"].tolist() == pytest.approx(want["loss"], rel=1e-6)
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["step-00000002", "step-00000004"]
    assert "extra" in json.loads((run_dir / "checkpoints" / "step-00000004" / "meta.json").read_text())


VOCAB, DIM, CLASSES = 64, 4, 3
"""The stored FSDP2 checkpoint's model: an embedding hashed by :func:`zen_analysis.fsdp.shard` (seed 3), a head."""


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


def _step(model, opt, rank: int, step: int) -> None:
    """One AdamW step on a batch that is a pure function of (step, rank), as the stored run took."""
    g = torch.Generator().manual_seed(1000 * step + rank + 1)
    ids = torch.clamp((torch.rand(4, 6, generator=g) ** 3 * VOCAB).long(), max=VOCAB - 1)
    classes = torch.randint(0, CLASSES, (4, 6), generator=g)
    F.cross_entropy(model(ids).flatten(0, 1), classes.flatten()).backward()
    opt.step()
    opt.zero_grad()


def _full(t):
    return t.full_tensor() if isinstance(t, DTensor) else t.clone()


def _state(model, opt) -> dict:
    """Full parameters and AdamW state per parameter name, the hashed table's moments in the original order."""
    hashed = hashed_rows_of(model.embed)
    moments = {}
    for name, p in model.named_parameters():
        convert = name == "embed.weight"
        moments[name] = {
            k: _full(to_original(v, hashed) if convert and v.dim() else v) for k, v in opt.state[p].items()
        }
    return {"params": {k: _full(v) for k, v in model.state_dict().items()}, "moments": moments}


def _resume(rank, world, root):
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(1)  # not the stored run's initialization: every value must come from the files
    model = _Model()
    shard(model, mesh=mesh, seed=3)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    found = ckpt.newest(root)
    start, extra = ckpt.load(found, model, opt)
    loaded = _state(model, opt)
    for step in range(start, 5):
        _step(model, opt, rank, step)
        ckpt.save(root, model, opt, step=step + 1, extra={"next": step + 1}, keep=2)
    return found.name, start, extra, loaded, _state(model, opt)


def test_an_fsdp_checkpoint_in_the_earlier_layout_loads_exactly_and_training_goes_on(tmp_path):
    shutil.copytree(EARLIER / "fsdp-dcp", tmp_path / "ckpt")
    want = torch.load(EARLIER / "fsdp-dcp.expected.pt", weights_only=True)
    for name, start, extra, loaded, final in fork_launch(_resume, 2, tmp_path / "ckpt", timeout_s=60):
        assert (name, start, extra) == ("step-3", 3, {"next": 3})
        for kind in ("params", "moments"):
            torch.testing.assert_close(loaded[kind], want["at_3"][kind], rtol=0, atol=0)  # the files, bit for bit
            torch.testing.assert_close(final[kind], want["at_5"][kind])  # two steps on, as the stored run went
    assert [p.name for p in ckpt.complete(tmp_path / "ckpt")] == ["step-00000004", "step-00000005"]  # keep=2
