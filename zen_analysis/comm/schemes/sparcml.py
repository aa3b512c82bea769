"""``sparcml``: SparCML's SSAR recursive doubling (Renggli et al., SC'19): Hierarchical Centralization.

log2(P) stages over the largest power of two P <= W; at stage i rank r swaps its current aggregate with rank
r XOR 2^i and merges (incremental aggregation: overlapping indices are summed at once). A stream switches to
dense for good once its COO would be larger than the dense tensor (count x (index + value) bytes > numel x value bytes),
as SparCML does. Each message is one count (control; -1 announces a dense buffer) and one buffer (payload).

Worlds that are not a power of two fold first, as MPI's recursive doubling does: rank P + j sends its tensor to
rank j (phase ``fold``), the P ranks run the stages, and rank j sends the result back to P + j (``unfold``).

Host syncs (each fixes a size): the non-zero extraction, then per stage the swapped count (a host value by
protocol: it says how many bytes follow, or that the stream went dense) and the merge's ``torch.unique``.

Shape suffixes: N elements of the flat tensor, K non-zero rows on this rank, D values per row (the table's width).
"""

from __future__ import annotations

import numpy as np
import torch

from zen_analysis.comm.schemes.base import CommScheme, coo_of
from zen_analysis.pricing.traffic import Traffic
from zen_analysis.sparsity.metrics import union_sizes
from zen_analysis.wire.coo import index_bytes, index_dtype
from zen_analysis.wire.exchange import Exchange
from zen_analysis.wire.rows import nonzero_rows

DENSE = -1


def _goes_dense(count: int, numel: int, vb: int = 4) -> bool:
    """Whether ``count`` COO entries of ``vb``-byte values take more bytes than the dense tensor."""
    return count * (index_bytes(numel) + vb) > numel * vb


def _power_of_two_below(world: int) -> int:
    return 1 << (world.bit_length() - 1)


