"""The hash bitmap (Zen, OSDI'25 section 3.3): a lossless pull encoding whose index cost is numel / 8 bytes in
total, whatever the number of servers.

Context: with hash owners, server p only ever holds indices in its static set S_p = {idx : h0(idx) mod n = p},
which every rank can compute from (numel, n, seed) alone. So instead of COO indices, server p sends a bitmap
over the sorted S_p (bit t set iff S_p[t] is non-zero after aggregation) plus the values of the set bits in
that order; a receiver maps bit positions back to indices through its own copy of S_p.

:class:`HashBitmap` holds the sets for one (numel, n, seed): as int32 where indices fit (int64 otherwise),
built once and cached, or — ``materialize=False``, for tensors whose sets do not fit in memory — recomputed
one partition at a time in chunks when needed.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from functools import lru_cache

import torch

from zen_analysis.indices import check_indices
from zen_analysis.zen import native
from zen_analysis.zen.hashing import TABLE_LIMIT, _owner, h0_table

_BIT_WEIGHTS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)
_CHUNK = 1 << 24


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


def _owners(lo: int, hi: int, num_partitions: int, seed: int, numel: int) -> torch.Tensor:
    if numel <= TABLE_LIMIT:
        return (h0_table(numel, seed)[lo:hi].long() & 0xFFFFFFFF) % num_partitions
    return _owner(torch.arange(lo, hi), num_partitions, seed)


class StaticSets:
    """S_0, ..., S_{n-1} of one (numel, n, seed), stored once, in the dtype and on the device the pull uses.

    ``order`` concatenates the sorted sets (int32 below 2**31 elements, else int64): S_p is
    ``order[starts[p]:starts[p + 1]]``. The hash bitmaps of all partitions, concatenated in partition order,
    start at ``byte_starts[p]``: bit t of partition p's bitmap is S_p[t].
    """

    def __init__(self, numel: int, num_partitions: int, seed: int, device: torch.device) -> None:
        self.numel, self.num_partitions, self.seed = numel, num_partitions, seed
        owners_N = torch.cat([_owners(lo, min(numel, lo + _CHUNK), num_partitions, seed, numel)
                              for lo in range(0, numel, _CHUNK)]) if numel else torch.zeros(0, dtype=torch.long)  # fmt: skip
        order = torch.argsort(owners_N, stable=True)  # stable: indices stay ascending inside each partition
        self.sizes = tuple(torch.bincount(owners_N, minlength=num_partitions).tolist())
        del owners_N
        self.order = order.to(torch.int32 if numel < 2**31 else torch.int64).to(device)
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
        extra = sum(t.numel() * t.element_size() for t in (self._rank_of, *self._acc.values()) if t is not None)
        return self.order.numel() * self.order.element_size() + extra

    @property
    def rank_of(self) -> torch.Tensor:
        """Position of every index of [0, numel) in its own S_p (int32 below 2**31 elements), built on first
        use: what a server turns a received index into, with one gather instead of a binary search."""
        if self._rank_of is None:
            rank = torch.empty(self.numel, dtype=self.order.dtype, device=self.order.device)
            for p in range(self.num_partitions):
                s_p = self.partition(p).long()
                rank[s_p] = torch.arange(s_p.numel(), dtype=rank.dtype, device=rank.device)
            self._rank_of = rank
            _evict()
        return self._rank_of

    def accumulator(self, p: int) -> torch.Tensor:
        """A float32 buffer of |S_p| zeros kept between calls (the CPU aggregation leaves it zeroed), one per
        thread."""
        key = (p, threading.get_ident())
        if key not in self._acc:
            self._acc[key] = torch.zeros(self.sizes[p], dtype=torch.float32, device=self.order.device)
            _evict()
        return self._acc[key]

    def partition(self, p: int) -> torch.Tensor:
        return self.order[self.starts[p] : self.starts[p + 1]]


_CACHE: OrderedDict[tuple, StaticSets] = OrderedDict()
_LOCK = threading.RLock()
_CACHE_LIMIT = [2 << 30]


def set_cache_limit(nbytes: int) -> None:
    """Bytes of static hash sets kept per process (least recently used dropped first; default 2 GiB; the
    training config's ``sync.zen_cache_mb``). One (numel, n, seed, device) takes 4 bytes per element below 2**31
    elements for S_p, 4 more for the position table and 4 / n for an accumulator: a 128M-element tensor ~1 GB."""
    _CACHE_LIMIT[0] = int(nbytes)
    _evict()


def _evict() -> None:
    with _LOCK:
        while len(_CACHE) > 1 and sum(v.nbytes for v in _CACHE.values()) > _CACHE_LIMIT[0]:
            _CACHE.popitem(last=False)


def static_sets(numel: int, num_partitions: int, seed: int, device: torch.device | str = "cpu") -> StaticSets:
    """The :class:`StaticSets` of (numel, n, seed) on ``device``, built on first use and cached (bounded in bytes by
    :func:`set_cache_limit`; the set in use is always kept)."""
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
    return built


def hash_partitions(numel: int, num_partitions: int, seed: int) -> tuple[torch.Tensor, ...]:
    """S_p for every partition p: the sorted indices of [0, numel) that h0 assigns to p (views of the cached
    :func:`static_sets`; int32 when numel < 2^31)."""
    sets = static_sets(numel, num_partitions, seed)
    return tuple(sets.partition(p) for p in range(num_partitions))


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
    """|S_p| for every partition p (what the hash bitmaps' sizes follow from), without materialising S_p."""
    counts = torch.zeros(num_partitions, dtype=torch.int64)
    for lo in range(0, numel, _CHUNK):
        counts += torch.bincount(_owners(lo, min(numel, lo + _CHUNK), num_partitions, seed, numel), minlength=num_partitions)
    return tuple(counts.tolist())


class HashBitmap:
    """Encode and decode one server's aggregate over its static hash set (lossless)."""

    def __init__(self, numel: int, num_partitions: int, seed: int = 0, *, materialize: bool = True) -> None:
        if numel < 0 or num_partitions < 1:
            raise ValueError("numel must be >= 0 and num_partitions >= 1")
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
