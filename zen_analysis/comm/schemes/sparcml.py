"""``sparcml``: SparCML's SSAR recursive doubling (Renggli et al., SC'19): Hierarchical Centralization.

log2(W) stages; at stage i rank r swaps its current aggregate with rank r XOR 2^i and merges (incremental
aggregation: overlapping indices are summed at once). A stream switches to dense for good once its COO would be
larger than the dense tensor (count x (index + value) bytes > numel x 4), as SparCML does. Each stage swaps
one count (control; -1 announces a dense buffer) and one buffer (payload). Needs a power-of-two world size.
"""

from __future__ import annotations

import torch

from zen_analysis.comm.exchange import Exchange, index_bytes, index_dtype
from zen_analysis.comm.schemes.base import CommScheme, coo_of
from zen_analysis.comm.traffic import Traffic

DENSE = -1


def _goes_dense(count: int, numel: int) -> bool:
    return count * (index_bytes(numel) + 4) > numel * 4


class SparCML(CommScheme):
    name = "sparcml"

    def check(self, world: int, numel: int) -> None:
        if world & (world - 1):
            raise ValueError(f"sparcml (recursive doubling) needs a power-of-two number of ranks, got {world}")

    def _run(self, x_N: torch.Tensor, ex: Exchange) -> torch.Tensor:
        N = x_N.numel()
        idt, ib = index_dtype(N), index_bytes(N)
        idx, val = coo_of(x_N)
        dense: torch.Tensor | None = None
        for stage in range(ex.world.bit_length() - 1):
            peer = ex.rank ^ (1 << stage)
            with ex.phase(f"stage{stage}"):
                if dense is None and _goes_dense(idx.numel(), N):
                    dense = torch.zeros_like(x_N).index_put_((idx,), val)
                mine = DENSE if dense is not None else idx.numel()
                theirs = ex.sendrecv_count(mine, peer)
                if dense is not None:
                    buf = dense.view(torch.uint8)
                else:
                    buf = torch.cat([idx.to(idt).view(torch.uint8), val.view(torch.uint8)])
                recv_bytes = N * 4 if theirs == DENSE else theirs * (ib + 4)
                got = ex.sendrecv(buf, peer, recv_bytes)
            if theirs == DENSE:
                other = got.view(torch.float32)
            else:
                o_idx = got[: theirs * ib].clone().view(idt).long()
                o_val = got[theirs * ib :].clone().view(torch.float32)
                other = None
            if dense is not None or other is not None:
                base = dense if dense is not None else torch.zeros_like(x_N).index_put_((idx,), val)
                add = other if other is not None else torch.zeros_like(x_N).index_put_((o_idx,), o_val)
                dense = base + add
            else:
                idx, inverse = torch.unique(torch.cat([idx, o_idx]), return_inverse=True)
                val = torch.zeros(idx.numel(), dtype=x_N.dtype).index_add_(0, inverse, torch.cat([val, o_val]))
        if dense is not None:
            return dense
        return torch.zeros_like(x_N).index_put_((idx,), val)

    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        # After i stages every rank of an aligned block of 2^i ranks holds the same set (the block's union) and
        # the same dense flag, so one union per block and stage suffices.
        W = t.world
        blocks = list(sets)  # stage 0: blocks of one rank
        dense = [False] * W
        for stage in range(W.bit_length() - 1):
            dense = [d or _goes_dense(b.numel(), numel) for d, b in zip(dense, blocks)]
            size = [numel * 4 if d else b.numel() * (index_bytes(numel) + 4) for d, b in zip(dense, blocks)]
            for r in range(W):
                peer = r ^ (1 << stage)
                t.p2p(f"stage{stage}", r, peer, 8, kind="control")
                t.p2p(f"stage{stage}", r, peer, size[r >> stage])
            blocks = [torch.unique(torch.cat([blocks[2 * b], blocks[2 * b + 1]])) for b in range(len(blocks) // 2)]
            dense = [dense[2 * b] or dense[2 * b + 1] for b in range(len(dense) // 2)]
