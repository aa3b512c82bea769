"""``zen``: Balanced Parallelism with COO push and hash-bitmap pull (Zen, OSDI'25, sections 3.2-3.3).

Push: every non-zero goes to the owner h0(idx) mod n (count exchange + ``all_to_all_single``). Pull: each owner
sends a bitmap over its static hash set S_p plus the summed values of the set bits; the bitmaps have sizes every
rank knows, and the number of values follows from them, so the pull needs no count exchange.

The owner mapping here is the plain h0 bucketing; the hierarchical-hashing kernel (Algorithm 1) of the Zen
issue replaces how the push buckets are built, not what goes on the wire.
"""

from __future__ import annotations

import torch

from zen_analysis.comm.exchange import Exchange
from zen_analysis.comm.formats import bitmap_bytes, hash_partition_sizes, hash_partitions, pack_bits, unpack_bits
from zen_analysis.comm.schemes.base import CommScheme
from zen_analysis.comm.schemes.owner import push, push_traffic
from zen_analysis.comm.traffic import Traffic
from zen_analysis.zen.hashing import hash_owner


class Zen(CommScheme):
    name = "zen"

    def __init__(self, *, seed: int = 0) -> None:
        super().__init__()
        self.seed = seed
        """Seed of h0; every rank must use the same."""

    def _run(self, x_N: torch.Tensor, ex: Exchange) -> torch.Tensor:
        N, W = x_N.numel(), ex.world
        u_idx, u_val = push(x_N, ex, hash_owner(W, self.seed))
        parts = hash_partitions(N, W, self.seed)
        mine = parts[ex.rank]
        mask = torch.zeros(mine.numel(), dtype=torch.bool)
        mask[torch.searchsorted(mine, u_idx)] = True  # u_idx is sorted, so values stay in bitmap order
        sizes_W = torch.tensor([bitmap_bytes(p.numel()) for p in parts], dtype=torch.int64)
        with ex.phase("pull"):
            all_bits = ex.all_gather_v(pack_bits(mask), sizes_W)
            masks = [unpack_bits(b, p.numel()) for b, p in zip(torch.split(all_bits, sizes_W.tolist()), parts)]
            counts_W = torch.tensor([int(m.sum()) for m in masks], dtype=torch.int64)
            all_val = ex.all_gather_v(u_val, counts_W)
        out_N = torch.zeros_like(x_N)
        for m, p, v in zip(masks, parts, torch.split(all_val, counts_W.tolist())):
            out_N[p[m]] = v
        return out_N

    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        owned = push_traffic(sets, numel, t, hash_owner(t.world, self.seed, numel=numel))
        sizes = hash_partition_sizes(numel, t.world, self.seed)
        t.all_gather("pull", [bitmap_bytes(s) for s in sizes])
        t.all_gather("pull", owned * 4)
