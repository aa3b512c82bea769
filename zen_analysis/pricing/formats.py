"""The per-format wire sizes of the paper's Fig. 17a (COO, plain bitmap, OmniReduce's tensor blocks, Zen's hash
bitmap), from a tensor's non-zero indices; the hash bitmap's encoding itself is :mod:`zen_analysis.zen.bitmap`.

Hash bitmap (Zen, section 3.3): the owner of partition p only ever holds indices with h0(idx) mod n = p, a static
set S_p that every rank can compute. So the pull sends a bitmap over S_p (|S_p| bits) plus the values of the set
bits, instead of COO indices: the index cost of all partitions together is numel / 8 bytes, independent of n.
"""

from __future__ import annotations

import torch

from zen_analysis.wire.coo import index_bytes
from zen_analysis.zen.bitmap import bitmap_bytes, hash_partition_sizes

FORMATS = ("coo", "bitmap", "tensor_block", "hash_bitmap")


def wire_sizes(
    indices: torch.Tensor, numel: int, *, num_partitions: int = 16, block: int = 256, seed: int = 0
) -> dict[str, int]:
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
