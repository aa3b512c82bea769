"""Natural sparsity in the toolkit's loop: the input embedding's gradient summed by a sparse scheme (Zen paper
section 5: the sparse path carries the embedding only), every other gradient by the dense baseline.

By rows (``granularity="rows"``, the default): the gradient's index space is the embedding's rows and each entry a
row of ``dim`` values (:mod:`zen_analysis.wire.rows`), the rows being the token ids this rank's forward passes
looked up this step (``row_source="ids"``, a forward pre-hook on the embedding) or those a row-wise pass finds
(``"scan"``); a ``sparse=True`` embedding's gradient gives its rows itself and stays sparse. By elements: one index
per non-zero element, found by a pass over the whole gradient (the paper's COO view).

Shape suffixes: K non-zero rows on this rank, D values per row (the table's width)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from zen_analysis.comm import build_scheme
from zen_analysis.sync.grad_sync import DenseAllReduce, GradSync
from zen_analysis.sync.lookups import LookedUp
from zen_analysis.wire.dtypes import on_wire
from zen_analysis.wire.inflight import hold
from zen_analysis.wire.rows import nonzero_rows, sparse_rows
from zen_analysis.workload.models import input_embedding_name
from zen_analysis.zen.sparse_allreduce import NodeGroups, zen_sum_hierarchical


def _holders(model: nn.Module, weight: nn.Parameter) -> int:
    """How many modules hold ``weight`` as a parameter of their own (2 for an embedding tied to the LM head)."""
    return sum(p is weight for m in model.modules() for p in m.parameters(recurse=False))


GRANULARITIES = ("rows", "elements")
ROW_SOURCES = ("ids", "scan")


class SparseSync(GradSync):
    """Natural sparsity: the input embedding's gradient (rows of the tokens seen, the rest exactly zero) is
    summed by a sparse scheme of :mod:`zen_analysis.comm` — ``zen`` by default — and averaged; every other
    parameter goes through the dense bucketed all-reduce, as the Zen paper does (sparse path for the embedding
    only). Bytes and seconds of the sparse path accumulate in ``sparse_bytes_sent`` / ``sparse_seconds``.

    The scheme's hash seed (``seed`` option, h0) is broadcast from rank 0 at ``attach`` so every rank agrees.
    """

    def __init__(
        self,
        scheme: str = "zen",
        *,
        bucket_mb: float = 25.0,
        group: dist.ProcessGroup | None = None,
        planner=None,
        gpus_per_node: int = 0,
        granularity: str = "rows",
        row_source: str = "ids",
        overlap: bool = False,
        wire_dtype: torch.dtype | None = None,
        **options,
    ) -> None:
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
        if row_source not in ROW_SOURCES:
            raise ValueError(f"row_source must be one of {ROW_SOURCES}, got {row_source!r}")
        if scheme == "auto" and gpus_per_node > 1:
            raise ValueError("the hierarchical mode (sync.gpus_per_node > 1) is Zen's alone, not auto's")
        self.granularity = "elements" if gpus_per_node > 1 else granularity
        """``rows`` or ``elements``; the hierarchical mode works by elements."""
        self.row_source = row_source
        """``ids`` (the looked-up token ids: the rows an untied embedding's gradient can be non-zero in; a tied
        embedding, whose output use touches every row, falls back to ``scan`` at ``attach``) or ``scan``."""
        self._looked: LookedUp | None = None
        self.union_rows: torch.Tensor | None = None
        """By rows: the rows of the last summed gradient that some rank touched (sorted or in the scheme's order);
        every other row of the averaged gradient is zero. What a lazy row update (``train.embedding_update``)
        steps."""
        self.name = scheme
        self.options = options
        self.planner = planner
        """With ``scheme="auto"``: a :class:`zen_analysis.comm.planner.Planner` (or a function of the world size
        that builds one at ``attach``); every ``planner.every`` steps the ranks' sketches of the embedding gradient
        are all-gathered and the planner picks the scheme the next steps sum it with (``decisions``)."""
        if scheme == "auto" and planner is None:
            raise ValueError("scheme='auto' needs a planner")
        self._schemes: dict = {}
        self.scheme = self._scheme("allreduce" if scheme == "auto" else scheme)
        self._step = 0
        self.gpus_per_node = gpus_per_node
        """Zen's hierarchical mode when > 1: reduce-scatter inside nodes, Zen across, all-gather inside."""
        self._groups = None
        self.group = group
        self.overlap = overlap
        self.wire_dtype = wire_dtype
        """The dtype every gradient is summed in (None: its own): bf16 sends a float32 model's values at 2 bytes,
        the embedding's rows through the scheme as the other buckets through the all-reduce."""
        self.dense = DenseAllReduce(bucket_mb=bucket_mb, group=group, overlap=overlap, wire_dtype=wire_dtype)
        """Every other gradient; with ``overlap`` its buckets are summed while backward runs, and whatever is still
        in flight when backward ends goes on while the embedding is summed."""
        self.sparse_params: list[nn.Parameter] = []
        self.sparse_bytes_sent = 0
        self.sparse_seconds = 0.0

    def attach(self, model: nn.Module) -> None:
        name = input_embedding_name(model)
        named = dict(model.named_parameters())
        self.sparse_params = [named[name]]
        if self.granularity == "rows" and self.row_source == "ids":
            if _holders(model, named[name]) > 1:  # tied to an output layer: every row gets a gradient
                self.row_source = "scan"
            else:
                self._looked = LookedUp(model.get_input_embeddings(), name=name)
        others = [p for n, p in named.items() if p.requires_grad and n != name]
        self.dense.attach(model, others)
        world = self.dense._world()
        if callable(self.planner) and not hasattr(self.planner, "decide"):
            self.planner = self.planner(world)
        if world > 1:
            hold(self.sparse_params[0].data)
            dist.broadcast(self.sparse_params[0].data, src=0, group=self.group)
            if hasattr(self.scheme, "seed") or self.name == "auto":
                mine = int(getattr(self.scheme, "seed", self.options.get("seed") or 0))
                seed = torch.tensor([mine], dtype=torch.int64, device=self.sparse_params[0].device)
                hold(seed)
                dist.broadcast(seed, src=0, group=self.group)
                self.options["seed"] = int(seed)
                self._schemes.clear()
                self.scheme = self._scheme(self.scheme.name)
        if self.gpus_per_node > 1 and world > 1:
            if self.name != "zen" or self.group is not None:
                raise ValueError("the hierarchical mode (sync.gpus_per_node > 1) is Zen's, on the default group")
            self._groups = NodeGroups(self.gpus_per_node)

    def before_last_backward(self) -> None:
        self.dense.before_last_backward()

    @property
    def overlap_seconds(self) -> float:
        return self.dense.overlap_seconds

    @property
    def hidden_seconds(self) -> float:
        return self.dense.hidden_seconds

    @property
    def early_buckets(self) -> int:
        return self.dense.early_buckets

    def _scheme(self, name: str):
        """The scheme instance called ``name`` (built once, with this sync's options and seed)."""
        if name not in self._schemes:
            self._schemes[name] = build_scheme(name, **self.options)
        return self._schemes[name]

    def synchronize(self, model: nn.Module) -> None:
        world = self.dense._world()
        self._step += 1
        if world == 1:
            return
        self.dense.start()  # overlap: the buckets backward left, asynchronously, while the embedding is summed
        self._sum_sparse(world)
        self.dense.finish()

    def _sum_sparse(self, world: int) -> None:
        for p in self.sparse_params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            if p.grad.is_sparse and self.granularity == "elements":  # summed over a dense copy's non-zeros
                p.grad = p.grad.to_dense()
            rows = None
            if self.granularity == "rows" and self._groups is None:
                rows = self._rows_seen(p.grad.device)
                if rows is None and not p.grad.is_sparse:
                    rows = nonzero_rows(p.grad)
            if self.planner is not None:
                self._plan(p.grad, rows, world)
            if self._groups is not None:
                flat = p.grad.detach().reshape(-1).float()
                used: list = []
                summed = zen_sum_hierarchical(flat, self._groups, seed=self.scheme.seed, exchanges=used).view_as(p.grad)
                p.grad.copy_(summed / world)
                records = [r for ex in used for r in ex.records.values()]
                self.sparse_bytes_sent += sum(r.bytes_sent for r in records)
                self.sparse_seconds += sum(r.seconds for r in records)
                continue
            if self.granularity == "rows":
                self._sum_by_rows(p, world, rows)
            elif self._wire(p.grad) is p.grad:
                self.scheme.run(p.grad, group=self.group)  # in place, like all_reduce
                p.grad.div_(world)
            else:
                p.grad.copy_(self.scheme.run(self._wire(p.grad), group=self.group)).div_(world)
            measured = self.scheme.last_measured()
            self.sparse_bytes_sent += int(measured["bytes_sent"].sum())
            self.sparse_seconds += float(measured["seconds"].sum())

    def _rows_seen(self, device: torch.device) -> torch.Tensor | None:
        """This step's looked-up rows (sorted, distinct; :class:`~.lookups.LookedUp`), or None for a row-wise pass;
        clears the record."""
        return self._looked.take(device) if self.row_source == "ids" and self._looked is not None else None

    def _sum_by_rows(self, p: nn.Parameter, world: int, rows: torch.Tensor | None) -> None:
        """The embedding's gradient summed by rows and averaged over the union's rows alone (the others are zero);
        ``rows``: this step's (dense gradient), None for a sparse one (it holds its rows)."""
        grad = p.grad
        if grad.is_sparse:  # nn.Embedding(sparse=True): the gradient holds its rows
            rows_K, values_KD = sparse_rows(grad)
            u_rows, u_values = self.scheme.sum_rows(rows_K, self._wire(values_KD), grad.shape[0], group=self.group)
            if u_rows.numel() > 1 and not bool((u_rows[1:] > u_rows[:-1]).all()):  # Zen's come in hash order
                order = torch.argsort(u_rows)
                u_rows, u_values = u_rows[order], u_values[order]
            # sorted and distinct: flagged coalesced, so the clip and the row update read it without a sort and copy
            p.grad = torch.sparse_coo_tensor(
                u_rows.unsqueeze(0), u_values.to(grad.dtype) / world, grad.shape, is_coalesced=True
            )
            self.union_rows = u_rows
            return
        u_rows, u_values = self.scheme.sum_rows(rows, self._wire(grad[rows]), grad.shape[0], group=self.group)
        grad.index_fill_(0, rows, 0)  # a row this rank held that the union does not carry (allreduce) is zero
        grad[u_rows] = u_values.to(grad.dtype) / world
        self.union_rows = u_rows

    def _wire(self, x: torch.Tensor) -> torch.Tensor:
        return on_wire(x, self.wire_dtype)

    def _plan(self, grad: torch.Tensor, rows: torch.Tensor | None, world: int) -> None:
        """The scheme of this step (:meth:`~zen_analysis.comm.planner.Planner.choose`: on its steps the ranks'
        sketches of the embedding gradient are all-gathered and priced; every rank picks the same)."""
        bytes0 = self.planner.bytes_sent
        if self.granularity == "rows":
            idx = sparse_rows(grad)[0] if grad.is_sparse else rows
            kw = {"indices": idx, "numel": grad.shape[0], "width": grad.shape[1]}
        else:
            kw = {"dense": grad.reshape(-1)}
        choice = self.planner.choose(
            "embedding", self._step - 1, group=self.group, dtype=self.wire_dtype or grad.dtype, **kw
        )
        self.sparse_bytes_sent += self.planner.bytes_sent - bytes0
        self.scheme = self._scheme(choice)

    def state_dict(self) -> dict:
        """``auto``: the step counter and the planner's choices (which steps it decides at, and what it holds)."""
        if self.planner is None:
            return {}
        return {"step": self._step, "planner": self.planner.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if self.planner is None:
            return super().load_state_dict(state)
        self._step = int(state["step"])
        self.planner.load_state_dict(state["planner"])
        if "embedding" in self.planner.decisions:
            self.scheme = self._scheme(self.planner.decisions["embedding"]["scheme"])

    @property
    def decisions(self) -> dict:
        return getattr(self.planner, "decisions", {}) if self.planner is not None else {}
