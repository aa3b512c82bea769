"""The toolkit's training loop under FSDP2 (``dist.sharding=fsdp``): :class:`FSDPSync`, the loop's sync object that
shards the model at ``attach`` and lets FSDP2's own collectives do the summing.

How the model is sharded (:meth:`FSDPSync.attach`): rank 0's parameters broadcast (the replicas start equal, as
DDP's do), then ``fully_shard`` on the input embedding alone (a unit of its own: what Zen's reduce-scatter needs),
on each transformer block (the classes the model names in ``_no_split_modules``, as the transformers Trainer's
FSDP wrapping does), and on the model, the root (the LM head, final norm and any other table: GPT-2's and OPT's
position tables, whose gradient is dense, stay there under stock FSDP2). ``sync.wire_dtype`` is FSDP2's
``reduce_dtype``. The embedding unit's reduce-scatter is

* ``sync.method=dense``: stock FSDP2's (the table in its own order);
* ``sync.method=natural``, ``sync.scheme=zen``: Zen's sparse reduce-scatter
  (:class:`~zen_analysis.fsdp.reduce_scatter.SparseReduceScatter`) over the table stored in the hashed row order
  (:class:`~zen_analysis.fsdp.hashed.HashedRows`, seeded by ``sync.hash_seed``);
* ``sync.scheme=auto``: one of the two, chosen per unit every ``sync.planner_every`` steps
  (:class:`~zen_analysis.fsdp.auto.AutoReduceScatter`).

Every other unit is stock FSDP2. A step's micro-batches accumulate unsharded gradients (``requires_gradient_sync``
off but for the last backward, :meth:`FSDPSync.before_backward`), so each unit reduce-scatters once a step, as DDP
all-reduces once; :meth:`FSDPSync.synchronize` has nothing left to do. On the CPU, FSDP2's collectives run inside
forward and backward (``compute_s`` includes them): every unit's all-gathers and reduce-scatters are timed
(:mod:`~zen_analysis.fsdp.timing`) and each step's row says how long they took (``all_gather_s``,
``reduce_scatter_s``, ``embedding_reduce_scatter_s``) and what they sent.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from zen_analysis.fsdp.auto import AutoReduceScatter
from zen_analysis.fsdp.hashed import STRATA, HashedRows
from zen_analysis.fsdp.hsdp import clip_grad_norm_ as clip_sharded_grad_norm_
from zen_analysis.fsdp.install import bytes_sent_by, install
from zen_analysis.fsdp.timing import CommClock, time_comms
from zen_analysis.fsdp.units import UnitError, unit_of
from zen_analysis.sync.grad_sync import GradSync
from zen_analysis.wire.inflight import hold

EMBEDDING_REDUCE = ("dense", "zen", "auto")
"""What the input embedding unit's reduce-scatter is: stock FSDP2's, Zen's, or chosen per unit."""


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's transformer blocks: the modules of the classes it lists in ``_no_split_modules`` (a transformers
    model's own statement of what must stay whole on one device)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if not blocks:
        raise UnitError(
            f"{type(model).__name__} names no transformer blocks (_no_split_modules): dist.sharding=fsdp shards "
            "the transformers LLM families (llama, gpt2, opt, gemma2)"
        )
    return blocks


