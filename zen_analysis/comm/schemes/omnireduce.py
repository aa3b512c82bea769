"""``omnireduce``: 256-element blocks, only non-zero blocks sent, aggregators own even contiguous block ranges.

Push: each worker sends, to every aggregator, a bitmap over that aggregator's blocks and the values of its
non-zero blocks there. Pull: each aggregator sends its bitmap and the summed non-zero blocks to every worker.
Block sizes follow from the bitmaps, so no counts are exchanged. No per-element indices travel, but a whole
block moves for a single non-zero, and skew sends most blocks to one aggregator (paper section 2.4).

Host syncs (each fixes a size): the non-zero blocks (``nonzero`` + ``unique``); per received bitmap its block
count (the value split sizes of the push and of the pull), the aggregator's union of blocks.

Shape suffixes: N elements of the flat tensor, K non-zero rows on this rank, D values per row (the table's width), W
ranks in the group.
"""

from __future__ import annotations

import numpy as np
import torch

from zen_analysis.comm.schemes.base import CommScheme
from zen_analysis.pricing.traffic import Traffic
from zen_analysis.sparsity.metrics import partition_of, union_of
from zen_analysis.wire.coo import sum_by_index
from zen_analysis.wire.dtypes import accumulate_dtype
from zen_analysis.wire.exchange import Exchange
from zen_analysis.zen.bitmap import bitmap_bytes, bits_at, pack_bits, unpack_bits