class _Stream:
    """A rank's running aggregate: COO (sorted unique indices, values) until it goes dense. ``shape`` is the dense
    tensor's: (N,) for elements, (R, D) for rows (values (K, D), one index per row)."""

    def __init__(self, idx: torch.Tensor, val: torch.Tensor, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.N = shape[0]
        self.idx, self.val = idx, val
        self.dense: torch.Tensor | None = None
        self.dtype, self.device = val.dtype, val.device
        self.vb = val.element_size() * (shape[1] if len(shape) == 2 else 1)  # bytes of one entry's values

    def to_dense(self) -> torch.Tensor:
        if self.dense is not None:
            return self.dense
        return torch.zeros(self.shape, dtype=self.dtype, device=self.device).index_put_((self.idx,), self.val)

    def wire(self) -> tuple[int, torch.Tensor]:
        """(count to announce, buffer as bytes); switches to dense when COO is larger."""
        if self.dense is None and _goes_dense(self.idx.numel(), self.N, self.vb):
            self.dense = self.to_dense()
        if self.dense is not None:
            return DENSE, self.dense.reshape(-1).view(torch.uint8)
        return self.idx.numel(), torch.cat(
            [self.idx.to(index_dtype(self.N)).view(torch.uint8), self.val.reshape(-1).view(torch.uint8)]
        )

    def write_into(self, x_N: torch.Tensor) -> None:
        """The aggregate into ``x_N`` (the caller's buffer: no fresh dense tensor for a COO result)."""
        if self.dense is not None:
            x_N.copy_(self.dense)
        else:  # the union holds this rank's non-zeros; x_N is zero everywhere else already
            x_N[self.idx] = self.val

    def coo(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The aggregate as (indices, values): a dense one's non-zero rows (entries)."""
        if self.dense is None:
            return self.idx, self.val
        idx = nonzero_rows(self.dense) if len(self.shape) == 2 else torch.nonzero(self.dense, as_tuple=True)[0]
        return idx, self.dense[idx]

    def recv_bytes(self, count: int) -> int:
        return self.N * self.vb if count == DENSE else count * (index_bytes(self.N) + self.vb)

    def merge(self, count: int, got: torch.Tensor) -> None:
        """Add a peer's aggregate: two values per index, added in the dtype (one rounding either way, so a
        half-precision merge equals a float32 add rounded once), the same on both peers (addition commutes)."""
        if count == DENSE or self.dense is not None:
            other = got.view(self.dtype).view(self.shape) if count == DENSE else self._coo_dense(count, got)
            self.dense = self.to_dense() + other
            return
        o_idx, o_val = self._coo(count, got)
        self.idx, inverse = torch.unique(torch.cat([self.idx, o_idx]), return_inverse=True)
        self.val = torch.zeros((self.idx.numel(), *self.shape[1:]), dtype=self.dtype, device=self.device).index_add_(
            0, inverse, torch.cat([self.val, o_val])
        )

    def replace(self, count: int, got: torch.Tensor) -> None:
        if count == DENSE:
            self.dense = got.view(self.dtype).view(self.shape).clone()
        else:
            self.idx, self.val = self._coo(count, got)

    def _coo(self, count: int, got: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ib = index_bytes(self.N)
        idx = got[: count * ib].clone().view(index_dtype(self.N)).long().to(self.device)
        val = got[count * ib :].clone().view(self.dtype).to(self.device)
        return idx, val.view(count, *self.shape[1:])

    def _coo_dense(self, count: int, got: torch.Tensor) -> torch.Tensor:
        idx, val = self._coo(count, got)
        return torch.zeros(self.shape, dtype=self.dtype, device=self.device).index_put_((idx,), val)


class SparCML(CommScheme):
    name = "sparcml"

    def _run(self, x_N: torch.Tensor, ex: Exchange) -> None:
        s = _Stream(*coo_of(x_N), (x_N.numel(),))
        self._reduce(s, ex)
        s.write_into(x_N)

    def _sum_rows(
        self, rows_K: torch.Tensor, values_KD: torch.Tensor, num_rows: int, ex: Exchange
    ) -> tuple[torch.Tensor, torch.Tensor]:
        s = _Stream(rows_K, values_KD, (num_rows, values_KD.shape[1]))
        self._reduce(s, ex)
        return s.coo()

    def _reduce(self, s: _Stream, ex: Exchange) -> None:
        """Recursive doubling (with the fold of a world that is not a power of two): ``s`` ends as the sum."""
        W, r = ex.world, ex.rank
        P = _power_of_two_below(W)
        if r >= P:  # fold in: hand my tensor to rank r - P, get the result back at the end
            with ex.phase("fold"):
                count, buf = s.wire()
                ex.send_count(count, r - P)
                ex.send(buf, r - P)
            with ex.phase("unfold"):
                count = ex.recv_count(r - P)
                got = ex.recv(s.recv_bytes(count), torch.uint8, r - P, device=s.device)
            s.replace(count, got)
            return
        if r < W - P:
            with ex.phase("fold"):
                count = ex.recv_count(r + P)
                got = ex.recv(s.recv_bytes(count), torch.uint8, r + P, device=s.device)
            s.merge(count, got)
        for stage in range(P.bit_length() - 1):
            peer = r ^ (1 << stage)
            with ex.phase(f"stage{stage}"):
                mine, buf = s.wire()
                theirs = ex.sendrecv_count(mine, peer)
                got = ex.sendrecv(buf, peer, s.recv_bytes(theirs))
            s.merge(theirs, got)
        if r < W - P:
            with ex.phase("unfold"):
                count, buf = s.wire()
                ex.send_count(count, r + P)
                ex.send(buf, r + P)

    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        # After i stages every rank of an aligned block of 2^i ranks (with the ranks folded into them) holds
        # the block's union and the same dense flag, so the model needs one union size per block and stage.
        W = t.world
        P = _power_of_two_below(W)
        stages = P.bit_length() - 1

        vb = t.value_bytes

        def size(n: int, dense: bool) -> int:
            return numel * vb if dense else n * (index_bytes(numel) + vb)

        members = [[r] + ([P + r] if P + r < W else []) for r in range(P)]  # rank r's aggregate after the fold
        groups = [sum(members[b << i : (b + 1) << i], []) for i in range(stages + 1) for b in range(P >> i)]
        flat = iter(union_sizes(sets, groups, numel))
        unions = [[next(flat) for _ in range(P >> i)] for i in range(stages + 1)]  # unions[i][block]
        own = [s.numel() for s in sets]
        dense = [_goes_dense(own[r], numel, vb) for r in range(P)]
        if W > P:
            src = np.arange(P, W)
            t.p2p("fold", src, src - P, 8, kind="control")
            t.p2p("fold", src, src - P, [size(own[i], _goes_dense(own[i], numel, vb)) for i in src])
            for j in range(W - P):  # a received dense buffer makes the merge dense
                dense[j] = dense[j] or _goes_dense(own[P + j], numel, vb)
        ranks = np.arange(P)
        for stage in range(stages):
            dense = [d or _goes_dense(u, numel, vb) for d, u in zip(dense, unions[stage])]
            peers = ranks ^ (1 << stage)
            t.p2p(f"stage{stage}", ranks, peers, 8, kind="control")
            t.p2p(f"stage{stage}", ranks, peers, [size(unions[stage][r >> stage], dense[r >> stage]) for r in ranks])
            dense = [dense[2 * b] or dense[2 * b + 1] for b in range(len(dense) // 2)]
        if W > P:
            final = size(unions[stages][0], dense[0] or _goes_dense(unions[stages][0], numel, vb))
            src = np.arange(W - P)
            t.p2p("unfold", src, src + P, 8, kind="control")
            t.p2p("unfold", src, src + P, final)
