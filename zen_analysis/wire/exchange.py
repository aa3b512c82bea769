"""The collectives schemes are built from, with exact byte accounting per (phase, kind).

Context: gloo rejects uneven list-form ``all_gather``/``all_to_all``, so every variable-size exchange is
"exchange counts, then ``all_to_all_single`` with split sizes" (counts are ``control`` bytes, the data ``payload``).
What a rank *sends* in a collective is counted as the bytes its data must deliver to other ranks (its own share
stays local and is not counted):

* ``all_to_all_v``: the splits addressed to other ranks; received: the splits other ranks addressed to it.
* ``all_gather_v``: its block times (W - 1); received: every other rank's block.
* dense ring ``all_reduce`` (reduce-scatter + all-gather over ``tensor_split`` chunks): N - |own chunk| elements
  sent and received in each half, the standard ring volume 2 (W - 1) / W x N.

``traffic`` models in the schemes apply the same rules to index sets, so model and measurement are comparable
byte for byte. Shape legend: N numel, K entries on this rank, W world size.

Shape suffixes: W ranks in the group, F fields every rank must agree on, K entries of a payload, N elements of a dense
tensor.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from zen_analysis import workspace
from zen_analysis.wire.coo import coo_words, pack_coo, row_width, sum_by_index, unpack_coo
from zen_analysis.wire.inflight import hold

COUNT_BYTES = 8  # counts travel as int64


class RanksDisagreeError(ValueError):
    """Ranks passed different inputs to one collective sum (numel, dtype, seed or scheme): raised on every rank,
    with the same message, before any of them sums anything."""


def _agreement_error(names: list[str], table_WF: torch.Tensor, decode: dict) -> str | None:
    """The message naming what the ranks disagree on (every rank builds it from the same table), or None."""
    parts = []
    for f, name in enumerate(names):
        column = table_WF[:, f].tolist()
        if len(set(column)) > 1:
            show = decode.get(name, str)
            ranks = ", ".join(f"rank {r} passed {name} {show(v)}" for r, v in enumerate(column))
            parts.append(ranks)
    if not parts:
        return None
    return (
        "the ranks disagree: " + "; ".join(parts) + ". Every rank must sum a tensor of the same numel and dtype "
        "with the same scheme (and hash seed); no rank summed anything"
    )


@dataclass
class PhaseRecord:
    phase: str
    kind: str  # "payload" or "control"
    bytes_sent: int = 0
    bytes_received: int = 0
    seconds: float = 0.0
    """Wall time of the whole phase, local encode/decode work included (on the payload record)."""
    wire_seconds: float = 0.0
    """Time inside the collective calls of this kind alone."""
    calls: int = 0
    """Collective calls of this kind (each one message round: a count exchange, an all_to_all_single, a p2p
    send/receive); the traffic models count the same calls. A p2p round with nothing to send or receive still
    counts as one (gloo posts nothing for it, so the time model's alpha for it is an overestimate)."""


class Exchange:
    """One rank's view of a process group, logging bytes per (phase, kind) and wall time per phase."""

    def __init__(self, group: dist.ProcessGroup | None = None, *, sync: bool = False) -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        nccl = dist.get_backend(group) == "nccl"
        self.device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
        """Where collective buffers must live: NCCL takes CUDA tensors only (counts included)."""
        self.records: dict[tuple[str, str], PhaseRecord] = {}
        self.local_seconds: dict[str, float] = {}
        """Seconds of named local (non-communication) steps, e.g. Zen's ``hash`` or ``decode``."""
        self._phase = "unnamed"
        self.sync = sync
        """Barrier before each collective (not timed), so ``wire_seconds`` excludes waiting for slower peers."""
        self.wait_seconds = 0.0
        """Seconds spent in those barriers (neither wire nor local work)."""
        self._agree: tuple[list[str], torch.Tensor, dict] | None = None

    def expect_agreement(self, fields: dict[str, int], decode: dict | None = None) -> None:
        """Check that every rank passes the same ``fields`` (name -> int64 value): the next count exchange carries
        them to every rank (no call of its own), or :meth:`agree` does in one call of its own. A disagreement
        raises :class:`RanksDisagreeError` on every rank, with the same message. ``decode``: name -> how to show a
        value in that message."""
        names = list(fields)
        self._agree = (names, torch.tensor([fields[n] for n in names], dtype=torch.int64, device="cpu"), decode or {})

    def agree(self) -> None:
        """The pending agreement check (:meth:`expect_agreement`) in one exchange of its own (phase ``agree``,
        control bytes), for a scheme whose first collective is not a count exchange. No-op when none is pending.

        The message has the layout of a count exchange carrying the check (a zero count, then the values), so a
        rank running a scheme whose check rides on its counts meets this one in a call of the same size: a
        disagreement on the scheme is refused like any other, not a gloo size error or an NCCL hang."""
        if self._agree is None:
            return
        names, mine_F, decode = self._agree
        self._agree = None
        send = torch.cat([torch.zeros(1, dtype=torch.int64, device="cpu"), mine_F]).expand(self.world, -1)
        send = send.contiguous().to(self.device)
        recv = torch.empty_like(send)
        prev, self._phase = self._phase, "agree"
        try:
            t0 = self._start()
            hold(recv, send)
            dist.all_to_all_single(recv, send, group=self.group)
            moved = send.element_size() * send.shape[1] * (self.world - 1)
            self._count("control", moved, moved, time.perf_counter() - t0)
        finally:
            self._phase = prev
        self._raise_on_disagreement(names, recv.cpu()[:, 1:], decode)

    def _raise_on_disagreement(self, names: list[str], table_WF: torch.Tensor, decode: dict) -> None:
        message = _agreement_error(names, table_WF, decode)
        if message is not None:
            raise RanksDisagreeError(message)

    @property
    def agreement_pending(self) -> bool:
        return self._agree is not None

    def _start(self) -> float:
        if self.sync:
            t0 = time.perf_counter()
            dist.barrier(group=self.group)
            self.wait_seconds += time.perf_counter() - t0
        return time.perf_counter()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        prev, self._phase = self._phase, name
        t0 = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - t0
            self._record("payload").seconds += elapsed
            self._phase = prev

    @contextlib.contextmanager
    def local(self, name: str) -> Iterator[None]:
        """Time a local step (no bytes, no calls): added to ``local_seconds[name]``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.local_seconds[name] = self.local_seconds.get(name, 0.0) + time.perf_counter() - t0

    def _record(self, kind: str) -> PhaseRecord:
        key = (self._phase, kind)
        if key not in self.records:
            self.records[key] = PhaseRecord(self._phase, kind)
        return self.records[key]

    def _count(self, kind: str, sent: int, received: int, seconds: float = 0.0) -> None:
        rec = self._record(kind)
        rec.bytes_sent += sent
        rec.bytes_received += received
        rec.wire_seconds += seconds
        rec.calls += 1

    def exchange_counts(self, counts_W: torch.Tensor) -> torch.Tensor:
        """Send counts_W[j] to rank j; returns what each rank sent to this one (control traffic). A pending
        agreement check (:meth:`expect_agreement`) rides along: its values follow each count in the same call."""
        send = counts_W.to(device=self.device, dtype=torch.int64).contiguous()
        check = self._agree
        self._agree = None
        if check is not None:
            send = torch.cat([send.view(-1, 1), check[1].to(self.device).expand(self.world, -1)], 1).contiguous()
        recv = torch.empty_like(send)
        t0 = self._start()
        hold(recv, send)
        dist.all_to_all_single(recv, send, group=self.group)
        wire = time.perf_counter() - t0
        moved = COUNT_BYTES * send.numel() // self.world * (self.world - 1)
        self._count("control", moved, moved, wire)
        recv = recv.cpu()
        if check is None:
            return recv
        self._raise_on_disagreement(check[0], recv[:, 1:], check[2])
        return recv[:, 0].contiguous()

    def all_to_all_v(
        self,
        data_K: torch.Tensor,
        send_counts_W: torch.Tensor,
        recv_counts_W: torch.Tensor,
        *,
        reuse: str | None = None,
    ) -> torch.Tensor:
        """Rank j gets the next send_counts_W[j] entries of ``data_K`` (payload); counts known on both sides.
        ``reuse`` names a per-thread workspace (:mod:`zen_analysis.workspace`) to receive into: the result is
        then valid until the next call with that name (no page faults on a fresh buffer)."""
        send_splits = send_counts_W.tolist()
        recv_splits = recv_counts_W.tolist()
        data_K = data_K.to(self.device)
        if reuse is None:
            out = torch.empty(sum(recv_splits), dtype=data_K.dtype, device=self.device)
        else:
            out = workspace.buffer(reuse, sum(recv_splits), data_K.dtype, self.device)
        data_K = data_K.contiguous()
        t0 = self._start()
        hold(out, data_K)
        dist.all_to_all_single(out, data_K, recv_splits, send_splits, group=self.group)
        wire = time.perf_counter() - t0
        width = data_K.element_size()
        me = self.rank
        sent, received = width * (sum(send_splits) - send_splits[me]), width * (sum(recv_splits) - recv_splits[me])
        self._count("payload", sent, received, wire)
        return out

    def all_gather_counts(self, count: int) -> torch.Tensor:
        """Every rank's count (control traffic)."""
        return self.exchange_counts(torch.full((self.world,), count, dtype=torch.int64, device="cpu"))

    def all_gather_v(self, data_K: torch.Tensor, counts_W: torch.Tensor, *, reuse: str | None = None) -> torch.Tensor:
        """Concatenation of every rank's ``data_K`` in rank order; ``counts_W`` are all ranks' sizes (payload).
        ``reuse``: as for :meth:`all_to_all_v` (the W copies sent go to a workspace too)."""
        k = int(counts_W[self.rank])
        data_K = data_K.to(self.device)
        if reuse is None or not k:
            send = data_K.repeat(self.world) if k else data_K[:0]
        else:
            send = workspace.buffer(f"{reuse}.send", self.world * k, data_K.dtype, self.device).view(self.world, k)
            send.copy_(data_K.expand(self.world, k))
            send = send.view(-1)
        return self.all_to_all_v(
            send, torch.full((self.world,), k, dtype=torch.int64, device="cpu"), counts_W, reuse=reuse
        )

    def sendrecv_count(self, count: int, peer: int) -> int:
        """Swap one count with ``peer`` (control traffic)."""
        recv = torch.zeros(1, dtype=torch.int64, device="cpu")  # counts are host values; _p2p moves them
        t0 = self._start_pair(peer)
        _p2p(self, torch.tensor([count], dtype=torch.int64, device="cpu"), recv, peer)
        self._count("control", COUNT_BYTES, COUNT_BYTES, time.perf_counter() - t0)
        return int(recv)

    def send_count(self, count: int, peer: int) -> None:
        """One-way: send one count to ``peer`` (control traffic)."""
        t0 = self._start_pair(peer)
        _p2p(
            self,
            torch.tensor([count], dtype=torch.int64, device="cpu"),
            torch.zeros(0, dtype=torch.int64, device="cpu"),
            peer,
        )
        self._count("control", COUNT_BYTES, 0, time.perf_counter() - t0)

    def recv_count(self, peer: int) -> int:
        """One-way: receive one count from ``peer`` (control traffic)."""
        recv = torch.zeros(1, dtype=torch.int64, device="cpu")
        t0 = self._start_pair(peer)
        _p2p(self, recv[:0], recv, peer)
        self._count("control", 0, COUNT_BYTES, time.perf_counter() - t0)
        return int(recv)

    def send(self, data: torch.Tensor, peer: int) -> None:
        """One-way: send a buffer whose size ``peer`` knows (payload)."""
        t0 = self._start_pair(peer)
        _p2p(self, data, data[:0], peer)
        self._count("payload", data.numel() * data.element_size(), 0, time.perf_counter() - t0)

    def recv(self, numel: int, dtype: torch.dtype, peer: int, *, device: torch.device | str = "cpu") -> torch.Tensor:
        """One-way: receive a buffer of ``numel`` elements from ``peer`` (payload), on ``device``."""
        out = torch.empty(numel, dtype=dtype, device=device)
        t0 = self._start_pair(peer)
        _p2p(self, out[:0], out, peer)
        self._count("payload", 0, numel * out.element_size(), time.perf_counter() - t0)
        return out

    def _start_pair(self, peer: int) -> float:
        """Like ``_start``, but the barrier (when ``sync``) is a zero-byte handshake with ``peer`` alone: a
        one-way message between two ranks cannot use a group barrier others do not enter."""
        if self.sync:
            token = torch.zeros(1)
            _p2p(self, token, torch.zeros(1), peer)
        return time.perf_counter()

    def sendrecv(self, data: torch.Tensor, peer: int, recv_numel: int) -> torch.Tensor:
        """Swap a buffer with ``peer`` whose size both sides know (payload)."""
        recv = torch.empty(recv_numel, dtype=data.dtype, device=data.device)
        t0 = self._start_pair(peer)
        _p2p(self, data, recv, peer)
        wire = time.perf_counter() - t0
        self._count("payload", data.numel() * data.element_size(), recv_numel * data.element_size(), wire)
        return recv

    def all_reduce_dense(self, tensor_N: torch.Tensor) -> torch.Tensor:
        """In-place sum over ranks (the backend's all-reduce), counted as a ring over tensor_split chunks."""
        t0 = self._start()
        hold(tensor_N)
        dist.all_reduce(tensor_N, group=self.group)  # on NCCL the caller's tensor is on the GPU already
        wire = time.perf_counter() - t0
        own = ring_chunk_sizes(tensor_N.numel(), self.world)[self.rank]
        moved = 2 * (tensor_N.numel() - own) * tensor_N.element_size()
        self._count("payload", moved, moved, wire)
        return tensor_N


def push_to_owners(
    idx_K: torch.Tensor, val_K: torch.Tensor, send_W: torch.Tensor, numel: int, ex: Exchange
) -> tuple[torch.Tensor, torch.Tensor]:
    """The push of Parallelism schemes: ``idx_K``/``val_K`` grouped by owner (``send_W[j]`` entries for rank j)
    go to their owners (count exchange + one ``all_to_all_single`` of packed COO, phase ``push``); returns this
    rank's (indices ascending, summed values in ``val_K``'s dtype, added in
    :func:`~zen_analysis.wire.dtypes.accumulate_dtype`). An index that sums to zero stays in the set. ``val_K``
    (K, D) pushes rows: ``numel`` counts rows."""
    dtype, width = val_K.dtype, row_width(val_K)
    w = coo_words(numel, dtype, width)
    with ex.phase("push"):
        recv_W = ex.exchange_counts(send_W)
        got = ex.all_to_all_v(pack_coo(idx_K, val_K, numel), send_W * w, recv_W * w)
    with ex.local("aggregate"):
        u_idx, u_val = sum_by_index(*unpack_coo(got, numel, dtype, width))
    return u_idx, u_val


def _p2p(ex: Exchange, send: torch.Tensor, recv: torch.Tensor, peer: int) -> None:
    """Post a send and a receive with ``peer`` (global rank conversion for subgroups) and wait for both; on
    NCCL the buffers travel through the exchange's CUDA device and ``recv`` is filled in place."""
    gpeer = peer if ex.group is None else dist.get_global_rank(ex.group, peer)
    landing = recv if recv.device == ex.device else torch.empty_like(recv, device=ex.device)
    ops = []
    if send.numel():
        send = send.to(ex.device).contiguous()
        hold(send)
        ops.append(dist.P2POp(dist.isend, send, gpeer, ex.group))
    if recv.numel():
        hold(landing)
        ops.append(dist.P2POp(dist.irecv, landing, gpeer, ex.group))
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    if landing is not recv:
        recv.copy_(landing)


def ring_chunk_sizes(numel: int, world: int) -> list[int]:
    """Chunk sizes of ``torch.tensor_split(range(numel), world)``: the first numel % world are one larger."""
    base, extra = divmod(numel, world)
    return [base + (1 if r < extra else 0) for r in range(world)]


def ring_volume(nbytes: float, world: int) -> float:
    """Bytes each rank sends in a ring all-reduce of an ``nbytes`` buffer, in the model's continuous form:
    2 (W - 1) / W x nbytes (:func:`ring_bytes_sent` is the exact per-rank count)."""
    return 2 * (world - 1) / world * nbytes


def ring_bytes_sent(numel: int, element_bytes: int, world: int, rank: int) -> int:
    """Bytes ``rank`` sends in a ring all-reduce of ``numel`` elements: every chunk but its own, twice
    (reduce-scatter, then all-gather): about 2 (W - 1) / W x the buffer."""
    return 2 * (numel - ring_chunk_sizes(numel, world)[rank]) * element_bytes if world > 1 else 0


__all__ = [
    "Exchange",
    "PhaseRecord",
    "RanksDisagreeError",
    "push_to_owners",
    "ring_bytes_sent",
    "ring_chunk_sizes",
    "ring_volume",
]