def _layout(numel: int, world: int, block: int) -> tuple[int, list[int]]:
    """(number of blocks, first block of each aggregator's range + the end)."""
    nb = (numel + block - 1) // block
    return nb, [p * nb // world for p in range(world)] + [nb]


def _block_sizes(blocks: torch.Tensor, numel: int, block: int) -> torch.Tensor:
    return torch.clamp(numel - blocks * block, max=block)


class OmniReduce(CommScheme):
    name = "omnireduce"

    def __init__(self, *, block_size: int = 256) -> None:
        super().__init__()
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.block_size = block_size

    def _gather_blocks(self, x_N: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
        B = self.block_size
        pad = torch.zeros(((x_N.numel() + B - 1) // B) * B, dtype=x_N.dtype, device=x_N.device)
        pad[: x_N.numel()] = x_N
        vals = pad.view(-1, B)[blocks]
        sizes = _block_sizes(blocks, x_N.numel(), B)
        keep = torch.arange(B, device=x_N.device).unsqueeze(0) < sizes.unsqueeze(1)
        return vals[keep]

    def _scatter_blocks(self, out_N: torch.Tensor, blocks: torch.Tensor, values: torch.Tensor, *, add: bool) -> None:
        B = self.block_size
        sizes = _block_sizes(blocks, out_N.numel(), B)
        starts = torch.repeat_interleave(blocks * B, sizes)
        offsets = torch.arange(values.numel(), device=out_N.device) - torch.repeat_interleave(
            torch.cumsum(sizes, 0) - sizes, sizes
        )
        pos = starts + offsets
        if add:
            out_N.index_add_(0, pos, values)
        else:
            out_N[pos] = values

    def _run(self, x_N: torch.Tensor, ex: Exchange) -> None:
        dev = x_N.device  # every buffer on the input's device; split sizes are host values
        N, W, B = x_N.numel(), ex.world, self.block_size
        nb, bounds = _layout(N, W, B)
        nz_blocks = torch.unique(torch.nonzero(x_N, as_tuple=True)[0] // B)
        # push: for each aggregator j, a bitmap over its block range, then the values of the set blocks
        bitmaps, values, val_counts = [], [], []
        for j in range(W):
            lo, hi = bounds[j], bounds[j + 1]
            mine = nz_blocks[(nz_blocks >= lo) & (nz_blocks < hi)]
            mask = torch.zeros(hi - lo, dtype=torch.bool, device=dev)
            mask[mine - lo] = True
            bitmaps.append(pack_bits(mask))
            v = self._gather_blocks(x_N, mine)
            values.append(v)
            val_counts.append(v.numel())
        bm_sizes = torch.tensor(
            [bitmap_bytes(bounds[j + 1] - bounds[j]) for j in range(W)], dtype=torch.int64, device="cpu"
        )
        me_bits = bitmap_bytes(bounds[ex.rank + 1] - bounds[ex.rank])
        lo, hi = bounds[ex.rank], bounds[ex.rank + 1]
        agg = torch.zeros(N, dtype=accumulate_dtype(x_N.dtype), device=dev)  # fp16/bf16 added in float32
        with ex.phase("push"):
            r_bits = ex.all_to_all_v(
                torch.cat(bitmaps), bm_sizes, torch.full((W,), me_bits, dtype=torch.int64, device="cpu")
            ).to(dev)
            r_blocks = [
                lo + torch.nonzero(unpack_bits(b, hi - lo), as_tuple=True)[0]
                for b in torch.split(r_bits, [me_bits] * W)
            ]
            recv_counts = torch.tensor(
                [int(_block_sizes(b, N, B).sum()) for b in r_blocks], dtype=torch.int64, device="cpu"
            )
            r_vals = ex.all_to_all_v(
                torch.cat(values), torch.tensor(val_counts, dtype=torch.int64, device="cpu"), recv_counts
            ).to(dev)
        for b, v in zip(r_blocks, torch.split(r_vals, recv_counts.tolist())):
            self._scatter_blocks(agg, b, v.to(agg.dtype), add=True)
        union = torch.unique(torch.cat(r_blocks)) if r_blocks else torch.zeros(0, dtype=torch.long, device=dev)
        mask = torch.zeros(hi - lo, dtype=torch.bool, device=dev)
        mask[union - lo] = True
        with ex.phase("pull"):
            all_bits = ex.all_gather_v(pack_bits(mask), bm_sizes).to(dev)
            blocks_by_owner = [
                bounds[j] + torch.nonzero(unpack_bits(b, bounds[j + 1] - bounds[j]), as_tuple=True)[0]
                for j, b in enumerate(torch.split(all_bits, bm_sizes.tolist()))
            ]
            counts_W = torch.tensor(
                [int(_block_sizes(b, N, B).sum()) for b in blocks_by_owner], dtype=torch.int64, device="cpu"
            )
            all_vals = ex.all_gather_v(self._gather_blocks(agg, union).to(x_N.dtype), counts_W).to(dev)  # rounded once
        # in place: the union's blocks cover this rank's non-zero blocks, every other position is zero already
        for b, v in zip(blocks_by_owner, torch.split(all_vals, counts_W.tolist())):
            self._scatter_blocks(x_N, b, v, add=False)

    def _sum_rows(
        self, rows_K: torch.Tensor, values_KD: torch.Tensor, num_rows: int, ex: Exchange
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """By rows the blocks are the rows: aggregator j owns an even contiguous range of rows; a worker sends it a
        bitmap over the range and the rows it holds there, the aggregator sums them and sends back its bitmap and
        sums. Work per row touched (and the bitmaps' rows / 8 bytes): no dense pass."""
        dev, W, D = values_KD.device, ex.world, values_KD.shape[1]
        _, bounds = _layout(num_rows, W, 1)
        spans = [(bounds[j], bounds[j + 1]) for j in range(W)]
        bm_sizes = torch.tensor([bitmap_bytes(hi - lo) for lo, hi in spans], dtype=torch.int64)
        lo, hi = spans[ex.rank]
        me_bits = bitmap_bytes(hi - lo)
        cuts = torch.searchsorted(rows_K, torch.tensor(bounds, device=rows_K.device)).tolist()  # rows are sorted
        bitmaps = [
            bits_at(rows_K[cuts[j] : cuts[j + 1]] - lo_j, bitmap_bytes(hi_j - lo_j))
            for j, (lo_j, hi_j) in enumerate(spans)
        ]
        with ex.phase("push"):
            r_bits = ex.all_to_all_v(torch.cat(bitmaps), bm_sizes, torch.full((W,), me_bits, dtype=torch.int64)).to(dev)
            r_rows = [
                lo + torch.nonzero(unpack_bits(b, hi - lo), as_tuple=True)[0]
                for b in torch.split(r_bits, [me_bits] * W)
            ]
            sent = torch.tensor([cuts[j + 1] - cuts[j] for j in range(W)], dtype=torch.int64) * D
            got = torch.tensor([b.numel() for b in r_rows], dtype=torch.int64) * D
            r_vals = ex.all_to_all_v(values_KD.reshape(-1), sent, got).to(dev)
        with ex.local("aggregate"):
            u_rows, sums = sum_by_index(torch.cat(r_rows), r_vals.view(-1, D))  # in float32 for fp16/bf16
        with ex.phase("pull"):
            all_bits = ex.all_gather_v(bits_at(u_rows - lo, me_bits), bm_sizes).to(dev)
            rows_by_owner = [
                lo_j + torch.nonzero(unpack_bits(b, hi_j - lo_j), as_tuple=True)[0]
                for (lo_j, hi_j), b in zip(spans, torch.split(all_bits, bm_sizes.tolist()))
            ]
            counts_W = torch.tensor([b.numel() for b in rows_by_owner], dtype=torch.int64) * D
            all_vals = ex.all_gather_v(sums.reshape(-1), counts_W).to(dev)
        return torch.cat(rows_by_owner), all_vals.view(-1, D)

    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        W, B = t.world, (1 if t.width else self.block_size)  # by rows a block is a row
        nb, bounds = _layout(numel, W, B)
        bm = [bitmap_bytes(bounds[j + 1] - bounds[j]) for j in range(W)]
        blocks = [torch.unique_consecutive(s // B) for s in sets]  # sets are sorted
        t.all_to_all("push", [bm] * W)
        # bytes of the non-zero blocks each rank addresses to each aggregator (the last block may be short)
        matrix = (
            np.stack(
                [
                    np.bincount(partition_of(b, nb, W).numpy(), weights=_block_sizes(b, numel, B).numpy(), minlength=W)
                    if b.numel()
                    else np.zeros(W)
                    for b in blocks
                ]
            ).astype(np.int64)
            * t.value_bytes
        )
        t.all_to_all("push", matrix)
        union = union_of(blocks, nb)
        t.all_gather("pull", bm)
        owned = (
            np.bincount(partition_of(union, nb, W).numpy(), weights=_block_sizes(union, numel, B).numpy(), minlength=W)
            if union.numel()
            else np.zeros(W)
        )
        t.all_gather("pull", owned.astype(np.int64) * t.value_bytes)
