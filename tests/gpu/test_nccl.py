"""Runs through the same launcher as on a GPU cluster (torchrun, NCCL; gloo on CPU in the rehearsal, see
conftest.py): one rank trains and captures; the DDP example's hooks run; two GPUs stay identical."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from zen_analysis import recipes
from zen_analysis.runs.launch import launch

pytestmark = pytest.mark.gpu


def _cfg(num_ranks: int, backend: str):
    cfg = recipes.smoke()
    cfg.dist.num_ranks = num_ranks
    cfg.dist.backend = backend
    cfg.dist.launcher = "torchrun"
    return cfg


def test_one_rank_trains_and_captures(backend):
    result = launch(_cfg(1, backend), progress=False, echo=False)
    reader = result.traces()
    assert reader.manifest["finished"] and set(reader.summary()["kind"]) == {"natural", "topk"}


@pytest.mark.multigpu
def test_two_gpu_ranks_stay_identical():
    result = launch(_cfg(2, "nccl"), progress=False, echo=False)
    assert len({s["param_sha256"] for s in result.results.values()}) == 1


@pytest.mark.parametrize("flags", [["--zen", "natural", "--sparse-embedding"], ["--zen", "topk", "--overlap"]])
def test_the_ddp_example_runs(tmp_path, flags, backend):
    """scripts/ddp_transformers.py on one rank per GPU (at most 2; one rank in the rehearsal): the natural hook sums
    a sparse=True embedding (stock DDP has no sparse all-reduce on NCCL), the top-k hook overlaps on a worker
    thread."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "ddp_transformers.py"
    out = tmp_path / "metrics.json"
    ranks = max(1, min(2, torch.cuda.device_count()))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", str(script)]
    cmd += ["--size", "smoke", "--steps", "4", "--out", str(out), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["backend"] == backend and len(result["steps"]) == 4
    assert all(torch.isfinite(torch.tensor(s["loss"])) for s in result["steps"])
    if ranks > 1:
        assert result["steps"][-1]["sparse_bytes"] > 0
