"""Zen (Wang et al., OSDI'25): hash-based Balanced Parallelism for sparse gradient synchronization.

* :mod:`~zen_analysis.zen.hashing` — the first-level hash h0 (``owner``): which server owns each index;
* :mod:`~zen_analysis.zen.hierarchical` — Algorithm 1, hierarchical hashing of the push buckets (and the argsort
  reference); :mod:`~zen_analysis.zen.native` — its compiled CPU kernel (built on first use, ctypes);
* :mod:`~zen_analysis.zen.bitmap` — the hash bitmap: static hash sets S_p, lossless pull encoding;
* :mod:`~zen_analysis.zen.sparse_allreduce` — ``zen_sum``, push + aggregate + pull on any process group (the ``zen``
  scheme of :mod:`zen_analysis.comm` and ``sync.scheme=zen`` in training runs it).

The planner, choosing per tensor among Balanced Parallelism, every other scheme and dense all-reduce, sits beside
the schemes it chooses among: :mod:`zen_analysis.comm.planner`.

The experiments on Zen (parity, Theorem 2, the Fig. 16 hashing cost, the speed benchmark) are in
:mod:`zen_experiments`.
"""

from zen_analysis.zen.bitmap import HashBitmap
from zen_analysis.zen.hashing import h0, hash_owner, owner
from zen_analysis.zen.hierarchical import Buckets, bucket_reference, hierarchical_hash

__all__ = ["Buckets", "HashBitmap", "bucket_reference", "h0", "hash_owner", "hierarchical_hash", "owner"]
