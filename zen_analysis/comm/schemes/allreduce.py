"""``allreduce``: dense ring all-reduce, the baseline that ignores sparsity (what NCCL/gloo DDP does). No host
sync: one collective on the tensor itself.

Shape suffixes: N elements of the flat tensor, K non-zero rows on this rank, D values per row (the table's width)."""

from __future__ import annotations

import torch

from zen_analysis.comm.schemes.base import CommScheme
from zen_analysis.pricing.traffic import Traffic
from zen_analysis.wire.exchange import Exchange
from zen_analysis.wire.rows import nonzero_rows


class AllReduce(CommScheme):
    name = "allreduce"
    scans_dense = False  # the collective sums in place: no local pass of its own

    def _run(self, x_N: torch.Tensor, ex: Exchange) -> None:
        with ex.phase("allreduce"):
            ex.all_reduce_dense(x_N)

    def _sum_rows(
        self, rows_K: torch.Tensor, values_KD: torch.Tensor, num_rows: int, ex: Exchange
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # the dense table all-reduced (what DDP does with a dense gradient), its non-zero rows returned
        dense = values_KD.new_zeros((num_rows, values_KD.shape[1]))
        dense[rows_K.to(dense.device)] = values_KD
        with ex.phase("allreduce"):
            ex.all_reduce_dense(dense.view(-1))
        u_rows = nonzero_rows(dense)
        return u_rows, dense[u_rows]

    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        width = max(t.width, 1)  # by rows: the dense table of numel x width values
        t.ring_all_reduce("allreduce", numel * width, t.value_bytes // width)