class FSDPSync(GradSync):
    """The loop's sync under ``dist.sharding=fsdp`` (module docstring): ``embedding``, one of
    :data:`EMBEDDING_REDUCE`, is the input embedding unit's reduce-scatter; ``reduce_dtype`` FSDP2's (None: the
    gradients' own); ``seed`` the hashed row order's; ``every`` and ``hysteresis`` ``auto``'s."""

    name = "fsdp"

    def __init__(
        self,
        *,
        embedding: str = "dense",
        reduce_dtype: torch.dtype | None = None,
        seed: int = 0,
        strata: int | None = STRATA,
        row_source: str = "ids",
        every: int = 50,
        hysteresis: float = 0.1,
    ) -> None:
        if embedding not in EMBEDDING_REDUCE:
            raise ValueError(f"embedding must be one of {EMBEDDING_REDUCE}, got {embedding!r}")
        self.embedding = embedding
        self.reduce_dtype = reduce_dtype
        self.seed, self.strata, self.row_source = seed, strata, row_source
        self.every, self.hysteresis = every, hysteresis
        self.bytes_sent = 0
        self.sparse_bytes_sent = None if embedding == "dense" else 0
        self.root: FSDPModule | None = None
        self.units: dict[str, FSDPModule] = {}
        self.embedding_unit = ""
        """The input embedding unit's name among :attr:`units`."""
        self.comm = None
        """The embedding unit's Zen comm (sparse or auto), None under stock."""
        self.clock = CommClock()
        self.hashed: HashedRows | None = None

    def attach(self, model: nn.Module) -> None:
        if not dist.is_initialized():
            raise ValueError(
                "dist.sharding=fsdp needs a process group: start the ranks with zen_analysis.launch (or "
                "`zen-analysis train`, or torchrun), even for one rank"
            )
        world = dist.get_world_size()
        for p in model.parameters():  # every replica starts as rank 0's, as DDP's do
            hold(p.data)
            dist.broadcast(p.data, src=0)
        table = model.get_input_embeddings()
        names = {id(m): n for n, m in model.named_modules()}
        self.embedding_unit = names[id(table)]
        if self.embedding != "dense":
            self.hashed = HashedRows(table, seed=self.seed, strata=self.strata)
        device = next(model.parameters()).device
        mesh = init_device_mesh(device.type, (world,))
        kwargs = {"mesh": mesh}
        if self.reduce_dtype is not None:
            kwargs["mp_policy"] = MixedPrecisionPolicy(reduce_dtype=self.reduce_dtype)
        blocks = transformer_blocks(model)
        fully_shard(table, **kwargs)
        for block in blocks:
            fully_shard(block, **kwargs)
        fully_shard(model, **kwargs)
        self.root = model
        self.units = {names[id(m)] or "(root)": m for m in (table, *blocks, model)}
        if self.embedding != "dense":
            # the token table's unit alone: a position table (GPT-2's wpe, OPT's embed_positions) shares the root
            # with the head and final norm and stays stock FSDP2, as its dense gradient wants
            unit = unit_of(model, table)
            if self.embedding == "zen":
                self.comm = install(model, row_source=self.row_source, only=(unit.name,)).reduce_scatters[unit.name]
            else:
                self.comm = AutoReduceScatter(
                    unit, every=self.every, hysteresis=self.hysteresis, row_source=self.row_source
                )
                table.set_custom_reduce_scatter(self.comm)
        self.clock = time_comms(self.units)

    def before_backward(self, *, last: bool, capturing: bool) -> None:
        """Gradients accumulate unsharded until the step's last backward, which reduce-scatters (capture steps too)."""
        self.root.set_requires_gradient_sync(last)

    def clip_grad_norm_(self, parameters, max_norm: float, rows: dict | None = None) -> torch.Tensor:
        """The norm over every rank's shards (:func:`~zen_analysis.fsdp.hsdp.clip_grad_norm_`: one collective a
        mesh); a gradient on rows (``train.embedding_update=lazy``) is clipped on its rows, as the base sync does."""
        if rows:
            return super().clip_grad_norm_(parameters, max_norm, rows)
        return clip_sharded_grad_norm_(list(parameters), max_norm)

    def synchronize(self, model: nn.Module) -> None:
        """Nothing: FSDP2 reduce-scattered every unit during the last backward."""

    def step_counters(self) -> dict:
        """This step's collectives: seconds by kind (and the embedding unit's reduce-scatter alone), and the
        bytes this rank sent in them."""
        seconds, nbytes = self.clock.take(), self.clock.take_bytes()
        row = {"all_gather_s": 0.0, "reduce_scatter_s": 0.0, "embedding_reduce_scatter_s": 0.0}
        for (kind, unit), s in seconds.items():
            row[f"{kind}_s"] += s
            if kind == "reduce_scatter" and unit == self.embedding_unit:
                row["embedding_reduce_scatter_s"] = s
        world = dist.get_world_size()
        dense = 0
        for (kind, unit), n in nbytes.items():
            if kind == "reduce_scatter" and unit == self.embedding_unit and self.comm is not None:
                continue  # counted by the comm itself below
            dense += (world - 1) * n // world if kind == "reduce_scatter" else (world - 1) * n
        zen = self._zen_bytes()
        step_zen = zen - (self.sparse_bytes_sent or 0)
        if self.sparse_bytes_sent is not None:
            self.sparse_bytes_sent = zen
        self.bytes_sent += dense + step_zen
        row["bytes_sent"] = dense + step_zen
        return row

    def _zen_bytes(self) -> int:
        """Bytes the embedding unit's Zen comm sent so far (the dense calls of ``auto`` included)."""
        if self.comm is None:
            return 0
        return bytes_sent_by([self.comm]) + getattr(self.comm, "dense_bytes", 0)

    def state_dict(self) -> dict:
        """``auto``: the embedding unit's planner state (its call counter, current choice and decisions), so a
        resumed run decides at the uninterrupted run's steps; {} otherwise (FSDP2 keeps nothing else between
        steps beyond the model and optimizer, which the checkpoint's DCP files hold)."""
        if isinstance(self.comm, AutoReduceScatter):
            return {"auto": self.comm.state_dict()}
        return {}

    def load_state_dict(self, state: dict) -> None:
        """:meth:`state_dict`'s state, after :meth:`attach`. A checkpoint written before the planner's state was
        saved holds none: the unit then decides at its first call after the resume and every ``every`` calls
        from there, and the summary lists only the decisions made since the resume."""
        if not isinstance(self.comm, AutoReduceScatter):
            return super().load_state_dict(state)
        if "auto" in state:
            self.comm.load_state_dict(state["auto"])
        elif state:
            raise ValueError(f"the fsdp auto sync's checkpoint state has {sorted(state)}, not its planner's ('auto')")

    @property
    def decisions(self) -> dict | None:
        if isinstance(self.comm, AutoReduceScatter):
            return {self.comm.name: self.comm.decisions}
        return None

    def describe(self) -> dict:
        return {
            "sharding": "fsdp",
            "units": list(self.units),
            "embedding_unit": self.embedding_unit,
            "embedding_reduce_scatter": self.embedding,
            "hashed_rows": self.hashed is not None,
            "reduce_dtype": str(self.reduce_dtype).removeprefix("torch.") if self.reduce_dtype else "model",
            "collective_seconds": "the collectives'" if self.clock.synchronous else "launches only (CUDA streams)",
        }
