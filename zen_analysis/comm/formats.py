"""Wire formats shared by the schemes: bit-packed bitmaps, and the hash bitmap's static index sets.

Hash bitmap (Zen, section 3.3): the owner of partition p only ever holds indices with h0(idx) mod n = p, a static
set S_p that every rank can compute. So the pull sends a bitmap over S_p (|S_p| bits) plus the values of the set
bits, instead of COO indices: the index cost of all partitions together is numel / 8 bytes, independent of n.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from zen_analysis.zen.hashing import owner as hash_owner_of

_BIT_WEIGHTS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)


def bitmap_bytes(num_bits: int) -> int:
    return (num_bits + 7) // 8


def pack_bits(mask_B: torch.Tensor) -> torch.Tensor:
    """Bool mask -> uint8 bytes, bit i of byte j is mask[8j + i]."""
    n = mask_B.numel()
    padded = torch.zeros(bitmap_bytes(n) * 8, dtype=torch.uint8)
    padded[:n] = mask_B.to(torch.uint8)
    return (padded.view(-1, 8) * _BIT_WEIGHTS).sum(1, dtype=torch.int32).to(torch.uint8)


def unpack_bits(bytes_: torch.Tensor, num_bits: int) -> torch.Tensor:
    """Inverse of :func:`pack_bits`."""
    bits = (bytes_.view(-1, 1) & _BIT_WEIGHTS) != 0
    return bits.reshape(-1)[:num_bits]


@lru_cache(maxsize=64)
def hash_partitions(numel: int, num_partitions: int, seed: int) -> tuple[torch.Tensor, ...]:
    """S_p for every partition p: the sorted indices of [0, numel) that h0 assigns to p (cached)."""
    owners_N = hash_owner_of(torch.arange(numel), num_partitions, seed)
    order = torch.argsort(owners_N, stable=True)  # stable: indices stay ascending inside each partition
    sizes = torch.bincount(owners_N, minlength=num_partitions).tolist()
    return tuple(torch.split(order, sizes))
