"""Zen under FSDP2 on the GPU (CUDA over NCCL; CPU over gloo in the rehearsal, see conftest.py): the sparse
reduce-scatter (called directly at world size 1, where FSDP2 itself skips the collective) sums rows as on the CPU,
and the loop trains under FSDP2; with two devices, Zen-FSDP2 with hashed rows trains to stock FSDP2's losses and
parameters. ``scripts/gpu_check.sh`` runs them."""

import os
import subprocess
import sys

import pytest

from zen_analysis import recipes
from zen_analysis.runs.launch import launch

pytestmark = pytest.mark.gpu

SCRIPT = r"""
import os, sys, torch, torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from zen_analysis.fsdp import shard
from zen_analysis.fsdp.reduce_scatter import SparseReduceScatter
from zen_analysis.fsdp.units import EmbeddingUnit

dev = sys.argv[1]
if dev == "cuda":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl" if dev == "cuda" else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh(dev, (world,))

# the comm itself on the device's tensors (FSDP2 calls it only when world > 1)
emb = nn.Embedding(1001, 8).to(dev)
rs = SparseReduceScatter(EmbeddingUnit(unit=emb, embedding=emb, name="t"), row_source="scan")
per = -(-1001 // world)
table = torch.zeros(world * per, 8, device=dev)
table[[3, 500, 1000]] = torch.arange(24, dtype=torch.float32, device=dev).view(3, 8)
out = torch.empty(per * 8, device=dev)
rs(out, table.view(-1), dist.group.WORLD, dist.ReduceOp.SUM)
want = torch.zeros(world * per, 8, device=dev)
want[[3, 500, 1000]] = world * torch.arange(24, dtype=torch.float32, device=dev).view(3, 8)
assert torch.equal(out.view(per, 8), want[rank * per : (rank + 1) * per]), "sparse reduce-scatter on " + dev

class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(1001, 16)
        self.head = nn.Linear(16, 1001)
    def forward(self, x):
        return self.head(torch.tanh(self.embed(x)))

runs = {}
for zen in (False, True):
    torch.manual_seed(0)
    model = LM().to(dev)
    if zen:
        shard(model, mesh=mesh)
    else:
        fully_shard(model.embed, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for step in range(5):
        x = torch.randint(0, 1001, (4, 9), generator=torch.Generator().manual_seed(10 * step + rank)).to(dev)
        loss = nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    runs[zen] = (losses, {k: v.full_tensor().cpu() for k, v in model.state_dict().items()})
torch.testing.assert_close(torch.tensor(runs[True][0]), torch.tensor(runs[False][0]), rtol=1e-5, atol=1e-6)
for k, v in runs[False][1].items():
    torch.testing.assert_close(runs[True][1][k], v, rtol=1e-5, atol=1e-6)
if rank == 0:
    print("fsdp ok", world)
dist.destroy_process_group()
"""


def _run(tmp_path, ranks: int, device: str) -> None:
    script = tmp_path / "fsdp_device.py"
    script.write_text(SCRIPT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), str(script)]
    proc = subprocess.run([*cmd, device], capture_output=True, text=True, timeout=600, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"fsdp ok {ranks}" in proc.stdout, proc.stdout


def test_the_sparse_reduce_scatter_runs_on_the_device(tmp_path, device):
    _run(tmp_path, 1, device)


@pytest.mark.multigpu
def test_zen_fsdp2_on_two_gpus_matches_stock_fsdp2(tmp_path):
    _run(tmp_path, 2, "cuda")


def _loop_cfg(ranks: int, run_id: str, backend: str = "nccl", **sync):
    cfg = recipes.smoke()
    cfg.name = cfg.run_id = run_id
    cfg.dist.num_ranks, cfg.dist.backend, cfg.dist.launcher = ranks, backend, "torchrun"
    cfg.dist.sharding = "fsdp"
    cfg.capture.topk_scope = "none"
    cfg.train.checkpoint_every = 2  # DCP on the device's tensors
    for key, value in sync.items():
        setattr(cfg.sync, key, value)
    return cfg


def test_the_loop_trains_under_fsdp2_on_one_device(backend):
    run = launch(_loop_cfg(1, "gpu-fsdp-loop", backend, method="natural", scheme="zen"), progress=False, echo=False)
    assert run.traces().manifest["finished"] and len(run.metrics()) == 6
    assert (run.run_dir / "checkpoints" / "step-00000004" / "sharded").is_dir()


@pytest.mark.multigpu
def test_the_loop_under_fsdp2_on_two_gpus_zen_equals_stock():
    stock = launch(_loop_cfg(2, "gpu-fsdp-stock"), progress=False, echo=False)
    zen = launch(_loop_cfg(2, "gpu-fsdp-zen", method="natural", scheme="zen"), progress=False, echo=False)
    assert zen.summary["param_sha256"] == stock.summary["param_sha256"]
