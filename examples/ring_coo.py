"""``ring_coo``: a ring of COO blocks that merges as it goes, a scheme written outside the package.

The index space is cut into W contiguous blocks (the chunks of a dense ring all-reduce). A ring reduce-scatter
(W - 1 steps): at step s rank r sends its current COO of block (r - s - 1) mod W to its right neighbour r + 1, which
merges it into its own COO of that block (the union of the indices, the sum of the values). After the last step rank
r holds block r summed over every rank. A ring all-gather (W - 1 steps) then passes the merged blocks on in COO until
every rank holds all of them: the same bits on every rank, since each block was summed once, by its owner.

What it trades: a block's message carries each index once, however many of the ranks it has passed hold it. Where
the ranks touch the same indices a rank sends about 2 (W - 1) / W of its non-zeros, as a dense ring does of the whole
tensor; where they touch disjoint ones the partial sums grow at every hop and the all-gather moves the whole union,
more than AGsparse's one-shot all-gather. And its 2 (W - 1) hops follow one another: 3 (W - 1) + 1 calls of latency,
where AGsparse makes two.

A reduce-scatter step is a count exchange (how many entries follow) and one ``all_to_all_single`` in which a rank
addresses entries to its right neighbour alone (none to every other rank): the Exchange's counted variable-size
message in one call (the Exchange's point-to-point calls each wait on one peer: a step that sends to one neighbour
and receives from the other would take two, in an odd-even order so that no ring of sends waits on itself). The
all-gather learns every block's size from one count exchange at its start, then makes one such call a step. The
ranks' agreement check rides on the first count exchange (``folds_agreement``).

Values: fp16/bf16 are added in float32 at each merge and rounded once per hop to the input's dtype (a partial sum
travels rounded, as in SparCML's stages); other dtypes add in their own.

Importing this file registers the scheme (``register_scheme``, used as a decorator): ``sync.plugins`` or
``--set plugins=examples/ring_coo.py`` imports it where a config is built and in every rank.

Shape suffixes: N elements of the flat tensor (or rows of a table), K entries on this rank, D values per row, W ranks.
"""

from __future__ import annotations

import numpy as np
import torch

from zen_analysis.comm.schemes import CommScheme, register_scheme
from zen_analysis.pricing.traffic import Traffic
from zen_analysis.wire.coo import coo_words, index_bytes, pack_coo, sum_by_index, unpack_coo
from zen_analysis.wire.exchange import Exchange

Coo = tuple[torch.Tensor, torch.Tensor]


def block_bounds(numel: int, world: int) -> list[int]:
    """The W + 1 edges of the contiguous blocks: ``torch.tensor_split``'s chunks, the first numel % W one larger."""
    base, extra = divmod(numel, world)
    return [b * base + min(b, extra) for b in range(world + 1)]


