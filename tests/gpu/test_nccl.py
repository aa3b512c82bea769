"""GPU runs through the same launcher (torchrun + NCCL); skipped on machines without enough CUDA devices."""

import pytest
import torch

from zen_analysis import recipes
from zen_analysis.runs.launch import launch

pytestmark = pytest.mark.gpu


def _cfg(num_ranks):
    cfg = recipes.smoke()
    cfg.dist.num_ranks = num_ranks
    cfg.dist.backend = "nccl"
    cfg.dist.launcher = "torchrun"
    return cfg


@pytest.mark.skipif(torch.cuda.device_count() < 1, reason="needs a CUDA device")
def test_one_gpu_rank_trains_and_captures():
    result = launch(_cfg(1), progress=False, echo=False)
    reader = result.traces()
    assert reader.manifest["finished"] and set(reader.summary()["kind"]) == {"natural", "topk"}


@pytest.mark.multigpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_gpu_ranks_stay_identical():
    result = launch(_cfg(2), progress=False, echo=False)
    assert len({s["param_sha256"] for s in result.results.values()}) == 1


@pytest.mark.skipif(torch.cuda.device_count() < 1, reason="needs a CUDA device")
@pytest.mark.parametrize("flags", [["--zen", "natural", "--sparse-embedding"], ["--zen", "topk", "--overlap"]])
def test_the_ddp_example_runs_on_nccl(tmp_path, flags):
    """scripts/ddp_transformers.py on NCCL ranks (one per GPU, at most 2): the natural hook sums a sparse=True
    embedding (stock DDP has no sparse all-reduce on NCCL), the top-k hook overlaps on a worker thread."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "ddp_transformers.py"
    out = tmp_path / "metrics.json"
    ranks = min(2, torch.cuda.device_count())
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={ranks}",
            str(script),
            "--size",
            "smoke",
            "--steps",
            "4",
            "--out",
            str(out),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["backend"] == "nccl" and len(result["steps"]) == 4
    assert all(torch.isfinite(torch.tensor(s["loss"])) for s in result["steps"])
    if ranks > 1:
        assert result["steps"][-1]["sparse_bytes"] > 0
