"""``sparse_ps`` (Parameter-Server style, as in Parallax): owners hold even contiguous ranges, aggregate their
range, then broadcast the aggregate in COO. Skewed gradients (the paper's C3) make the owner of the hot range the
bottleneck: imbalanced Parallelism. Host syncs: the push's and the pull's
(:mod:`~zen_analysis.comm.schemes.parallelism`).
"""

from __future__ import annotations

from zen_analysis.comm.schemes.parallelism import Owner, PushPullCOO
from zen_analysis.sparsity.metrics import contiguous_owner


class SparsePS(PushPullCOO):
    name = "sparse_ps"

    def owner(self, numel: int, world: int, *, model: bool = False) -> Owner:
        return contiguous_owner(numel, world)
