"""Zen as a drop-in for DDP (issue 14): the natural-sparsity hook gives stock DDP's parameters after every step,
with the embedding in a bucket of its own or sharing one with dense parameters, on 2 and 4 gloo ranks."""

import pytest
import torch
from torch import nn

from zen_analysis.dist.launch import fork_launch


class _LM(nn.Module):
    def __init__(self, tie: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(600, 16)
        self.hidden = nn.Linear(16, 16)
        self.head = nn.Linear(16, 600, bias=False)
        if tie:
            self.head.weight = self.embed.weight

    def forward(self, x):
        return self.head(torch.tanh(self.hidden(self.embed(x))))


def _train(rank, world, bucket_cap_mb, scheme):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from zen_analysis.zen.ddp import register

    out = {}
    for hook in ("stock", "natural"):
        torch.manual_seed(0)
        model = DDP(_LM(), bucket_cap_mb=bucket_cap_mb)
        state = register(model, mode="natural", scheme=scheme) if hook == "natural" else None
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        params = []
        for step in range(4):
            x = torch.randint(0, 600, (6, 5), generator=torch.Generator().manual_seed(100 * step + rank))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, 600), x[:, 1:].reshape(-1)).backward()
            opt.step()
            params.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone())
        out[hook] = torch.stack(params)
        if state is not None:
            out["state"] = (state.sparse_buckets, state.dense_buckets, state.bytes_sent)
        dist.barrier()
    return out


@pytest.mark.parametrize("world, bucket_cap_mb, scheme", [(2, 0.001, "zen"), (4, 0.001, "zen"), (4, 25.0, "zen"), (2, 25.0, "agsparse")])
def test_natural_hook_gives_stock_ddp_parameters_every_step(world, bucket_cap_mb, scheme):
    for r in fork_launch(_train, world, bucket_cap_mb, scheme):
        torch.testing.assert_close(r["natural"], r["stock"], rtol=1e-5, atol=1e-6)
        sparse_buckets, dense_buckets, sent = r["state"]
        assert sparse_buckets == 4 and sent > 0  # the embedding went through the scheme every step
        # small buckets: the dense layers in buckets of their own (async stock path); one big bucket: shared
        assert (dense_buckets > 0) == (bucket_cap_mb < 1)


def test_sparse_parameters_skip_a_tied_embedding_with_a_warning():
    from zen_analysis.zen.ddp import sparse_parameters

    untied = _LM()
    assert sparse_parameters(untied) == (untied.embed.weight,)
    with pytest.warns(UserWarning, match="embed.weight is tied"):
        assert sparse_parameters(_LM(tie=True)) == ()


def test_the_example_script_under_torchrun_matches_stock_ddp(tmp_path):
    """scripts/ddp_transformers.py, as a user runs it: torchrun, 2 gloo ranks, a transformers Llama."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "ddp_transformers.py"
    losses = {}
    for zen in ("off", "natural"):
        out = tmp_path / f"{zen}.json"
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script),
                               "--size", "smoke", "--steps", "4", "--batch", "4", "--zen", zen, "--out", str(out)],
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        result = json.loads(out.read_text())
        assert result["ranks"] == 2 and result["backend"] == "gloo" and len(result["steps"]) == 4
        losses[zen] = [s["loss"] for s in result["steps"]]
        if zen == "natural":
            assert result["steps"][-1]["zen_bytes_sent_so_far"] > 0
    torch.testing.assert_close(torch.tensor(losses["natural"]), torch.tensor(losses["off"]), rtol=1e-4, atol=1e-5)
