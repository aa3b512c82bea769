"""Zen on the GPU: Algorithm 1 and the hash bitmap give the CPU's answers; every scheme's push and pull run on the
device's tensors at world size 1; Zen trains the default recipe. On a GPU machine: CUDA over NCCL; in the rehearsal
(``ZEN_GPU_REHEARSE=1``, see conftest.py): CPU over gloo. ``scripts/gpu_check.sh`` runs them."""

import copy
import subprocess
import sys
import textwrap

import pytest
import torch

from zen_analysis import recipes
from zen_analysis.runs.launch import launch
from zen_analysis.zen.bitmap import HashBitmap
from zen_analysis.zen.hierarchical import hierarchical_hash

pytestmark = pytest.mark.gpu


def test_hierarchical_hash_and_bitmap_on_the_device_match_cpu(device):
    idx = torch.randperm(1 << 22, generator=torch.Generator().manual_seed(0))[:200_000]
    cpu = hierarchical_hash(idx, 16, seed=3, backend="torch")
    dev = hierarchical_hash(idx.to(device), 16, seed=3)
    assert torch.equal(dev.counts_n.cpu(), cpu.counts_n)
    for a, b in zip(cpu.split(idx), dev.split(idx.to(device))):
        assert b.device.type == device
        assert torch.equal(torch.sort(a).values, torch.sort(b.cpu()).values)
    hb = HashBitmap(1 << 22, 16, 3)
    part = hb.partition(5).long()[::3]
    values = torch.arange(part.numel(), dtype=torch.float32)
    bits, vals = hb.encode(5, part.to(device), values.to(device))
    got, v = hb.decode(5, bits, vals)
    assert got.device.type == device
    assert torch.equal(got.cpu(), part) and torch.equal(v.cpu(), values)


def _cfg(num_ranks: int, scheme: str, backend: str):
    cfg = recipes.smoke()
    cfg.dist.num_ranks = num_ranks
    cfg.dist.backend = backend
    cfg.dist.launcher = "torchrun"
    cfg.sync.method, cfg.sync.scheme = ("dense" if scheme == "allreduce" else "natural"), scheme
    cfg.capture.enabled = False
    return copy.deepcopy(cfg)


def test_one_rank_trains_the_default_recipe_with_zen(backend):
    result = launch(_cfg(1, "zen", backend), progress=False, echo=False)
    assert result.metrics()["loss"].notna().all()


@pytest.mark.multigpu
def test_zen_on_two_gpus_matches_dense_all_reduce():
    dense = launch(_cfg(2, "allreduce", "nccl"), progress=False, echo=False).metrics()["loss"]
    zen = launch(_cfg(2, "zen", "nccl"), progress=False, echo=False).metrics()
    torch.testing.assert_close(torch.tensor(zen["loss"].values), torch.tensor(dense.values), rtol=1e-4, atol=1e-5)
    assert (zen["sparse_bytes_sent_rank0"] > 0).all()


_ONE_RANK = textwrap.dedent(
    """
    import os, sys, tempfile, torch, torch.distributed as dist
    from zen_analysis.comm import SCHEMES, build_scheme
    device, backend = sys.argv[1], sys.argv[2]
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    if device == "cuda":
        torch.cuda.set_device(0)
        dist.init_process_group(backend, store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0))
    else:
        dist.init_process_group(backend, store=store, rank=0, world_size=1)
    x = torch.zeros(1 << 20, device=device)
    x[::97] = torch.arange(1, 1 + x[::97].numel(), device=device, dtype=torch.float32)
    for name in SCHEMES:
        scheme = build_scheme(name)
        y = scheme.run(x.clone())
        assert y.device.type == device and torch.equal(y, x), name
        print(name, int(scheme.last_measured()["calls"].sum()), "calls")
    dist.destroy_process_group()
    print("ok")
    """
)


def test_every_scheme_runs_its_push_and_pull_on_the_device_at_world_size_one(device, backend):
    """Zen's push and pull themselves (not a training step, which skips the sync at world size 1)."""
    cmd = [sys.executable, "-c", _ONE_RANK, device, backend]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr[-3000:]
