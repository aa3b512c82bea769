"""The hash bitmap (Zen, OSDI'25 section 3.3): a lossless pull encoding whose index cost is numel / 8 bytes in
total, whatever the number of servers.

Context: with hash owners, server p only ever holds indices in its static set S_p = {idx : h0(idx) mod n = p},
which every rank can compute from (numel, n, seed) alone. So instead of COO indices, server p sends a bitmap
over the sorted S_p (bit t set iff S_p[t] is non-zero after aggregation) plus the values of the set bits in
that order; a receiver maps bit positions back to indices through its own copy of S_p.

:class:`HashBitmap` holds the sets for one (numel, n, seed): as int32 where indices fit (int64 otherwise),
built once and cached, or — ``materialize=False``, for tensors whose sets do not fit in memory — recomputed
one partition at a time in chunks when needed.

Shape suffixes: N elements of the tensor (one owner each), K a partition's indices (or bit positions to set), B entries
of a bitmap (one bool a bit in ``mask_B``, one byte of 8 bits in ``bytes_B``).
"""

from __future__ import annotations

import copy
import ctypes
import ctypes.util
import numbers
import sys
import threading
from collections import OrderedDict
from functools import lru_cache

import torch

from zen_analysis.indices import check_indices
from zen_analysis.zen import native
from zen_analysis.zen.hashing import TABLE_LIMIT, cached_h0_table, owner_unchecked

_BIT_WEIGHTS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)


def bitmap_bytes(num_bits: int) -> int:
    return (num_bits + 7) // 8


def pack_bits(mask_B: torch.Tensor) -> torch.Tensor:
    """Bool mask -> uint8 bytes, bit i of byte j is mask[8j + i] (same device as the mask)."""
    n = mask_B.numel()
    padded = torch.zeros(bitmap_bytes(n) * 8, dtype=torch.uint8, device=mask_B.device)
    padded[:n] = mask_B.to(torch.uint8)
    return (padded.view(-1, 8) * _BIT_WEIGHTS.to(mask_B.device)).sum(1, dtype=torch.int32).to(torch.uint8)


def unpack_bits(bytes_: torch.Tensor, num_bits: int) -> torch.Tensor:
    """Inverse of :func:`pack_bits`."""
    bits = (bytes_.view(-1, 1) & _BIT_WEIGHTS.to(bytes_.device)) != 0
    return bits.reshape(-1)[:num_bits]


_CHUNK = 1 << 16
"""Indices per step of building or counting a set: every temporary (int64 hashes, the chunk's sort) is sized by
this, not by numel, and cache-sized: a build's peak memory grows by what the set keeps (``order``, the 1-byte
owners, the position table), not by int64 owners, argsort and hashes over the whole tensor, and the chunks' work
stays in cache (``scripts/zen_cache_rss.py`` measures what the sets hold against the process's RSS)."""


def _check_sizes(numel: int, num_partitions: int) -> tuple[int, int]:
    """(numel, num_partitions) as ints, or ``ValueError`` naming the argument: numel >= 0, num_partitions >= 1."""
    out = []
    for name, value, least in (("numel", numel, 0), ("num_partitions", num_partitions, 1)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"{name} must be an integer, got {value!r}")
        if value < least:
            raise ValueError(f"{name} must be >= {least}, got {value}")
        out.append(int(value))
    return out[0], out[1]


def _owners(lo: int, hi: int, num_partitions: int, seed: int, numel: int) -> torch.Tensor:
    """h0(idx) mod n (int64) of idx in [lo, hi): from the h0 table if ``zen.hashing`` keeps one for (numel, seed),
    else hashed (building a 4-byte-per-element table here would outlive the call, uncounted)."""
    table = cached_h0_table(numel, seed) if numel <= TABLE_LIMIT else None
    if table is not None:
        return (table[lo:hi].long() & 0xFFFFFFFF) % num_partitions
    return owner_unchecked(torch.arange(lo, hi), num_partitions, seed)


