"""Wire formats shared by the schemes: bit-packed bitmaps, and the hash bitmap's static index sets.

Hash bitmap (Zen, section 3.3): the owner of partition p only ever holds indices with h0(idx) mod n = p, a static
set S_p that every rank can compute. So the pull sends a bitmap over S_p (|S_p| bits) plus the values of the set
bits, instead of COO indices: the index cost of all partitions together is numel / 8 bytes, independent of n.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from zen_analysis.zen.hashing import TABLE_LIMIT, h0_table
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


@lru_cache(maxsize=256)
def hash_partition_sizes(numel: int, num_partitions: int, seed: int) -> tuple[int, ...]:
    """|S_p| for every partition p (what the hash bitmaps' sizes follow from), without materialising S_p:
    hashed in 16M-element chunks, so a 2^31-element tensor costs seconds and no index array."""
    if numel <= TABLE_LIMIT:
        owners = (h0_table(numel, seed).long() & 0xFFFFFFFF) % num_partitions
        return tuple(torch.bincount(owners, minlength=num_partitions).tolist())
    counts = torch.zeros(num_partitions, dtype=torch.int64)
    chunk = 1 << 24
    for lo in range(0, numel, chunk):
        owners = hash_owner_of(torch.arange(lo, min(numel, lo + chunk)), num_partitions, seed)
        counts += torch.bincount(owners, minlength=num_partitions)
    return tuple(counts.tolist())


FORMATS = ("coo", "bitmap", "tensor_block", "hash_bitmap")


def wire_sizes(indices: torch.Tensor, numel: int, *, num_partitions: int = 16, block: int = 256, seed: int = 0) -> dict[str, int]:
    """Bytes a worker receives to learn the aggregated tensor whose non-zeros are ``indices`` (sorted), in each
    format of the paper's Fig. 17a, with ``num_partitions`` servers and float32 values:

    * ``coo``: an index (int32 below 2^31 elements) and a value per non-zero;
    * ``bitmap``: hash-partitioned servers each sending a plain bitmap over the whole tensor (their non-zeros
      are scattered everywhere) plus the values — n x numel / 8 bytes of bitmaps;
    * ``tensor_block``: OmniReduce's contiguous blocks: a bitmap over the blocks plus every value of each block
      holding a non-zero (the last block may be short);
    * ``hash_bitmap``: Zen's pull, each server's bitmap over its static hash set S_p plus the values — numel / 8
      bytes of bitmaps whatever n (these are the sizes ``zen`` puts on the wire).
    """
    from zen_analysis.comm.exchange import index_bytes

    idx = torch.as_tensor(indices).long()
    nnz = idx.numel()
    blocks = torch.unique_consecutive(idx // block)
    block_values = int(torch.clamp(numel - blocks * block, max=block).sum()) if nnz else 0
    return {
        "coo": nnz * (index_bytes(numel) + 4),
        "bitmap": num_partitions * bitmap_bytes(numel) + 4 * nnz,
        "tensor_block": bitmap_bytes(-(-numel // block)) + 4 * block_values,
        "hash_bitmap": sum(bitmap_bytes(s) for s in hash_partition_sizes(numel, num_partitions, seed)) + 4 * nnz,
    }
