"""Zen on CUDA: Algorithm 1 and the hash bitmap give the CPU's answers; Zen trains through NCCL. Skipped
without CUDA devices (``scripts/gpu_check.sh`` runs these plus the Fig. 16 timing on a GPU machine)."""

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
needs_cuda = pytest.mark.skipif(torch.cuda.device_count() < 1, reason="needs a CUDA device")


@needs_cuda
def test_hierarchical_hash_and_bitmap_on_cuda_match_cpu():
    idx = torch.randperm(1 << 22, generator=torch.Generator().manual_seed(0))[:200_000]
    cpu = hierarchical_hash(idx, 16, seed=3)
    gpu = hierarchical_hash(idx.cuda(), 16, seed=3)
    assert torch.equal(gpu.counts_n.cpu(), cpu.counts_n)
    for a, b in zip(cpu.split(idx), gpu.split(idx.cuda())):
        assert torch.equal(torch.sort(a).values, torch.sort(b.cpu()).values)
    hb = HashBitmap(1 << 22, 16, 3)
    part = hb.partition(5).long()[::3]
    bits, vals = hb.encode(5, part.cuda(), torch.arange(part.numel(), dtype=torch.float32).cuda())
    got, v = hb.decode(5, bits, vals)
    assert torch.equal(got.cpu(), part) and torch.equal(v.cpu(), torch.arange(part.numel(), dtype=torch.float32))


def _cfg(num_ranks: int, scheme: str):
    cfg = recipes.smoke()
    cfg.dist.num_ranks = num_ranks
    cfg.dist.backend = "nccl"
    cfg.dist.launcher = "torchrun"
    cfg.sync.method, cfg.sync.scheme = ("dense" if scheme == "allreduce" else "natural"), scheme
    cfg.capture.enabled = False
    return copy.deepcopy(cfg)


@needs_cuda
def test_one_gpu_rank_trains_with_zen():
    result = launch(_cfg(1, "zen"), progress=False, echo=False)
    assert result.metrics()["loss"].notna().all()


@pytest.mark.multigpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_zen_on_two_gpus_matches_dense_all_reduce():
    dense = launch(_cfg(2, "allreduce"), progress=False, echo=False).metrics()["loss"]
    zen = launch(_cfg(2, "zen"), progress=False, echo=False).metrics()
    torch.testing.assert_close(torch.tensor(zen["loss"].values), torch.tensor(dense.values), rtol=1e-4, atol=1e-5)
    assert (zen["sparse_bytes_sent_rank0"] > 0).all()


_ONE_RANK = textwrap.dedent(
    """
    import os, tempfile, torch, torch.distributed as dist
    from zen_analysis.comm import SCHEMES, build_scheme
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0))
    x = torch.zeros(1 << 20, device="cuda")
    x[::97] = torch.arange(1, 1 + x[::97].numel(), device="cuda", dtype=torch.float32)
    for name in SCHEMES:
        scheme = build_scheme(name)
        y = scheme.run(x.clone())
        assert y.device.type == "cuda" and torch.equal(y, x), name
        print(name, int(scheme.last_measured()["calls"].sum()), "calls")
    dist.destroy_process_group()
    print("ok")
    """
)


@needs_cuda
def test_every_scheme_runs_its_push_and_pull_on_cuda_at_world_size_one():
    """Zen's push and pull themselves (not a training step, which skips the sync at world size 1) on NCCL."""
    proc = subprocess.run([sys.executable, "-c", _ONE_RANK], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr[-3000:]
