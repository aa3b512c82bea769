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

from functools import lru_cache

import torch

from zen_analysis.zen.hashing import TABLE_LIMIT, h0_table
from zen_analysis.zen.hashing import owner as hash_owner_of

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
    return hash_owner_of(torch.arange(lo, hi), num_partitions, seed)


@lru_cache(maxsize=64)
def hash_partitions(numel: int, num_partitions: int, seed: int) -> tuple[torch.Tensor, ...]:
    """S_p for every partition p: the sorted indices of [0, numel) that h0 assigns to p (cached; int32 when
    numel < 2^31)."""
    owners_N = torch.cat([_owners(lo, min(numel, lo + _CHUNK), num_partitions, seed, numel)
                          for lo in range(0, numel, _CHUNK)]) if numel else torch.zeros(0, dtype=torch.long)  # fmt: skip
    order = torch.argsort(owners_N, stable=True)  # stable: indices stay ascending inside each partition
    if numel < 2**31:
        order = order.to(torch.int32)
    sizes = torch.bincount(owners_N, minlength=num_partitions).tolist()
    return tuple(torch.split(order, sizes))


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

    def partition(self, p: int) -> torch.Tensor:
        """S_p, sorted (int32 below 2^31 elements)."""
        if self.materialize:
            return hash_partitions(self.numel, self.num_partitions, self.seed)[p]
        parts = []
        for lo in range(0, self.numel, _CHUNK):
            hi = min(self.numel, lo + _CHUNK)
            own = _owners(lo, hi, self.num_partitions, self.seed, self.numel)
            parts.append(torch.nonzero(own == p, as_tuple=True)[0] + lo)
        out = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
        return out.to(torch.int32) if self.numel < 2**31 else out

    def bitmap_bytes(self, p: int) -> int:
        return bitmap_bytes(self.sizes[p])

    def encode(self, p: int, indices_K: torch.Tensor, values_K: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(bitmap uint8 over S_p, values in S_p order) of partition p's (indices, values); every index must
        belong to S_p, and indices must be distinct."""
        s_p = self.partition(p).to(indices_K.device).long()
        idx = torch.as_tensor(indices_K).long()
        pos = torch.searchsorted(s_p, idx)
        if idx.numel() and (int(pos.max()) >= s_p.numel() or not torch.equal(s_p[pos], idx)):
            raise ValueError(f"indices outside partition {p}'s hash set (h0 seed {self.seed}, n {self.num_partitions})")
        mask = torch.zeros(s_p.numel(), dtype=torch.bool, device=idx.device)
        mask[pos] = True
        if int(mask.sum()) != idx.numel():
            raise ValueError("indices must be distinct")
        order = torch.argsort(pos)
        return pack_bits(mask), torch.as_tensor(values_K)[order]

    def decode(self, p: int, bitmap: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices int64 ascending, values) from partition p's bitmap and values."""
        s_p = self.partition(p).to(bitmap.device).long()
        mask = unpack_bits(bitmap, s_p.numel())
        idx = s_p[mask]
        if idx.numel() != values.numel():
            raise ValueError(f"bitmap has {idx.numel()} set bits but {values.numel()} values arrived")
        return idx, values
