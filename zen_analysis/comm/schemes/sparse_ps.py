"""``sparse_ps`` (Parameter-Server style, as in Parallax): owners hold even contiguous ranges, aggregate their
range, then broadcast the aggregate in COO. Skewed gradients (the paper's C3) make the owner of the hot range the
bottleneck: imbalanced Parallelism. Host syncs: the push's and the pull's
(:mod:`~zen_analysis.comm.schemes.parallelism`).

By rows (:meth:`~zen_analysis.comm.schemes.base.CommScheme.sum_rows`, what the DDP drop-in sums an embedding with)
this is contiguous row ownership as users run it: modded-nanogpt's "sparse bigram gradient comms" give each rank a
contiguous slice of the table and send each touched row's gradient to its owner, so only touched rows move; a
replicated optimizer then needs the owners' sums back, which is this scheme's COO pull. Where that code differs:

* its slices are ``rows_per_rank = N // world`` (it needs W to divide N: its shards are all-gathered densely); here
  owner r holds rows ``[r * N // W, (r + 1) * N // W)``, the same slices when W divides N;
* it sends indices and values in two all-to-alls of the same bytes; here they travel packed, in one;
* its owners keep their slice for a sharded optimizer and all-gather the updated parameters densely: FSDP2's shape,
  which ``bench fsdp``'s ``zen-contiguous`` variant runs (that variant's gather moves only the changed rows).
"""

from __future__ import annotations

from zen_analysis.comm.schemes.parallelism import Owner, PushPullCOO
from zen_analysis.sparsity.metrics import contiguous_owner


class SparsePS(PushPullCOO):
    name = "sparse_ps"

    def owner(self, numel: int, world: int, *, model: bool = False) -> Owner:
        return contiguous_owner(numel, world)
