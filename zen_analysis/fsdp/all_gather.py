"""Zen's pull as FSDP2's all-gather of an embedding unit: each rank sends only the rows of its shard that changed
since its last all-gather, and every rank patches a replica of the whole table it keeps between calls, where stock
FSDP2 all-gathers the whole table every time.

What FSDP2 hands a unit's ``AllGather`` (torch 2.13, ``foreach_all_gather``): ``output_tensor``, the flat
``W * ceil(V / W) * D`` buffer its ``allocate`` returned, and ``input_tensor``, this rank's padded shard in the
all-gather dtype (the parameter dtype, or ``MixedPrecisionPolicy.param_dtype``: the bf16 cast under mixed
precision). The input is a *view into the output* at this rank's chunk: FSDP2's copy-in has already written the
shard there, and a dense all-gather then runs in place. So the shard is read (compared, its changed rows packed)
before anything is written to the output. :class:`ChangedRowsAllGather` (installed with
``FSDPModule.set_custom_all_gather``) does, on each call:

1. finds the rows of its shard whose bits differ from the shard as it last sent it (the rows viewed as integers of
   the same width, so ``-0.0`` against ``0.0`` and one NaN against another count as changed, and nothing else
   does);
2. exchanges those counts (one ``all_to_all_single`` of ``W`` int64; a rank without a replica sends -1);
3. sends its changed rows to every rank (:meth:`~zen_analysis.wire.exchange.Exchange.all_gather_v` of packed COO:
   a row index and the row's bits), and every rank writes every rank's rows into its replica;
4. copies the replica into ``output_tensor``.

Only bits move (views, copies, index writes; no arithmetic on values), so the output is bit for bit what a dense
all-gather gives. The call is synchronous and returns no work handle (FSDP2 then waits for nothing); on NCCL the
counts are read on the host, one stream synchronization per call, as in the sparse reduce-scatter.

**Memory.** One replica per rank of the unit's gathered table, ``W * ceil(V / W) * D`` values in the all-gather
dtype (what the unsharded weight takes while gathered, now kept between calls as well: :attr:`memory_bytes`). The
snapshot of the rank's own shard "as last sent" costs nothing more: it is the replica's own chunk, which every
call leaves equal to the shard it sent. ``max_replica_bytes`` caps it: a replica over the cap is never kept.

**When it falls back** to the dense gather (``all_gather_single``, stock FSDP2's collective; it refreshes the
replica): on the first call (no replica yet); when any rank has no replica (over ``max_replica_bytes``, or the
buffer's size, dtype, device or process group changed); and when the changed rows would move at least the dense
gather's bytes, i.e. when all ranks' changed rows times (index + row bytes) reach ``W * ceil(V / W)`` rows' bytes.
Every rank decides from the gathered counts, so every rank decides the same. The counts are exchanged on every
call, the fallback's included, so ranks never disagree on which collective comes next.

**Which optimizers leave rows unchanged.** A row's bits stay as they were when its update is exactly zero:

* plain SGD (no momentum, no weight decay): the rows whose gradient is zero, i.e. the rows no rank looked up this
  step;
* momentum SGD, and Adam / AdamW without weight decay: the rows never looked up since training began (their
  moments are still zero, and ``p - lr * 0 / (sqrt(0) + eps)`` is ``p``, bit for bit); a row looked up once keeps
  changing while its moments decay, so the changed set grows to the union of the rows ever looked up;
* AdamW with weight decay (or SGD with it): every non-zero row shrinks every step, so nearly every row changes and
  each call falls back to the dense gather (the counts exchange is all it adds).

FSDP2 may all-gather a unit twice a step (forward, and again before backward with ``reshard_after_forward=True``,
its default for every unit but the root); the second call finds no row changed: counts, then a copy of the replica.

Shape suffixes: W ranks in ``counts_W`` (but the row's width in wire words as the second letter of ``replica_RW``,
``out_RW``, ``shard_PW``, ``values_KW`` and ``got_KW``), R rows of the whole table (the replica), P rows of one rank's
shard, K changed rows (this rank's, or every rank's once gathered).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather

from zen_analysis.fsdp.units import EmbeddingUnit, OnExchange
from zen_analysis.wire.coo import coo_layout, pack_coo, unpack_coo
from zen_analysis.wire.dtypes import SUPPORTED
from zen_analysis.wire.exchange import Exchange, PhaseRecord
from zen_analysis.wire.inflight import hold, outside_python_tls
from zen_analysis.wire.torch_features import all_gather_single

PHASE = "all_gather"
"""The phase the exchange counts this comm's bytes under (counts as ``control``, rows or the dense gather as
``payload``)."""

NO_REPLICA = -1
"""The count a rank without a replica sends: every rank then gathers densely."""

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits_dtype(dtype: torch.dtype) -> torch.dtype:
    """The integer dtype of ``dtype``'s width, to compare and copy values as bits (a float's ``==`` would call
    ``-0.0`` equal to ``0.0`` and a NaN unequal to itself)."""
    return _BITS[dtype.itemsize]


def wire_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype rows are packed in: the all-gather dtype itself where the COO format takes it, else the integer of
    its width (pack and unpack only reinterpret bits, so either moves the same bytes)."""
    return dtype if dtype in SUPPORTED else bits_dtype(dtype)


