"""GPU runs through the same launcher (torchrun + NCCL); skipped on machines without enough CUDA devices."""

import pytest
import torch

from zen_analysis import recipes
from zen_analysis.dist.launch import launch

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
