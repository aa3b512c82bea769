"""Shared by the Parallelism schemes: push each non-zero to the rank that owns its index, owners sum.

Push = count exchange + ``all_to_all_single`` of COO indices and values, bucketed by owner. The owner keeps the
set of indices it received (a value may sum to zero; the index still counts), so the pull volume depends on the
index sets alone.

Host syncs of the push (each fixes a size): the non-zero extraction (``torch.nonzero``), the exchanged counts
(split sizes), the owner's ``torch.unique`` of what it received.

:class:`PushPullCOO` is push then a COO pull: each owner all-gathers its sums in COO (``sparse_ps`` and
``bp_coo``, which differ only in the owner mapping); host sync of the pull: the all-gathered counts.

Shape suffixes: N elements of the flat tensor, K non-zeros on this rank (elements, or rows), D values per row (the
table's width), W ranks in the group.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from zen_analysis.comm.schemes.base import CommScheme, coo_of
from zen_analysis.pricing.traffic import Traffic
from zen_analysis.sparsity.metrics import union_of
from zen_analysis.wire.coo import coo_words, index_bytes, pack_coo, row_width, unpack_coo
from zen_analysis.wire.exchange import Exchange, push_to_owners

Owner = Callable[[torch.Tensor], torch.Tensor]


def push(
    idx_K: torch.Tensor, val_K: torch.Tensor, numel: int, ex: Exchange, owner: Owner
) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices, summed values) this rank owns after the push phase of its non-zeros ``idx_K`` / ``val_K``
    (values (K,), or rows (K, D) of a ``numel``-row table); indices sorted ascending."""
    own_K = owner(idx_K)
    order = torch.argsort(own_K, stable=True)
    idx_K, val_K = idx_K[order], val_K[order]
    return push_to_owners(idx_K, val_K, torch.bincount(own_K, minlength=ex.world), numel, ex)


def push_traffic(sets: list[torch.Tensor], numel: int, t: Traffic, owner: Owner) -> np.ndarray:
    """Push bytes for every rank; returns how many distinct indices each owner holds after the push (the size
    of the union of all sets within its partition), shape (W,)."""
    W = t.world
    width = index_bytes(numel) + t.value_bytes
    matrix = np.stack([np.bincount(owner(s).numpy(), minlength=W) for s in sets]) * width
    t.counts("push")
    t.all_to_all("push", matrix)
    return np.bincount(owner(union_of(sets, numel)).numpy(), minlength=W)


class PushPullCOO(CommScheme):
    """Push to owners, then every owner's sums all-gathered in COO; a subclass gives the owner mapping."""

    folds_agreement = True

    def owner(self, numel: int, world: int, *, model: bool = False) -> Owner:
        """The owner mapping on ``world`` ranks; ``model``: the traffic model's (possibly table-based) form."""
        raise NotImplementedError

    def _run(self, x_N: torch.Tensor, ex: Exchange) -> None:
        all_idx, all_val = self._sum_coo(*coo_of(x_N), x_N.numel(), ex)
        # owners' sets are disjoint, and their union holds this rank's non-zeros: every other position of x_N is
        # zero already, so the sums are written in place with no dense zeroing
        x_N[all_idx.to(x_N.device)] = all_val.to(x_N.device)

    def _sum_rows(
        self, rows_K: torch.Tensor, values_KD: torch.Tensor, num_rows: int, ex: Exchange
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._sum_coo(rows_K, values_KD, num_rows, ex)

    def _sum_coo(
        self, idx_K: torch.Tensor, val_K: torch.Tensor, numel: int, ex: Exchange
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices, sums) of the union: each owner's sums after the push, all-gathered in COO (values (K,) or
        rows (K, D))."""
        u_idx, u_val = push(idx_K, val_K, numel, ex, self.owner(numel, ex.world))
        width = row_width(val_K)
        with ex.phase("pull"):
            counts_W = ex.all_gather_counts(u_idx.numel())
            got = ex.all_gather_v(pack_coo(u_idx, u_val, numel), counts_W * coo_words(numel, val_K.dtype, width))
        return unpack_coo(got, numel, val_K.dtype, width)

    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        owned = push_traffic(sets, numel, t, self.owner(numel, t.world, model=True))
        t.counts("pull")
        t.all_gather("pull", owned * (index_bytes(numel) + t.value_bytes))