def entry_bytes(rows: int, dtype: torch.dtype, width: int) -> int:
    """Bytes of one packed row on the wire: its index and ``width`` values of ``dtype``."""
    unit, per = coo_layout(rows, wire_dtype(dtype), width)
    return unit.itemsize * per


def sparse_pays(counts_W: torch.Tensor, rows: int, dtype: torch.dtype, width: int) -> bool:
    """Whether the ranks send their changed rows (``counts_W``, all ranks' counts) rather than gather densely: every
    rank has a replica, and the changed rows move fewer bytes than the ``rows`` rows of the dense gather (each rank
    sends its block to ``W - 1`` peers either way, so the totals compare as sum of entries against all rows)."""
    if bool((counts_W < 0).any()):
        return False
    return int(counts_W.sum()) * entry_bytes(rows, dtype, width) < rows * width * dtype.itemsize


class ChangedRowsAllGather(OnExchange, AllGather):
    """FSDP2's ``AllGather`` for one embedding unit (:class:`~zen_analysis.fsdp.units.EmbeddingUnit`): each rank
    sends the rows of its shard that changed since its last call and patches its replica of the table (module
    docstring). What the last call did is in :attr:`last`; :attr:`exchange` counts its bytes under phase
    ``all_gather``."""

    def __init__(self, unit: EmbeddingUnit, *, max_replica_bytes: int | None = None) -> None:
        if max_replica_bytes is not None and max_replica_bytes < 0:
            raise ValueError(f"max_replica_bytes must be at least 0 (or None: no cap), got {max_replica_bytes}")
        self.name = unit.name
        self.rows = unit.rows
        self.max_replica_bytes = max_replica_bytes
        self.exchange: Exchange | None = None
        self.replica_RW: torch.Tensor | None = None
        """The gathered table as last gathered, ``(W * ceil(V / W), width)`` integers of the all-gather dtype's
        width; its chunk at this rank is the snapshot of the shard as last sent."""
        self._key: tuple | None = None
        self.calls = 0
        self.dense_calls = 0
        self.last: dict[str, int] = {}
        """``changed`` rows of this rank's shard (-1: no replica to compare with), ``changed_total`` over all ranks
        (-1 when a rank had no replica), ``dense`` 1 when the call fell back to the dense gather, ``sent`` bytes
        this rank sent to other ranks in the call (counts included)."""

    @property
    def memory_bytes(self) -> int:
        """Bytes this comm holds between calls: the replica (the snapshot is its own chunk, no extra bytes)."""
        r = self.replica_RW
        return 0 if r is None else r.numel() * r.element_size()

    def _layout(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, world: int) -> tuple[int, int]:
        """(rows per shard, values per row) of the buffers FSDP2 passed; raises if they are not the table's rows."""
        per = -(-self.rows // world)
        width = input_tensor.numel() // per
        if width * per != input_tensor.numel() or output_tensor.numel() != world * input_tensor.numel():
            raise ValueError(
                f"{self.name}: the unit's all-gather buffers ({input_tensor.numel()} elements in, "
                f"{output_tensor.numel()} out, {world} ranks) are not its table's {self.rows} rows: does the unit "
                "hold anything besides the table?"
            )
        return per, width

    def _replica_fits(self, nbytes: int) -> bool:
        return self.max_replica_bytes is None or nbytes <= self.max_replica_bytes

    @outside_python_tls
    def __call__(self, output_tensor, input_tensor, group, async_op: bool = False):
        ex = self._exchange(group)
        world, rank = ex.world, ex.rank
        per, width = self._layout(output_tensor, input_tensor, world)
        bits = bits_dtype(input_tensor.dtype)
        key = (group, world, rank, per, width, input_tensor.dtype, output_tensor.device)
        if key != self._key:  # a replica of other buffers says nothing about these
            self.replica_RW, self._key = None, key
        shard_PW = input_tensor.view(bits).view(per, width)  # a view into the output: read before writing it
        changed_K = None
        if self.replica_RW is not None:
            with ex.local("diff"):
                snapshot_PW = self.replica_RW[rank * per : (rank + 1) * per]
                changed_K = (shard_PW != snapshot_PW).any(1).nonzero().view(-1)
        sent0 = _sent(ex)
        with ex.phase(PHASE):
            counts_W = ex.all_gather_counts(NO_REPLICA if changed_K is None else changed_K.numel())
            sparse = sparse_pays(counts_W, world * per, input_tensor.dtype, width)
            if sparse:
                self._patch(ex, shard_PW, changed_K, counts_W, rank * per, input_tensor.dtype)
            else:
                _dense_all_gather(ex, output_tensor, input_tensor, group)
        out_RW = output_tensor.view(bits).view(world * per, width)
        if sparse:
            out_RW.copy_(self.replica_RW)
        else:
            self._refresh(out_RW)
        self.calls += 1
        self.dense_calls += int(not sparse)
        self.last = {
            "changed": NO_REPLICA if changed_K is None else changed_K.numel(),
            "changed_total": int(counts_W.sum()) if bool((counts_W >= 0).all()) else NO_REPLICA,
            "dense": int(not sparse),
            "sent": _sent(ex) - sent0,
        }
        return None

    def _patch(
        self,
        ex: Exchange,
        shard_PW: torch.Tensor,
        changed_K: torch.Tensor,
        counts_W: torch.Tensor,
        first: int,
        dtype: torch.dtype,
    ) -> None:
        """Every rank's changed rows (``counts_W``; this rank's are ``changed_K`` of ``shard_PW``, its rows from
        ``first``) written into the replica: one ``all_gather_v`` of packed rows, none when no rank changed one."""
        if not int(counts_W.sum()):
            return
        rows, width = self.replica_RW.shape
        wire = wire_dtype(dtype)
        _, words = coo_layout(rows, wire, width)
        values_KW = shard_PW.index_select(0, changed_K).view(wire)
        packed = pack_coo(changed_K + first, values_KW, rows)
        got = ex.all_gather_v(packed, counts_W * words)
        with ex.local("patch"):
            idx_K, got_KW = unpack_coo(got, rows, wire, width)
            device = self.replica_RW.device
            self.replica_RW.index_copy_(0, idx_K.to(device), got_KW.view(self.replica_RW.dtype).to(device))

    def _refresh(self, out_RW: torch.Tensor) -> None:
        """The replica set to a dense gather's result (allocated on first use), or dropped when it exceeds
        ``max_replica_bytes``."""
        if not self._replica_fits(out_RW.numel() * out_RW.element_size()):
            self.replica_RW = None
            return
        if self.replica_RW is None:
            self.replica_RW = torch.empty_like(out_RW)
        self.replica_RW.copy_(out_RW)


def _dense_all_gather(
    ex: Exchange, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup
) -> None:
    """Stock FSDP2's all-gather (in place when the input is the output's chunk), its bytes counted in the
    exchange as a gather: this rank's block to each of the ``W - 1`` others, and theirs back."""
    t0 = time.perf_counter()
    hold(output_tensor, input_tensor)
    all_gather_single(output_tensor, input_tensor, group=group)
    wire = time.perf_counter() - t0
    moved = input_tensor.numel() * input_tensor.element_size() * (ex.world - 1)
    rec = ex.records.setdefault((PHASE, "payload"), PhaseRecord(PHASE, "payload"))
    rec.bytes_sent += moved
    rec.bytes_received += moved
    rec.wire_seconds += wire
    rec.calls += 1


def _sent(ex: Exchange) -> int:
    """Bytes the exchange has counted as sent under :data:`PHASE` so far."""
    return sum(r.bytes_sent for (phase, _), r in ex.records.items() if phase == PHASE)
