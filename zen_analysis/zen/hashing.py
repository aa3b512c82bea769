"""The first-level hash h0 of Zen: which partition (server) owns each gradient index.

Context (Zen, OSDI'25, sections 3.2 and 4): every rank maps index ``idx`` to partition ``h0(idx) mod n`` with the
same seeded universal hash, so the same index always meets the same server, with no coordination and no
dependence on the data. Theorem 2 bounds the resulting push and pull imbalance by 1 + O(sqrt(n log n / |I|)),
which is why hashing balances the skewed gradients that contiguous ranges do not (C3).

h0 here is MurmurHash3's 32-bit finaliser (fmix32) applied to the index's low and high 32-bit halves, mixed
with the seed: well-mixed, cheap, vectorised in int64 torch arithmetic (products wrap modulo 2**64 and are
masked back to 32 bits), and identical on CPU and CUDA. The seed is chosen at start-up and broadcast, so all
ranks agree.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from zen_analysis.indices import check_indices

_M32 = 0xFFFFFFFF


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's finaliser on the low 32 bits of int64 ``h`` (a new tensor; in-place steps after the first
    avoid allocating a 10M-element temporary per operation)."""
    h = h & _M32
    h ^= h >> 16
    h.mul_(0x85EBCA6B).bitwise_and_(_M32)
    h ^= h >> 13
    h.mul_(0xC2B2AE35).bitwise_and_(_M32)
    h ^= h >> 16
    return h


def h0(indices: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """32-bit hash (as int64 in [0, 2**32)) of each index, for a given seed (indices: 1-D, non-negative)."""
    return h0_unchecked(check_indices(indices), seed)


def h0_unchecked(idx: torch.Tensor, seed: int) -> torch.Tensor:
    """h0 of an int64 tensor already checked by the caller."""
    s = seed & _M32
    lo = _fmix32((idx & _M32) ^ s)
    hi_seed = (s * 0x9E3779B1 + 0x7F4A7C15) & _M32
    if idx.numel() == 0 or int(idx.max()) < 2**32:  # high halves all zero: one scalar instead of a tensor pass
        hi = int(_fmix32(torch.tensor([hi_seed], device="cpu"))[0])
        lo ^= (hi * 0x27D4EB2F) & _M32
        return _fmix32(lo)
    hi = _fmix32(((idx >> 32) & _M32) ^ hi_seed)
    lo ^= (hi * 0x27D4EB2F) & _M32
    return _fmix32(lo)


def owner(indices: torch.Tensor, num_partitions: int, seed: int = 0) -> torch.Tensor:
    """Partition (server) id in [0, num_partitions) of each index: h0(idx) mod n."""
    if num_partitions < 1:
        raise ValueError("num_partitions must be >= 1")
    return owner_unchecked(check_indices(indices), num_partitions, seed)


def owner_unchecked(idx: torch.Tensor, num_partitions: int, seed: int) -> torch.Tensor:
    """:func:`owner` of an int64 tensor the caller made itself (the bitmap hashing a range): no second check."""
    h = h0_unchecked(idx, seed)
    if num_partitions & (num_partitions - 1) == 0:  # power of two: the same as % n, without a division
        return h.bitwise_and_(num_partitions - 1)
    return h.remainder_(num_partitions)


TABLE_LIMIT = 1 << 26
"""Largest numel for which :func:`hash_owner` keeps a table of h0 over [0, numel) (4 bytes per element)."""

TABLES_KEPT = 2
"""h0 tables :func:`h0_table` keeps (least recently used dropped first): at most 2 x 4 x :data:`TABLE_LIMIT` bytes
= 512 MiB, counted by :func:`h0_table_nbytes`. Only :func:`hash_owner` (the traffic models, the analysis) builds them;
Zen's static hash sets (``zen.bitmap``) hash directly and only read a table that is already here, so a training process
holds none."""

_TABLES: OrderedDict[tuple[int, int], torch.Tensor] = OrderedDict()
_TABLES_LOCK = threading.Lock()


def h0_table(numel: int, seed: int = 0) -> torch.Tensor:
    """h0 of every index in [0, numel) as int32 (bit pattern of the uint32 hash), built in 16M chunks and kept
    (the last :data:`TABLES_KEPT` (numel, seed); :func:`h0_table_nbytes` says how many bytes they hold)."""
    key = (int(numel), seed & _M32)
    with _TABLES_LOCK:
        hit = _TABLES.get(key)
        if hit is not None:
            _TABLES.move_to_end(key)
            return hit
    out = torch.empty(numel, dtype=torch.int32)
    chunk = 1 << 24
    for lo in range(0, numel, chunk):
        hi = min(numel, lo + chunk)
        h = h0_unchecked(torch.arange(lo, hi), seed)
        out[lo:hi] = torch.where(h >= 2**31, h - 2**32, h).to(torch.int32)
    with _TABLES_LOCK:
        _TABLES[key] = out
        while len(_TABLES) > TABLES_KEPT:
            _TABLES.popitem(last=False)
    return out


def cached_h0_table(numel: int, seed: int = 0) -> torch.Tensor | None:
    """The h0 table of (numel, seed) if :func:`h0_table` keeps one, else None (never builds one)."""
    with _TABLES_LOCK:
        return _TABLES.get((int(numel), seed & _M32))


def h0_table_nbytes() -> int:
    """Bytes of the h0 tables kept now."""
    with _TABLES_LOCK:
        return sum(t.untyped_storage().nbytes() for t in _TABLES.values())


def clear_h0_tables() -> None:
    with _TABLES_LOCK:
        _TABLES.clear()


def hash_owner(num_partitions: int, seed: int = 0, *, numel: int | None = None):
    """``owner`` bound to (n, seed): plugs into ``sparsity.imbalance_ratios`` as the hash owner.

    With ``numel`` (at most :data:`TABLE_LIMIT`) it looks h0 up in a cached table instead of hashing: the
    traffic models call it for hundreds of index sets over the same tensor, at every n. Either way, with ``numel``
    an index outside ``[0, numel)`` (negative or too large) raises ``ValueError``; without it, any non-negative
    index is owned.
    """
    if num_partitions < 1:
        raise ValueError("num_partitions must be >= 1")
    if numel is not None and numel <= TABLE_LIMIT:
        table = h0_table(numel, seed)
        return lambda indices: (table[check_indices(indices, numel)].long() & _M32) % num_partitions
    # above the table's limit it hashes, with the same range check (an index >= numel is refused, not owned)
    return lambda indices: owner_unchecked(check_indices(indices, numel), num_partitions, seed)
