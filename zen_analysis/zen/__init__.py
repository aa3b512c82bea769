"""Zen (Wang et al., OSDI'25): hash-based Balanced Parallelism for sparse gradient synchronization.

So far: the first-level hash ``owner`` (h0), which the characterization uses to measure push/pull imbalance.
"""

from zen_analysis.zen.hashing import h0, hash_owner, owner

__all__ = ["h0", "hash_owner", "owner"]
