"""Zen's push as FSDP2's reduce-scatter of an embedding unit: every non-zero row goes to the one rank whose shard
holds it and is summed there, where stock FSDP2 reduce-scatters the whole table.

FSDP2 hands a unit's reduce-scatter the flat padded gradient of its parameters, rank r's chunk its shard (for a
unit holding one ``(V, D)`` table sharded by rows: ``ceil(V / W)`` rows of ``D`` each, the last chunk padded with
zero rows), and the ``ceil(V / W) * D`` output shard to fill. :class:`SparseReduceScatter` (installed with
``FSDPModule.set_custom_reduce_scatter``) reads that buffer as ``(W * ceil(V / W), D)`` rows and:

1. finds the rows that can be non-zero: the ids the embedding's forwards looked up (``row_source="ids"``, a
   forward pre-hook, checked once against a row-wise pass: :mod:`zen_analysis.sync.lookups`) or a row-wise pass
   (``"scan"``);
2. sends each row to its owner, ``row // ceil(V / W)``: counts, then one ``all_to_all_single`` of packed (index,
   values) at the reduce dtype's width (2 bytes a value under ``MixedPrecisionPolicy(reduce_dtype=bfloat16)``);
3. sums what it received by row (:func:`~zen_analysis.wire.coo.sum_by_index`: fp16/bf16 added in float32 and
   rounded once, the dtype contract of :mod:`zen_analysis.wire.dtypes`) and writes the sums into its zeroed shard.

The division is stock FSDP2's: FSDP2 divides the input before (``pre``) and the output after (``post``) itself and
passes the collective's ``op``: ``SUM``; ``AVG``, the sum divided by the group's size; or ``PREMUL_SUM(f)``, each
input multiplied by ``f`` before the sum (:func:`division`). So ``set_gradient_divide_factor`` and
``set_force_sum_reduction_for_comms`` act as they do on stock FSDP2.

Which rank owns a row is FSDP2's contiguous sharding of the rows *as stored*; :mod:`zen_analysis.fsdp.hashed`
stores them in Zen's hashed order so that each contiguous shard holds a hash-balanced set of rows.

Shape suffixes: R rows (of the unit's padded table in ``table_RD``, of this rank's shard in ``shard_RD``), D values per
row (the table's width), K distinct rows (sent by this rank, or received and owned after the sum), W ranks in the group.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

from zen_analysis.fsdp.units import EmbeddingUnit, OnExchange
from zen_analysis.sync.lookups import LookedUp
from zen_analysis.wire.coo import coo_words, pack_coo, sum_by_index, unpack_coo
from zen_analysis.wire.exchange import Exchange
from zen_analysis.wire.inflight import outside_python_tls
from zen_analysis.wire.rows import nonzero_rows
from zen_analysis.wire.torch_features import premul_sum_factor

ROW_SOURCES = ("ids", "scan")


def division(op, world: int, unit=None) -> tuple[float | None, int | None]:
    """(factor each input row is multiplied by before the sum, divisor of the sum) for a reduce-scatter ``op``:
    ``SUM`` (None, None), ``AVG`` (None, world), ``PREMUL_SUM(f)`` (f, None; ``unit``, the FSDP2 module, is where
    torch 2.11 keeps f). Any other op is refused: FSDP2 passes only these three."""
    kind = getattr(op, "op", op)
    if kind == dist.ReduceOp.SUM:
        return None, None
    if kind == dist.ReduceOp.AVG:
        return None, world
    if kind == dist.ReduceOp.PREMUL_SUM:
        return premul_sum_factor(op, unit), None
    raise ValueError(f"a sparse reduce-scatter sums gradients; FSDP2 passed {op!r} (SUM, AVG or PREMUL_SUM expected)")


class SparseReduceScatter(OnExchange, ReduceScatter):
    """FSDP2's ``ReduceScatter`` for one embedding unit (:class:`~zen_analysis.fsdp.units.EmbeddingUnit`): the
    rows go to their owners and are summed there (module docstring). What the last call did is in
    :attr:`last`; :attr:`exchange` counts its bytes by phase."""

    def __init__(self, unit: EmbeddingUnit, *, row_source: str = "ids") -> None:
        if row_source not in ROW_SOURCES:
            raise ValueError(f"row_source must be one of {ROW_SOURCES}, got {row_source!r}")
        self.name = unit.name
        self.dim = unit.dim
        self.row_source = row_source
        self.fsdp_unit = unit.unit
        self.lookups = LookedUp(unit.embedding, name=unit.name) if row_source == "ids" else None
        """The ids looked up; under :class:`~zen_analysis.fsdp.hashed.HashedRows` its forward pre-hook has mapped
        them to stored rows already (it runs first)."""
        self.exchange: Exchange | None = None
        self.calls = 0
        self.last: dict[str, int] = {}
        """``rows`` this rank pushed (its own shard's included), ``received`` rows its shard was sent (its own
        included, before summing), ``owned`` distinct rows it summed."""

    def rows(self, table_RD: torch.Tensor) -> torch.Tensor:
        """Sorted distinct rows of ``table_RD`` that can be non-zero (module docstring, step 1); takes the ids
        recorded since the last call."""
        ids = self.lookups.take(table_RD.device) if self.lookups is not None else None
        if ids is None:
            return nonzero_rows(table_RD)
        if not self.lookups.checked and not self.lookups.check(ids, table_RD):
            return nonzero_rows(table_RD)
        return ids

    @outside_python_tls
    def __call__(self, output_tensor, input_tensor, group, op, async_op: bool = False, *, rows_K=None):
        """FSDP2's call; ``rows_K``: the rows :meth:`rows` found already (a caller that looked before choosing)."""
        ex = self._exchange(group)
        world, rank = ex.world, ex.rank
        table_RD = input_tensor.view(-1, self.dim)
        per = table_RD.shape[0] // world
        if per * world != table_RD.shape[0] or output_tensor.numel() != per * self.dim:
            raise ValueError(
                f"{self.name}: the unit's reduce-scatter buffer ({input_tensor.numel()} elements for {world} ranks) is "
                f"not its table's rows of {self.dim}: does the unit hold anything besides the table?"
            )
        scale, divisor = division(op, world, self.fsdp_unit)
        rows_K = self.rows(table_RD) if rows_K is None else rows_K
        values_KD = table_RD.index_select(0, rows_K)
        if scale is not None:
            values_KD.mul_(scale)
        send_W = torch.bincount(torch.div(rows_K, per, rounding_mode="floor"), minlength=world).cpu()
        numel, dtype = table_RD.shape[0], table_RD.dtype
        w = coo_words(numel, dtype, self.dim)
        with ex.phase("reduce_scatter"):
            recv_W = ex.exchange_counts(send_W)
            got = ex.all_to_all_v(pack_coo(rows_K, values_KD, numel), send_W * w, recv_W * w)
        with ex.local("sum"):
            idx_K, sums_KD = sum_by_index(*unpack_coo(got, numel, dtype, self.dim))
            if divisor is not None:
                sums_KD.div_(divisor)
            shard_RD = output_tensor.view(per, self.dim)
            shard_RD.zero_()
            shard_RD.index_copy_(0, idx_K - rank * per, sums_KD)
        self.calls += 1
        self.last = {"rows": rows_K.numel(), "received": int(recv_W.sum()), "owned": idx_K.numel()}
        return None
