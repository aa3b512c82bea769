"""The Zen paper's sparsity metrics, on index sets of non-zeros.

Context (Wang et al., OSDI'25, section 2.1 and Appendix B; see ``shared/reference/zen_paper.md``): data-parallel
workers hold sparse gradients whose non-zero index sets I_i partly overlap (C1), densify when summed (C2) and
are concentrated in a few contiguous ranges of the tensor (C3). The definitions, used exactly so our numbers
can be set beside the paper's:

* density d = |I| / numel.
* overlap ratio (Def. 3) = |I_1 ∩ I_2| / min(|I_1|, |I_2|).
* densification ratio (Def. 4) gamma^n = |∪_i I_i| / mean_i |I_i|  (1 <= gamma <= n).
* partition shares: the fraction of non-zeros in each of n contiguous even partitions of [0, numel),
  partition p = [p*numel//n, (p+1)*numel//n).
* skewness ratio (Def. 5) s = n * max_p share_p  (1 <= s <= n).
* imbalance ratios (Def. 8) for a mapping ``owner`` of indices to n partitions:
  push = max_{i,j} n |I_i^j| / |I_i|, pull = max_j n |{idx in ∪ I_i : owner(idx) = j}| / |∪ I_i|.
* drift (ours, not the paper's): Jaccard similarity |A ∩ B| / |A ∪ B| of index sets at consecutive steps.

An index set is a 1-D integer tensor of flat positions in the flattened tensor; every function accepts unsorted
input with duplicates (``index_set`` normalises). Granularity: everything works on element indices; for an
embedding, ``rows_of(indices, row_size)`` gives row ids, and the same functions then apply with
``numel = num_rows`` (documented switch, used by ``granularity="row"`` in the characterization).

Undefined values are NaN, never a silent 0 or 1: the overlap ratio when either set is empty, gamma when every
set is empty, shares/skewness/imbalance of an empty set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from zen_analysis.indices import as_index_tensor, check_bounds, check_indices

Owner = Callable[[torch.Tensor], torch.Tensor]
"""Maps a 1-D int64 tensor of indices to a same-shape tensor of partition ids in [0, num_partitions)."""

_NAN = float("nan")


def index_set(indices: torch.Tensor | np.ndarray | Sequence[int], numel: int | None = None) -> torch.Tensor:
    """Sorted unique int64 tensor of the given indices (checked by :func:`~zen_analysis.indices.check_indices`:
    1-D, integer, non-negative, below ``numel`` when given)."""
    t = as_index_tensor(indices, name="an index set")
    if t.numel() < 2 or bool((t[1:] > t[:-1]).all()):  # already a set (traces store sorted indices): O(n)
        if t.numel():
            check_bounds(int(t[0]), int(t[-1]), numel, name="an index set")
        return t
    t = torch.unique(t)
    check_bounds(int(t[0]), int(t[-1]), numel, name="an index set")
    return t


def union_of(index_sets: Sequence[torch.Tensor], numel: int) -> torch.Tensor:
    """Sorted union of index sets over [0, numel): a bitmap pass (linear) when the sets are dense enough for a
    numel-byte mask to pay off, a sort otherwise."""
    sets = [check_indices(s, numel, name="an index set") for s in index_sets]
    total = sum(s.numel() for s in sets)
    if total == 0:
        return torch.zeros(0, dtype=torch.long)
    if numel <= 64 * total:
        mask = torch.zeros(numel, dtype=torch.bool)
        for s in sets:
            mask[s] = True
        return torch.nonzero(mask, as_tuple=True)[0]
    return torch.unique(torch.cat(sets))


def union_sizes(index_sets: Sequence[torch.Tensor], groups: Sequence[Sequence[int]], numel: int) -> list[int]:
    """|union of index_sets[i] for i in g| for every group g, without building the unions: one int32 "last
    group that saw this index" array over [0, numel), so the cost is linear in the groups' total set sizes
    (sorting unions instead dominates the SparCML model at 128 workers). Falls back to :func:`union_of` per
    group above 2^28 elements."""
    if numel > 1 << 28:
        return [int(union_of([index_sets[i] for i in g], numel).numel()) for g in groups]
    sets = [check_indices(s, numel, name="an index set") for s in index_sets]
    last = torch.full((numel,), -1, dtype=torch.int32)
    sizes = []
    for gid, g in enumerate(groups):
        n = 0
        for i in g:
            s = sets[i]
            n += int((last[s] != gid).sum())
            last[s] = gid
        sizes.append(n)
    return sizes


def rows_of(indices: torch.Tensor, row_size: int) -> torch.Tensor:
    """Row ids touched by element ``indices`` of a row-major 2-D tensor with ``row_size`` columns."""
    if row_size < 1:
        raise ValueError("row_size must be positive")
    rows = as_index_tensor(indices) // row_size
    if rows.numel() >= 2 and bool((rows[1:] >= rows[:-1]).all()):
        check_bounds(int(rows[0]), 0)  # sorted: the first is the smallest
        return torch.unique_consecutive(rows)  # sorted input: linear time
    return index_set(rows)


def density(indices: torch.Tensor, numel: int) -> float:
    """Fraction of the ``numel`` elements that are non-zero."""
    if numel <= 0:
        raise ValueError("numel must be positive")
    return index_set(indices, numel).numel() / numel


def overlap_ratio(a: torch.Tensor, b: torch.Tensor) -> float:
    """|a ∩ b| / min(|a|, |b|) (paper Def. 3); NaN when either set is empty."""
    a, b = index_set(a), index_set(b)
    smaller = min(a.numel(), b.numel())
    if smaller == 0:
        return _NAN
    return int(torch.isin(a, b, assume_unique=True).sum()) / smaller


def pairwise_overlap_ratios(index_sets: Sequence[torch.Tensor]) -> np.ndarray:
    """Overlap ratio of every pair i < j, in row-major pair order: (0,1), (0,2), ..., (n-2, n-1).

    Vectorised: the sets are mapped onto the ids of their union, and all pairwise intersection sizes come from
    one product of the (workers x union) incidence matrix with its transpose, taken over chunks of the union
    (float32 sums of 0/1 are exact below 2**24; a chunk's matrix is kept under 256 MB).
    """
    sets = [index_set(s) for s in index_sets]
    n = len(sets)
    if n < 2:
        return np.zeros(0)
    sizes = torch.tensor([s.numel() for s in sets], dtype=torch.float64)
    inter = torch.zeros(n, n, dtype=torch.float64)
    union, inverse = torch.unique(torch.cat(sets), return_inverse=True)
    owner_of_entry = torch.repeat_interleave(torch.arange(n), torch.tensor([s.numel() for s in sets]))
    chunk = max(1, min(2**24, 2**26 // n))
    for start in range(0, union.numel(), chunk):
        sel = (inverse >= start) & (inverse < start + chunk)
        width = min(chunk, union.numel() - start)
        incidence = torch.zeros(n, width, dtype=torch.float32)
        incidence[owner_of_entry[sel], inverse[sel] - start] = 1.0
        inter += (incidence @ incidence.T).double()
    iu, ju = np.triu_indices(n, k=1)
    smaller = torch.minimum(sizes[iu], sizes[ju]).numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(smaller > 0, inter.numpy()[iu, ju] / np.where(smaller > 0, smaller, 1), np.nan)


def densification_ratio(index_sets: Sequence[torch.Tensor]) -> float:
    """gamma^n = |∪ I_i| / mean_i |I_i| for the n given sets (paper Def. 4); NaN when all are empty."""
    sets = [index_set(s) for s in index_sets]
    if not sets:
        raise ValueError("densification_ratio needs at least one index set")
    mean = sum(s.numel() for s in sets) / len(sets)
    if mean == 0:
        return _NAN
    return union_of(sets, max(int(s[-1]) for s in sets if s.numel()) + 1).numel() / mean  # sets are sorted


def densification_curve(index_sets: Sequence[torch.Tensor], ns: Sequence[int], numel: int) -> list[float]:
    """``densification_ratio(index_sets[:n])`` for each n of ascending ``ns``, in one pass: the union grows in a
    mask of ``numel`` flags as workers are added, instead of being rebuilt for every n."""
    if list(ns) != sorted(ns) or not ns or ns[0] < 1 or ns[-1] > len(index_sets):
        raise ValueError(f"ns must ascend within 1..{len(index_sets)}, got {list(ns)}")
    seen = torch.zeros(numel, dtype=torch.bool)
    union = total = done = 0
    out = []
    for n in ns:
        for s in index_sets[done:n]:
            s = index_set(s, numel)
            union += int((~seen[s]).sum())
            seen[s] = True
            total += s.numel()
        done = n
        out.append(union / (total / n) if total else _NAN)
    return out


def partition_of(indices: torch.Tensor, numel: int, num_partitions: int) -> torch.Tensor:
    """Contiguous partition id of each index: p such that p*numel//n <= idx < (p+1)*numel//n (an empty tensor,
    numel 0, has no index to place: an empty result)."""
    if num_partitions < 1 or numel < 0:
        raise ValueError(f"num_partitions must be positive and numel non-negative, got {num_partitions} and {numel}")
    idx = check_indices(indices, numel)
    if numel == 0:  # check_indices refused every index: nothing to place
        return idx
    # p = ceil((idx + 1) * n / numel) - 1, exact in integers
    return ((idx + 1) * num_partitions - 1) // numel


def contiguous_owner(numel: int, num_partitions: int) -> Owner:
    """The owner mapping of even contiguous ranges (what Sparse PS and OmniReduce use)."""
    return lambda indices: partition_of(indices, numel, num_partitions)


def partition_shares(indices: torch.Tensor, numel: int, num_partitions: int) -> np.ndarray:
    """Fraction of the non-zeros in each contiguous partition (sums to 1); all NaN for an empty set."""
    idx = index_set(indices, numel)
    if idx.numel() == 0:
        return np.full(num_partitions, np.nan)
    counts = torch.bincount(partition_of(idx, numel, num_partitions), minlength=num_partitions)
    return (counts.double() / idx.numel()).numpy()


def skewness_ratio(indices: torch.Tensor, numel: int, num_partitions: int) -> float:
    """n * max_p share_p over n contiguous partitions (paper Def. 5); NaN for an empty set."""
    shares = partition_shares(indices, numel, num_partitions)
    return _NAN if np.isnan(shares).any() else float(num_partitions * shares.max())


def imbalance_ratios(
    index_sets: Sequence[torch.Tensor], numel: int, owner: Owner, num_partitions: int
) -> tuple[float, float]:
    """(push, pull) imbalance of ``owner`` over the workers' sets (paper Def. 8); 1.0 is perfect balance.

    Push: the largest share any worker sends to one partition, times n (empty workers send nothing and are
    skipped). Pull: the largest share of the union any partition owns, times n. NaN when every set is empty.
    """
    sets = [index_set(s, numel) for s in index_sets]
    n = num_partitions
    push = _NAN
    for s in sets:
        if s.numel() == 0:
            continue
        owners = owner(s)
        if owners.numel() and (int(owners.min()) < 0 or int(owners.max()) >= n):
            raise ValueError(f"owner returned ids outside [0, {n})")
        worst = n * int(torch.bincount(owners, minlength=n).max()) / s.numel()
        push = worst if np.isnan(push) else max(push, worst)
    union = torch.unique(torch.cat(sets)) if sets else torch.zeros(0, dtype=torch.long)
    if union.numel() == 0:
        return _NAN, _NAN
    pull = n * int(torch.bincount(owner(union), minlength=n).max()) / union.numel()
    return push, pull


def jaccard(a: torch.Tensor, b: torch.Tensor) -> float:
    """|a ∩ b| / |a ∪ b|; NaN when both are empty."""
    a, b = index_set(a), index_set(b)
    inter = int(torch.isin(a, b, assume_unique=True).sum())
    union = a.numel() + b.numel() - inter
    return _NAN if union == 0 else inter / union


def drift(sets_by_step: Sequence[torch.Tensor]) -> np.ndarray:
    """Jaccard similarity of consecutive index sets (steps t and t+1): 1.0 means no drift."""
    return np.array([jaccard(a, b) for a, b in zip(sets_by_step[:-1], sets_by_step[1:])])
