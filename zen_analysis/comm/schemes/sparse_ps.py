"""``sparse_ps`` and ``bp_coo``: owners aggregate, then each owner broadcasts its aggregate in COO.

* ``sparse_ps`` (Parameter-Server style, as in Parallax): owners hold even contiguous ranges. Skewed gradients
  (the paper's C3) make the owner of the hot range the bottleneck: imbalanced Parallelism.
* ``bp_coo`` (Balanced Parallelism with COO both ways): owners are chosen by Zen's first-level hash h0, which
  balances push and pull (paper Theorem 2).

Host syncs: the push's (:mod:`~zen_analysis.comm.schemes.owner`), then the all-gathered pull counts (split
sizes).
"""

from __future__ import annotations

import torch

from zen_analysis.comm.exchange import Exchange, coo_words, index_bytes, pack_coo, unpack_coo
from zen_analysis.comm.schemes.base import CommScheme
from zen_analysis.comm.schemes.owner import Owner, push, push_traffic
from zen_analysis.comm.traffic import Traffic
from zen_analysis.sparsity.metrics import contiguous_owner
from zen_analysis.zen.hashing import hash_owner


class _PushPullCOO(CommScheme):
    def owner(self, numel: int, world: int, *, model: bool = False) -> Owner:
        """The owner mapping on ``world`` ranks; ``model``: the traffic model's (possibly table-based) form."""
        raise NotImplementedError

    def _run(self, x_N: torch.Tensor, ex: Exchange) -> None:
        u_idx, u_val = push(x_N, ex, self.owner(x_N.numel(), ex.world))
        N, w = x_N.numel(), coo_words(x_N.numel())
        with ex.phase("pull"):
            counts_W = ex.all_gather_counts(u_idx.numel())
            got = ex.all_gather_v(pack_coo(u_idx, u_val, N), counts_W * w)
        all_idx, all_val = unpack_coo(got, N)
        # owners' sets are disjoint, and their union holds this rank's non-zeros: every other position of x_N is
        # zero already, so the sums are written in place with no dense zeroing
        x_N[all_idx.to(x_N.device)] = all_val.to(x_N.device)

    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        owned = push_traffic(sets, numel, t, self.owner(numel, t.world, model=True))
        t.counts("pull")
        t.all_gather("pull", owned * (index_bytes(numel) + 4))


class SparsePS(_PushPullCOO):
    name = "sparse_ps"

    def owner(self, numel: int, world: int, *, model: bool = False) -> Owner:
        return contiguous_owner(numel, world)


class BPCOO(_PushPullCOO):
    name = "bp_coo"
    hashed = True

    def __init__(self, *, seed: int = 0) -> None:
        super().__init__()
        self.seed = seed
        """Seed of h0; every rank must use the same (Zen broadcasts it at start-up)."""

    def owner(self, numel: int, world: int, *, model: bool = False) -> Owner:
        return hash_owner(world, self.seed, numel=numel if model else None)