def _owner_dtype(num_partitions: int) -> torch.dtype:
    if num_partitions <= 256:
        return torch.uint8
    return torch.int16 if num_partitions <= 2**15 else torch.int32 if num_partitions <= 2**31 else torch.int64


_libc_trim = None


def release_freed_memory() -> bool:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim(0)``); False where libc has none.

    Why: the sets of tensors below glibc's dynamic mmap threshold (up to 32 MB: a 1M-8M-element set and its
    temporaries) live on the heap, and freed heap chunks stay in the process (RSS) until trimmed, so a cache that
    builds and evicts many sets would hold far more than it counts (``scripts/zen_cache_rss.py sizes`` measures
    both; the guide's section "Zen, the system" gives the numbers). Called after each build and each eviction."""
    global _libc_trim
    if _libc_trim is None:
        _libc_trim = False
        try:
            fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
            fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
            _libc_trim = fn
        except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
            pass
    if _libc_trim is False:
        return False
    _libc_trim(0)
    return True


class StaticSets:
    """S_0, ..., S_{n-1} of one (numel, n, seed), stored once, in the dtype and on the device the pull uses.

    ``order`` concatenates the sorted sets (int32 below 2**31 elements, else int64): S_p is
    ``order[starts[p]:starts[p + 1]]``. The hash bitmaps of all partitions, concatenated in partition order,
    start at ``byte_starts[p]``: bit t of partition p's bitmap is S_p[t].

    What one set holds (:attr:`nbytes`), below 2**31 elements: 4 bytes per element for ``order``, 4 more for
    :attr:`rank_of` once built (Zen's push builds it), 4 / n for each :meth:`accumulator` (one per thread and
    partition used), and 16 (n + 1) bytes of bounds; twice that above 2**31. The build is two passes over chunks of
    :data:`_CHUNK` indices: h0's partition of every index (1 byte each for n <= 256, freed after), then a
    counting placement of each chunk's stable sort into ``order`` (indices stay ascending inside each partition).
    """

    def __init__(self, numel: int, num_partitions: int, seed: int, device: torch.device) -> None:
        numel, num_partitions = _check_sizes(numel, num_partitions)
        self.numel, self.num_partitions, self.seed = numel, num_partitions, seed
        n, dtype = num_partitions, torch.int32 if numel < 2**31 else torch.int64
        owners_N = torch.empty(numel, dtype=_owner_dtype(n))
        for lo in range(0, numel, _CHUNK):
            hi = min(numel, lo + _CHUNK)
            owners_N[lo:hi] = _owners(lo, hi, n, seed, numel)
        counts = torch.bincount(owners_N, minlength=n)
        self.sizes = tuple(counts.tolist())
        order = torch.empty(numel, dtype=dtype)
        cursor = torch.cumsum(counts, 0) - counts  # where each partition's next indices go in ``order``
        for lo in range(0, numel, _CHUNK):
            own = owners_N[lo : lo + _CHUNK]
            own_sorted, perm = torch.sort(own, stable=True)  # stable: ascending inside each partition; small keys
            own_sorted = own_sorted.long()
            cnt = torch.bincount(own, minlength=n)
            first = torch.cumsum(cnt, 0) - cnt  # partition p's run in the sorted chunk starts here
            dest = cursor[own_sorted] - first[own_sorted] + torch.arange(perm.numel())
            order[dest] = (perm + lo).to(dtype)
            cursor += cnt
        del owners_N
        self.order = order.to(device)
        self.starts = [0]
        self.byte_starts = [0]
        for size in self.sizes:
            self.starts.append(self.starts[-1] + size)
            self.byte_starts.append(self.byte_starts[-1] + bitmap_bytes(size))
        self.byte_starts_t = torch.tensor(self.byte_starts, dtype=torch.long, device=device)
        self.starts_t = torch.tensor(self.starts, dtype=torch.long, device=device)
        self._rank_of: torch.Tensor | None = None
        self._acc: dict[tuple[int, int], torch.Tensor] = {}

    @property
    def nbytes(self) -> int:
        """Bytes this set holds: the storage of every tensor it keeps (``order``, the bounds' tensors, the position
        table and the accumulators once built) and the Python lists of its bounds."""
        tensors = (self.order, self.starts_t, self.byte_starts_t, self._rank_of, *self._acc.values())
        kept = sum(t.untyped_storage().nbytes() for t in tensors if t is not None)
        lists = sum(sys.getsizeof(x) for x in (self.sizes, self.starts, self.byte_starts))
        return kept + lists + 32 * (len(self.sizes) + len(self.starts) + len(self.byte_starts))  # the ints

    @property
    def rank_of(self) -> torch.Tensor:
        """Position of every index of [0, numel) in its own S_p (int32 below 2**31 elements), built on first
        use: what a server turns a received index into, with one gather instead of a binary search."""
        if self._rank_of is None:
            rank = torch.empty(self.numel, dtype=self.order.dtype, device=self.order.device)
            for p in range(self.num_partitions):
                for lo in range(self.starts[p], self.starts[p + 1], _CHUNK):  # int64 temporaries of a chunk
                    hi = min(self.starts[p + 1], lo + _CHUNK)
                    rank[self.order[lo:hi].long()] = torch.arange(
                        lo - self.starts[p], hi - self.starts[p], dtype=rank.dtype, device=rank.device
                    )
            self._rank_of = rank
            if _evict():
                release_freed_memory()
        return self._rank_of

    def accumulator(self, p: int) -> torch.Tensor:
        """A float32 buffer of |S_p| zeros kept between calls (the CPU aggregation leaves it zeroed), one per
        thread."""
        key = (p, threading.get_ident())
        if key not in self._acc:
            self._acc[key] = torch.zeros(self.sizes[p], dtype=torch.float32, device=self.order.device)
            if _evict():
                release_freed_memory()
        return self._acc[key]

    def partition(self, p: int) -> torch.Tensor:
        return self.order[self.starts[p] : self.starts[p + 1]]


_CACHE: OrderedDict[tuple, StaticSets] = OrderedDict()
_LOCK = threading.RLock()
DEFAULT_CACHE_BYTES = 256 << 20
"""The default of :func:`set_cache_limit` and of the training config's ``sync.zen_cache_mb``: 256 MiB holds the
set of the largest tensor among ``make reproduce``'s recipes (the lstm-words embedding with ``sync.scheme=zen``,
17.7M elements: 152 MiB with its position table and one accumulator at n = 4), while bounding what a full cache
adds to a rank's RSS (``scripts/zen_cache_rss.py workload`` measures it)."""
_CACHE_LIMIT = [DEFAULT_CACHE_BYTES]


def set_cache_limit(nbytes: int) -> None:
    """Bytes of static hash sets kept per process, counted by :attr:`StaticSets.nbytes` (least recently used
    dropped first; default :data:`DEFAULT_CACHE_BYTES`; the training config's ``sync.zen_cache_mb``). One (numel,
    n, seed, device) as Zen's push uses it holds 8 + 4 / n bytes per element below 2**31 elements (S_p, the
    position table, one accumulator): the lstm-words embedding (17.7M elements, n = 4) 152 MiB, a 128M-element
    tensor 1.1 GB. The set in use is always kept, whatever the limit."""
    _CACHE_LIMIT[0] = int(nbytes)
    if _evict():
        release_freed_memory()


def cache_limit() -> int:
    """Bytes of static hash sets kept per process now (:func:`set_cache_limit`)."""
    return _CACHE_LIMIT[0]


def cache_nbytes() -> int:
    """Bytes the cached static sets hold now (the sum of their :attr:`StaticSets.nbytes`)."""
    with _LOCK:
        return sum(v.nbytes for v in _CACHE.values())


def _evict() -> int:
    """Drop least recently used sets until the rest fit the limit (keeping the newest); how many were dropped."""
    dropped = 0
    with _LOCK:
        total = sum(v.nbytes for v in _CACHE.values())
        while len(_CACHE) > 1 and total > _CACHE_LIMIT[0]:
            total -= _CACHE.popitem(last=False)[1].nbytes
            dropped += 1
    return dropped


def static_sets(numel: int, num_partitions: int, seed: int, device: torch.device | str = "cpu") -> StaticSets:
    """The :class:`StaticSets` of (numel, n, seed) on ``device``, built on first use and cached (bounded in bytes by
    :func:`set_cache_limit`; the set in use is always kept). ``ValueError`` for numel < 0 or num_partitions < 1."""
    numel, num_partitions = _check_sizes(numel, num_partitions)
    key = (numel, num_partitions, seed & 0xFFFFFFFF, str(torch.device(device)))
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    cpu_key = (*key[:3], "cpu")
    built = StaticSets(numel, num_partitions, seed, torch.device(device)) if cpu_key not in _CACHE else None
    if built is None:  # the CPU copy exists: move it instead of hashing again
        built = copy.copy(_CACHE[cpu_key])
        built._rank_of, built._acc = None, {}
        built.order = built.order.to(device)
        built.byte_starts_t, built.starts_t = built.byte_starts_t.to(device), built.starts_t.to(device)
    with _LOCK:
        _CACHE[key] = built
        _evict()
    release_freed_memory()  # the build's temporaries, and whatever was evicted
    return built


def hash_partitions(numel: int, num_partitions: int, seed: int) -> tuple[torch.Tensor, ...]:
    """S_p for every partition p: the sorted indices of [0, numel) that h0 assigns to p (views of the cached
    :func:`static_sets`; int32 when numel < 2^31)."""
    sets = static_sets(numel, num_partitions, seed)
    return tuple(sets.partition(p) for p in range(sets.num_partitions))


_SHIFTS = torch.arange(8, dtype=torch.int32)
_POPCOUNT = torch.tensor([bin(i).count("1") for i in range(256)], dtype=torch.int64)


def bits_at(positions_K: torch.Tensor, num_bytes: int) -> torch.Tensor:
    """A bitmap of ``num_bytes`` bytes with the bits at ``positions_K`` (distinct) set: O(K) after the zeroing,
    the same bit order as :func:`pack_bits`."""
    dev = positions_K.device
    if positions_K.device.type == "cpu" and native.available():
        out = torch.zeros(num_bytes, dtype=torch.uint8, device=dev)
        native.bits_set(positions_K.to(torch.int64).contiguous(), out)
        return out
    # distinct bits of one byte add up to their OR; int32, as CUDA has no uint8 atomic add
    out = torch.zeros(num_bytes, dtype=torch.int32, device=dev)
    out.index_put_((positions_K >> 3,), (1 << (positions_K & 7)).to(torch.int32), accumulate=True)
    return out.to(torch.uint8)


def set_positions(bytes_B: torch.Tensor) -> torch.Tensor:
    """Ascending positions of the set bits of a bitmap: one pass over the bytes, then work per set bit only."""
    nz_bytes = torch.nonzero(bytes_B, as_tuple=True)[0]
    expanded = (bytes_B[nz_bytes].to(torch.int32).unsqueeze(1) >> _SHIFTS.to(bytes_B.device)) & 1  # (bytes, 8)
    row, bit = torch.nonzero(expanded, as_tuple=True)
    return nz_bytes[row] * 8 + bit


def popcounts(bytes_B: torch.Tensor, byte_starts: torch.Tensor) -> torch.Tensor:
    """Set bits in each segment ``bytes_B[byte_starts[p]:byte_starts[p + 1]]`` (int64, same device): the compiled
    loop on the CPU, a table lookup and a cumulative sum elsewhere."""
    if bytes_B.device.type == "cpu" and native.available():
        return native.popcounts(bytes_B.contiguous(), byte_starts.to(torch.int64).contiguous())
    cum = torch.zeros(bytes_B.numel() + 1, dtype=torch.int64, device=bytes_B.device)
    torch.cumsum(_POPCOUNT.to(bytes_B.device)[bytes_B.long()], 0, out=cum[1:])
    return cum[byte_starts[1:]] - cum[byte_starts[:-1]]


@lru_cache(maxsize=256)
def hash_partition_sizes(numel: int, num_partitions: int, seed: int) -> tuple[int, ...]:
    """|S_p| for every partition p (what the hash bitmaps' sizes follow from), without materialising S_p.
    ``ValueError`` for numel < 0 or num_partitions < 1."""
    numel, num_partitions = _check_sizes(numel, num_partitions)
    counts = torch.zeros(num_partitions, dtype=torch.int64)
    for lo in range(0, numel, _CHUNK):
        counts += torch.bincount(
            _owners(lo, min(numel, lo + _CHUNK), num_partitions, seed, numel), minlength=num_partitions
        )
    return tuple(counts.tolist())


class HashBitmap:
    """Encode and decode one server's aggregate over its static hash set (lossless)."""

    def __init__(self, numel: int, num_partitions: int, seed: int = 0, *, materialize: bool = True) -> None:
        numel, num_partitions = _check_sizes(numel, num_partitions)
        self.numel, self.num_partitions, self.seed = numel, num_partitions, seed
        self.materialize = materialize
        self.sizes = hash_partition_sizes(numel, num_partitions, seed)

    def sets(self, device: torch.device | str = "cpu") -> StaticSets:
        return static_sets(self.numel, self.num_partitions, self.seed, device)

    def partition(self, p: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """S_p, sorted (int32 below 2^31 elements)."""
        if self.materialize:
            return self.sets(device).partition(p)
        parts = []
        for lo in range(0, self.numel, _CHUNK):
            hi = min(self.numel, lo + _CHUNK)
            own = _owners(lo, hi, self.num_partitions, self.seed, self.numel)
            parts.append(torch.nonzero(own == p, as_tuple=True)[0] + lo)
        out = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
        return (out.to(torch.int32) if self.numel < 2**31 else out).to(device)

    def bitmap_bytes(self, p: int) -> int:
        return bitmap_bytes(self.sizes[p])

    def encode(self, p: int, indices_K: torch.Tensor, values_K: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(bitmap uint8 over S_p, values in S_p order) of partition p's (indices, values); every index must
        belong to S_p, and indices must be distinct."""
        idx = check_indices(indices_K, self.numel)
        s_p = self.partition(p, idx.device)
        pos = torch.searchsorted(s_p, idx.to(s_p.dtype))
        if idx.numel() and (int(pos.max()) >= s_p.numel() or not torch.equal(s_p[pos].long(), idx)):
            raise ValueError(f"indices outside partition {p}'s hash set (h0 seed {self.seed}, n {self.num_partitions})")
        order = torch.argsort(pos)
        pos = pos[order]
        if pos.numel() > 1 and not bool((pos[1:] > pos[:-1]).all()):
            raise ValueError("indices must be distinct")
        return bits_at(pos, self.bitmap_bytes(p)), torch.as_tensor(values_K)[order]

    def decode(self, p: int, bitmap: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices int64 ascending, values) from partition p's bitmap and values."""
        s_p = self.partition(p, bitmap.device)
        pos = set_positions(bitmap)
        if pos.numel() and int(pos[-1]) >= s_p.numel():
            raise ValueError(f"bitmap sets bit {int(pos[-1])} beyond partition {p}'s {s_p.numel()} indices")
        idx = s_p[pos].long()
        if idx.numel() != values.numel():
            raise ValueError(f"bitmap has {idx.numel()} set bits but {values.numel()} values arrived")
        return idx, values
