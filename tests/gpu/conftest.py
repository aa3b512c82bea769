"""The GPU tests' device: CUDA with NCCL where a GPU is visible; on CPU with gloo when ``ZEN_GPU_REHEARSE=1``
(``scripts/gpu_check.sh --rehearse`` sets it, so the check's tests run, and cannot rot, on a machine without a GPU);
skipped otherwise. Tests marked ``multigpu`` need two CUDA devices and are never rehearsed."""

from __future__ import annotations

import os

import pytest
import torch

REHEARSE = os.environ.get("ZEN_GPU_REHEARSE") == "1"
GPUS = torch.cuda.device_count()
DEVICE = "cuda" if GPUS else "cpu"
BACKEND = "nccl" if GPUS else "gloo"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/gpu/" not in item.path.as_posix():
            continue
        if item.get_closest_marker("multigpu") is not None:
            if GPUS < 2:
                item.add_marker(pytest.mark.skip(reason="needs two CUDA devices"))
        elif not GPUS and not REHEARSE:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device (ZEN_GPU_REHEARSE=1 rehearses it on CPU)"))


@pytest.fixture
def device() -> str:
    """``"cuda"`` on a GPU machine, ``"cpu"`` in the rehearsal."""
    return DEVICE


@pytest.fixture
def backend() -> str:
    """``"nccl"`` on a GPU machine, ``"gloo"`` in the rehearsal."""
    return BACKEND
