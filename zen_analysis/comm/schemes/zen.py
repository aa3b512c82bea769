"""``zen``: Balanced Parallelism with COO push and hash-bitmap pull (Zen, OSDI'25, sections 3.2-3.3).

Push: every non-zero goes to the owner h0(idx) mod n (count exchange + ``all_to_all_single``). Pull: each owner
sends a bitmap over its static hash set S_p plus the summed values of the set bits; the bitmaps have sizes every
rank knows, and the number of values follows from them, so the pull needs no count exchange.

The implementation is Zen's own (:func:`zen_analysis.zen.sparse_allreduce.zen_sum`): the push buckets come from
hierarchical hashing (Algorithm 1) or a stable grouping by server (``hashing``), which changes how they are built,
not what goes on the wire.

Host syncs: listed in :mod:`zen_analysis.zen.sparse_allreduce` (the push counts and the pull's value counts).

Shape suffixes: N elements of the flat tensor, K non-zero rows on this rank, D values per row (the table's width).
"""

from __future__ import annotations

import torch

from zen_analysis.comm.schemes.base import CommScheme
from zen_analysis.comm.schemes.parallelism import push_traffic
from zen_analysis.pricing.traffic import Traffic
from zen_analysis.wire.exchange import Exchange
from zen_analysis.zen.bitmap import bitmap_bytes, hash_partition_sizes
from zen_analysis.zen.hashing import hash_owner
from zen_analysis.zen.sparse_allreduce import HASHINGS, zen_sum, zen_sum_rows


class Zen(CommScheme):
    hashed = True
    name = "zen"
    folds_agreement = True  # the push's count exchange carries the ranks' agreement check

    def __init__(self, *, seed: int = 0, hashing: str = "auto") -> None:
        super().__init__()
        if hashing not in HASHINGS:
            raise ValueError(f"hashing must be one of {HASHINGS}, got {hashing!r}")
        self.seed = seed
        """Seed of h0; every rank must use the same (Zen broadcasts it at start-up)."""
        self.hashing = hashing
        """How the push buckets are built: Algorithm 1 (``hierarchical``) or a plain argsort; same wire bytes."""

    def _run(self, x_N: torch.Tensor, ex: Exchange) -> None:
        zen_sum(x_N, ex, seed=self.seed, hashing=self.hashing)

    def _sum_rows(
        self, rows_K: torch.Tensor, values_KD: torch.Tensor, num_rows: int, ex: Exchange
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return zen_sum_rows(rows_K, values_KD, num_rows, ex, seed=self.seed)

    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        owned = push_traffic(sets, numel, t, hash_owner(t.world, self.seed, numel=numel))
        sizes = hash_partition_sizes(numel, t.world, self.seed)
        t.all_gather("pull", [bitmap_bytes(s) for s in sizes])
        t.all_gather("pull", owned * t.value_bytes)
