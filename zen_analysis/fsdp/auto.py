"""``sync.scheme=auto`` under FSDP2: an embedding unit's reduce-scatter chosen per unit, dense (stock FSDP2's) or
Zen's sparse one, from the rows the ranks touch.

Every ``every`` calls (the first included) the unit decides: each rank finds its rows (the ids it looked up), one
all-reduce gives every rank the largest count, ``K``, and so the same choice. The two are priced by the bytes a rank
sends, which is what a step waits for on a bandwidth-bound link:

* dense: stock's ring reduce-scatter, ``(W - 1) / W x R x D`` values of the reduce dtype for a table of ``R`` rows
  of ``D``;
* sparse: the busiest rank's ``K`` rows, each its index and ``D`` values (:func:`~zen_analysis.wire.coo.coo_words`),
  of which ``(W - 1) / W`` leave the rank under hashed ownership.

Sparse is chosen when its bytes are below dense's by ``hysteresis`` (and dense kept until then, so a unit near the
break-even does not flip every decision). Both paths give the reduce-scatter stock FSDP2 gives (the sparse one to
float rounding, bit for bit on integer-valued gradients), so a switch changes time, not the run. The choices are in
:attr:`AutoReduceScatter.decisions` (the run summary's ``planner``).

Shape suffixes: R rows of the unit's padded table, D values per row (the table's width), K rows this rank may hold
non-zero.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

from zen_analysis.fsdp.reduce_scatter import SparseReduceScatter
from zen_analysis.fsdp.units import EmbeddingUnit
from zen_analysis.wire.coo import coo_words
from zen_analysis.wire.inflight import hold, outside_python_tls


class AutoReduceScatter(ReduceScatter):
    """FSDP2's ``ReduceScatter`` for one embedding unit that picks dense or sparse every ``every`` calls (module
    docstring). :attr:`choice` is the current one (``"dense"`` or ``"zen"``)."""

    def __init__(self, unit: EmbeddingUnit, *, every: int = 50, hysteresis: float = 0.1, row_source: str = "ids"):
        if every < 1 or not 0 <= hysteresis < 1:
            raise ValueError(f"every must be >= 1 and hysteresis in [0, 1), got {every} and {hysteresis}")
        self.name = unit.name
        self.sparse = SparseReduceScatter(unit, row_source=row_source)
        self.every, self.hysteresis = every, hysteresis
        self.choice: str | None = None
        self.calls = 0
        self.dense_bytes = 0
        """Bytes the dense calls sent (the ring's ``(W - 1) / W`` of the buffer)."""
        self.decisions: list[dict] = []

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return self.sparse.allocate(size, dtype=dtype, device=device)

    @property
    def exchange(self):
        return self.sparse.exchange

    @outside_python_tls
    def __call__(self, output_tensor, input_tensor, group, op, async_op: bool = False):
        table_RD = input_tensor.view(-1, self.sparse.dim)
        rows_K = self.sparse.rows(table_RD)  # every call: the recorded ids are taken, used or not
        world = dist.get_world_size(group)
        if self.calls % self.every == 0:
            self._decide(rows_K, table_RD, group, world)
        self.calls += 1
        if self.choice == "zen":
            return self.sparse(output_tensor, input_tensor, group, op, async_op, rows_K=rows_K)
        self.dense_bytes += (world - 1) * input_tensor.numel() * input_tensor.element_size() // world
        return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group, async_op=async_op)

    def state_dict(self) -> dict:
        """The call counter, the current choice and every decision: what a resumed run needs to decide at the calls
        an uninterrupted one does, from the same current choice (hysteresis), and to list every decision. Byte
        counters stay out: a step's bytes are the difference of two readings within one process."""
        return {"calls": self.calls, "choice": self.choice, "decisions": copy.deepcopy(self.decisions)}

    def load_state_dict(self, state: dict) -> None:
        self.calls, self.choice = int(state["calls"]), state["choice"]
        self.decisions = copy.deepcopy(state["decisions"])

    def _decide(self, rows_K: torch.Tensor, table_RD: torch.Tensor, group, world: int) -> None:
        count = torch.tensor([rows_K.numel()], dtype=torch.int64, device=table_RD.device)
        hold(count)
        dist.all_reduce(count, op=dist.ReduceOp.MAX, group=group)
        most = int(count.item())
        R, D = table_RD.shape
        size = table_RD.element_size()
        share = (world - 1) / world
        dense = share * R * D * size
        sparse = share * most * coo_words(R, table_RD.dtype, D) * size
        if self.choice == "zen":
            keep = sparse <= dense
        else:
            keep = sparse < dense * (1 - self.hysteresis)
        self.choice = "zen" if keep else "dense"
        self.decisions.append(
            {"call": self.calls, "choice": self.choice, "rows_max": most, "dense_bytes": dense, "sparse_bytes": sparse}
        )
