"""``bp_coo``: Balanced Parallelism with COO both ways. Owners are chosen by Zen's first-level hash h0, which
balances push and pull (paper Theorem 2); the pull is each owner's aggregate broadcast in COO, not Zen's hash
bitmap. Host syncs: the push's and the pull's (:mod:`~zen_analysis.comm.schemes.parallelism`).
"""

from __future__ import annotations

from zen_analysis.comm.schemes.parallelism import Owner, PushPullCOO
from zen_analysis.zen.hashing import hash_owner


class BPCOO(PushPullCOO):
    name = "bp_coo"
    hashed = True

    def __init__(self, *, seed: int = 0) -> None:
        super().__init__()
        self.seed = seed
        """Seed of h0; every rank must use the same (Zen broadcasts it at start-up)."""

    def owner(self, numel: int, world: int, *, model: bool = False) -> Owner:
        return hash_owner(world, self.seed, numel=numel if model else None)
