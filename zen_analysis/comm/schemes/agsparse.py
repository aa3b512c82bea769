"""``agsparse``: all-gather every rank's COO (indices and values), then sum locally (one-shot aggregation).

What PyTorch DDP does for sparse gradients. It cannot exploit overlap: every rank receives every other rank's
non-zeros, so its volume grows linearly with the number of ranks (paper section 2.4).
"""

from __future__ import annotations

import torch

from zen_analysis.comm.exchange import Exchange, index_bytes, index_dtype
from zen_analysis.comm.schemes.base import CommScheme, coo_of
from zen_analysis.comm.traffic import Traffic


class AGSparse(CommScheme):
    name = "agsparse"

    def _run(self, x_N: torch.Tensor, ex: Exchange) -> torch.Tensor:
        idx_K, val_K = coo_of(x_N)
        with ex.phase("allgather"):
            counts_W = ex.all_gather_counts(idx_K.numel())
            all_idx = ex.all_gather_v(idx_K.to(index_dtype(x_N.numel())), counts_W)
            all_val = ex.all_gather_v(val_K, counts_W)
        return torch.zeros_like(x_N).index_add_(0, all_idx.long(), all_val)

    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        t.counts("allgather")
        t.all_gather("allgather", [s.numel() * (index_bytes(numel) + 4) for s in sets])