@register_scheme
class RingCOO(CommScheme):
    """Ring reduce-scatter of COO blocks that merge at every hop, then a ring all-gather of the merged blocks."""

    name = "ring_coo"
    folds_agreement = True  # the first collective is a count exchange: the ranks' agreement check rides on it

    def _run(self, x_N: torch.Tensor, ex: Exchange) -> None:
        idx_K = torch.nonzero(x_N, as_tuple=True)[0]
        u_idx, u_val = self._ring(idx_K, x_N[idx_K], x_N.numel(), ex)
        # the union holds this rank's non-zeros and x_N is zero everywhere else: the sums are written in place
        x_N[u_idx.to(x_N.device)] = u_val.to(x_N.device)

    def _sum_rows(self, rows_K: torch.Tensor, values_KD: torch.Tensor, num_rows: int, ex: Exchange) -> Coo:
        return self._ring(rows_K, values_KD, num_rows, ex)

    def _ring(self, idx_K: torch.Tensor, val_K: torch.Tensor, numel: int, ex: Exchange) -> Coo:
        """(indices ascending, sums) of the union over ranks of this rank's sorted ``idx_K`` and its values (K,) or
        rows (K, D) of a ``numel``-row table."""
        W, r = ex.world, ex.rank
        width = val_K.shape[1] if val_K.dim() == 2 else 0
        words = coo_words(numel, val_K.dtype, width)
        edges = torch.tensor(block_bounds(numel, W), dtype=idx_K.dtype, device=idx_K.device)
        cuts = torch.searchsorted(idx_K, edges).tolist()
        blocks = [(idx_K[cuts[b] : cuts[b + 1]], val_K[cuts[b] : cuts[b + 1]]) for b in range(W)]
        right, left = (r + 1) % W, (r - 1) % W
        for s in range(W - 1):  # reduce-scatter: send block r - s - 1, merge block r - s - 2 from the left
            send_b, recv_b = (r - s - 1) % W, (r - s - 2) % W
            with ex.phase(f"reduce_scatter{s}"):
                send_W = _to(right, blocks[send_b][0].numel(), W)
                recv_W = ex.exchange_counts(send_W)
                got = ex.all_to_all_v(pack_coo(*blocks[send_b], numel), send_W * words, recv_W * words)
            with ex.local("merge"):
                o_idx, o_val = unpack_coo(got.to(val_K.device), numel, val_K.dtype, width)
                own_idx, own_val = blocks[recv_b]
                blocks[recv_b] = sum_by_index(torch.cat([own_idx, o_idx]), torch.cat([own_val, o_val]))
        with ex.phase("all_gather0"):  # every merged block's size (alone, W = 1: the call the check rides on)
            sizes_W = ex.all_gather_counts(blocks[r][0].numel())
        packed: list = [None] * W  # block b's merged COO, packed once by its owner and forwarded as it came
        packed[r] = pack_coo(*blocks[r], numel).to(ex.device)  # beside the received ones (gloo: the host)
        for s in range(max(W - 1, 1)):  # all-gather: pass block r - s on, receive block r - s - 1 (W = 1: itself)
            send_b, recv_b = (r - s) % W, (r - s - 1) % W
            with ex.phase(f"all_gather{s}"):
                send_W, recv_W = _to(right, sizes_W[send_b], W), _to(left, sizes_W[recv_b], W)
                packed[recv_b] = ex.all_to_all_v(packed[send_b], send_W * words, recv_W * words)
        return unpack_coo(torch.cat(packed).to(val_K.device), numel, val_K.dtype, width)

    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        W, entry = t.world, index_bytes(numel) + t.value_bytes
        partial = partial_sizes(sets, numel)
        ranks = np.arange(W)
        for s in range(W - 1):  # rank r sends block r - s - 1 after s merges
            t.counts(f"reduce_scatter{s}")
            t.all_to_all(f"reduce_scatter{s}", _ring_matrix(partial[(ranks - s - 1) % W, s] * entry))
        t.counts("all_gather0")
        for s in range(max(W - 1, 1)):  # rank r passes on merged block r - s
            t.all_to_all(f"all_gather{s}", _ring_matrix(partial[(ranks - s) % W, W - 1] * entry))


def partial_sizes(sets: list[torch.Tensor], numel: int) -> np.ndarray:
    """(W, W) int64: [b, s] is the size of block b's COO that travels at reduce-scatter step s, the union of block
    b's indices over the s + 1 ranks b + 1, ..., b + 1 + s (mod W) that it has passed through; column W - 1 is the
    whole block's union, what the all-gather moves. Each index counts from the first of those ranks that holds it."""
    W = len(sets)
    idx = np.concatenate([s.numpy() for s in sets] + [np.zeros(0, dtype=np.int64)])
    rank = np.repeat(np.arange(W), [s.numel() for s in sets])
    block = np.searchsorted(np.asarray(block_bounds(numel, W)), idx, side="right") - 1
    hop = (rank - block - 1) % W  # how many steps after the block's start this rank merges it in
    order = np.lexsort((hop, idx))
    first = np.r_[True, idx[order][1:] != idx[order][:-1]] if idx.size else np.zeros(0, dtype=bool)
    counts = np.zeros((W, W), dtype=np.int64)
    np.add.at(counts, (block[order][first], hop[order][first]), 1)
    return counts.cumsum(axis=1)


def _to(peer: int, count, world: int) -> torch.Tensor:
    """(W,) int64 counts: ``count`` entries for ``peer``, none for any other rank."""
    out = torch.zeros(world, dtype=torch.int64)
    out[peer] = int(count)
    return out


def _ring_matrix(sent_W: np.ndarray) -> np.ndarray:
    """(W, W) bytes: rank r sends ``sent_W[r]`` to its right neighbour r + 1 and nothing to any other rank."""
    W = sent_W.size
    m = np.zeros((W, W), dtype=np.int64)
    m[np.arange(W), (np.arange(W) + 1) % W] = sent_W
    return m
