"""``allreduce``: dense ring all-reduce, the baseline that ignores sparsity (what NCCL/gloo DDP does). No host
sync: one collective on the tensor itself."""

from __future__ import annotations

import torch

from zen_analysis.comm.exchange import Exchange
from zen_analysis.comm.schemes.base import CommScheme
from zen_analysis.comm.traffic import Traffic


class AllReduce(CommScheme):
    name = "allreduce"
    scans_dense = False  # the collective sums in place: no local pass of its own

    def _run(self, x_N: torch.Tensor, ex: Exchange) -> None:
        with ex.phase("allreduce"):
            ex.all_reduce_dense(x_N)

    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        t.ring_all_reduce("allreduce", numel, t.value_bytes)
