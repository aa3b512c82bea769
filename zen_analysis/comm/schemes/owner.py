"""Shared by the Parallelism schemes: push each non-zero to the rank that owns its index, owners sum.

Push = count exchange + ``all_to_all_single`` of COO indices and values, bucketed by owner. The owner keeps the
set of indices it received (a value may sum to zero; the index still counts), so the pull volume depends on the
index sets alone.

Host syncs of the push (each fixes a size): the non-zero extraction (``torch.nonzero``), the exchanged counts
(split sizes), the owner's ``torch.unique`` of what it received.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from zen_analysis.comm.exchange import Exchange, index_bytes, push_to_owners
from zen_analysis.comm.schemes.base import coo_of
from zen_analysis.comm.traffic import Traffic
from zen_analysis.sparsity.metrics import union_of

Owner = Callable[[torch.Tensor], torch.Tensor]


def push(x_N: torch.Tensor, ex: Exchange, owner: Owner) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices, summed values) this rank owns after the push phase; indices sorted ascending."""
    idx_K, val_K = coo_of(x_N)
    own_K = owner(idx_K)
    order = torch.argsort(own_K, stable=True)
    idx_K, val_K = idx_K[order], val_K[order]
    return push_to_owners(idx_K, val_K, torch.bincount(own_K, minlength=ex.world), x_N.numel(), ex)


def push_traffic(sets: list[torch.Tensor], numel: int, t: Traffic, owner: Owner) -> np.ndarray:
    """Push bytes for every rank; returns how many distinct indices each owner holds after the push (the size
    of the union of all sets within its partition), shape (W,)."""
    W = t.world
    width = index_bytes(numel) + 4
    matrix = np.stack([np.bincount(owner(s).numpy(), minlength=W) for s in sets]) * width
    t.counts("push")
    t.all_to_all("push", matrix)
    return np.bincount(owner(union_of(sets, numel)).numpy(), minlength=W)
