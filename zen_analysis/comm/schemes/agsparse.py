"""``agsparse``: all-gather every rank's COO (indices and values), then sum locally (one-shot aggregation).

What PyTorch DDP does for sparse gradients. It cannot exploit overlap: every rank receives every other rank's
non-zeros, so its volume grows linearly with the number of ranks (paper section 2.4).

Host syncs (on CUDA each waits for the device; every one fixes a size): the non-zero extraction
(``torch.nonzero``), the all-gathered counts (split sizes).

Shape suffixes: N elements of the flat tensor, K non-zeros on this rank (elements, or rows), D values per row (the
table's width), W ranks in the group.
"""

from __future__ import annotations

import torch

from zen_analysis.comm.schemes.base import CommScheme, coo_of
from zen_analysis.pricing.traffic import Traffic
from zen_analysis.wire.coo import coo_words, index_bytes, pack_coo, sum_by_index, unpack_coo
from zen_analysis.wire.dtypes import accumulate_dtype
from zen_analysis.wire.exchange import Exchange


class AGSparse(CommScheme):
    name = "agsparse"
    folds_agreement = True

    def _run(self, x_N: torch.Tensor, ex: Exchange) -> None:
        idx_K, val_K = coo_of(x_N)
        N, w = x_N.numel(), coo_words(x_N.numel(), x_N.dtype)
        with ex.phase("allgather"):
            counts_W = ex.all_gather_counts(idx_K.numel())
            got = ex.all_gather_v(pack_coo(idx_K, val_K, N), counts_W * w)
        all_idx, all_val = unpack_coo(got, N, x_N.dtype)
        if accumulate_dtype(x_N.dtype) != x_N.dtype:  # fp16/bf16: every rank's block in rank order, rounded once
            u_idx, sums = sum_by_index(all_idx.to(x_N.device), all_val.to(x_N.device))
            x_N[u_idx] = sums  # the union holds this rank's non-zeros: the rest is zero already
            return
        # in place, no dense zeroing: clear this rank's own non-zeros, then add every rank's block in rank order,
        # so every rank sums in the same order (identical results, not just equal up to rounding)
        x_N.index_fill_(0, idx_K, 0.0)
        x_N.index_add_(0, all_idx.to(x_N.device), all_val.to(x_N.device))

    def _sum_rows(
        self, rows_K: torch.Tensor, values_KD: torch.Tensor, num_rows: int, ex: Exchange
    ) -> tuple[torch.Tensor, torch.Tensor]:
        R, D = num_rows, values_KD.shape[1]
        with ex.phase("allgather"):
            counts_W = ex.all_gather_counts(rows_K.numel())
            got = ex.all_gather_v(pack_coo(rows_K, values_KD, R), counts_W * coo_words(R, values_KD.dtype, D))
        with ex.local("aggregate"):  # every rank's rows in rank order, the same sum on every rank
            all_rows, all_values = unpack_coo(got.to(values_KD.device), R, values_KD.dtype, D)
            return sum_by_index(all_rows, all_values)

    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        t.counts("allgather")
        t.all_gather("allgather", [s.numel() * (index_bytes(numel) + t.value_bytes) for s in sets])
