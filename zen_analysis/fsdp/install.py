"""One call on a user's model: :func:`shard` applies ``fully_shard`` the Zen way (each untied embedding hashed and
a unit of its own, the blocks, the root) and installs Zen; :func:`install` puts Zen's reduce-scatter on the embedding
units of a model the user sharded already, and leaves every other unit to stock FSDP2.

    zen = zen_analysis.fsdp.shard(model, mesh=mesh, blocks=model.model.layers)   # then train as before

or, sharding it yourself:

    fully_shard(model.embed_tokens, mesh=mesh)      # the table, a unit of its own
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    zen = zen_analysis.fsdp.install(model)
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field

from torch import nn
from torch.distributed.fsdp import fully_shard

from zen_analysis.fsdp.all_gather import ChangedRowsAllGather
from zen_analysis.fsdp.hashed import STRATA, HashedRows
from zen_analysis.fsdp.reduce_scatter import SparseReduceScatter
from zen_analysis.fsdp.units import UnitError, current_comm, scan_units
from zen_analysis.sync.selection import select_sparse
from zen_analysis.wire.torch_features import require_fsdp2_comm_hooks


@dataclass
class ZenFSDP:
    """What :func:`install` put on a model: one sparse reduce-scatter per embedding unit, by the embedding's
    name."""

    reduce_scatters: dict[str, SparseReduceScatter] = field(default_factory=dict)
    all_gathers: dict[str, ChangedRowsAllGather] = field(default_factory=dict)
    """The sparse all-gathers (``all_gather=True``), by name."""
    hashed: dict[str, HashedRows] = field(default_factory=dict)
    """The tables :func:`shard` stored in the hashed row order, by name."""
    units: dict[str, nn.Module] = field(default_factory=dict)
    """The FSDP2 unit of each table, by name."""
    replaced: dict[str, tuple] = field(default_factory=dict)
    """The (reduce-scatter, all-gather) each unit had before, by name: what :meth:`remove` puts back."""

    def remove(self) -> None:
        """Take Zen off the model: each unit's reduce-scatter and all-gather back to what they were before
        :func:`install` (stock FSDP2's), the id recorders off. :func:`install` may then be called again (with other
        options, say); this object's counters stop where they are. The tables stay in their row order."""
        for name, unit in self.units.items():
            reduce_scatter, all_gather = self.replaced[name]
            comm = self.reduce_scatters[name]
            if comm.lookups is not None:
                comm.lookups.remove()
            unit.set_custom_reduce_scatter(reduce_scatter)
            if name in self.all_gathers:
                unit.set_custom_all_gather(all_gather)
        self.units.clear()

    def bytes_sent(self) -> int:
        """Bytes this rank's Zen comms sent to other ranks so far (counts, rows, and any dense fallback gather)."""
        return self.reduce_scatter_bytes() + self.all_gather_bytes()

    def reduce_scatter_bytes(self) -> int:
        return bytes_sent_by(self.reduce_scatters.values())

    def all_gather_bytes(self) -> int:
        return bytes_sent_by(self.all_gathers.values())

    def memory_bytes(self) -> int:
        """What the sparse all-gathers keep between calls: a replica of each gathered table."""
        return sum(ag.memory_bytes for ag in self.all_gathers.values())


def bytes_sent_by(comms) -> int:
    """The bytes the exchanges of ``comms`` (Zen's reduce-scatters or all-gathers) sent, summed over their records."""
    return sum(r.bytes_sent for c in comms if c.exchange is not None for r in c.exchange.records.values())


def install(
    model: nn.Module,
    *,
    row_source: str = "ids",
    all_gather: bool = False,
    max_replica_bytes: int | None = None,
    only: Iterable[str] | None = None,
) -> ZenFSDP:
    """Zen's sparse reduce-scatter on every FSDP2 unit of ``model`` that holds an untied embedding on its own. A
    table in a unit with other parameters (GPT-2's position table in the root, say), or tied, stays stock FSDP2 with
    a warning that says how to wrap it; when no table qualifies, that message is the error
    (:func:`~zen_analysis.fsdp.units.scan_units`). ``row_source``: ``"ids"`` (the looked-up ids) or ``"scan"`` (a
    row-wise pass), as in :class:`~zen_analysis.fsdp.reduce_scatter.SparseReduceScatter`. ``all_gather``: Zen's
    pull as the table's all-gather too (:class:`~zen_analysis.fsdp.all_gather.ChangedRowsAllGather`: only the rows
    that changed move, bit for bit stock's result), at the cost of a replica of the table per rank
    (``max_replica_bytes`` caps it; over the cap the gather stays dense). Off by default: FSDP2 is chosen to save
    memory, and the replica is the memory DDP holds. ``only``: the tables (by qualified name) to sum, the rest left
    to stock FSDP2 without a word (a position table whose forward takes no ids, say). Call it after
    ``fully_shard`` and before the first backward, once: a unit with Zen on it already (:func:`shard` installs it)
    is refused, since the first install's id recorder would go on recording (:meth:`ZenFSDP.remove` takes Zen off
    for another install)."""
    require_fsdp2_comm_hooks()
    units, refused = scan_units(model)
    if only is not None:
        wanted = set(only)
        units = [u for u in units if u.name in wanted]
        refused = refused if not units else []  # the refusals explain an empty choice, and only it
    if not units:
        if refused:
            raise refused[0]
        raise UnitError(
            "no FSDP2 unit of this model holds an nn.Embedding: apply fully_shard(model.<embedding>) to the table "
            "first, then to the modules around it"
        )
    for u in units:
        on = zen_comm(u.unit)
        if on is not None:
            raise UnitError(
                f"Zen is on {u.name!r}'s FSDP2 unit already ({type(on).__name__}, from shard() or an earlier "
                "install()): use the ZenFSDP that call returned; to install it again with other options, call "
                "remove() on that ZenFSDP first"
            )
    for why in refused:
        warnings.warn(f"left to stock FSDP2: {why}", stacklevel=2)
    zen = ZenFSDP()
    for u in units:
        zen.units[u.name] = u.unit
        zen.replaced[u.name] = (current_comm(u.unit, "reduce_scatter"), current_comm(u.unit, "all_gather"))
        comm = SparseReduceScatter(u, row_source=row_source)
        u.unit.set_custom_reduce_scatter(comm)
        zen.reduce_scatters[u.name] = comm
        if all_gather:
            gather = ChangedRowsAllGather(u, max_replica_bytes=max_replica_bytes)
            u.unit.set_custom_all_gather(gather)
            zen.all_gathers[u.name] = gather
    return zen


def zen_comm(unit: nn.Module):
    """The Zen reduce-scatter on an FSDP2 ``unit`` (a :class:`SparseReduceScatter`, or a comm around one: ``auto``'s,
    a timer's), or None: two on one table would each record its ids every step."""
    comm = current_comm(unit, "reduce_scatter")
    while comm is not None and not isinstance(comm, SparseReduceScatter):
        comm = getattr(comm, "inner", None) or getattr(comm, "sparse", None)
    return comm


def untied_embeddings(model: nn.Module) -> list[tuple[str, nn.Embedding]]:
    """(name, module) of every ``nn.Embedding`` of an unsharded ``model`` whose weight no other module holds."""
    holders: dict[int, int] = {}
    for m in model.modules():
        for p in m.parameters(recurse=False):
            holders[id(p)] = holders.get(id(p), 0) + 1
    return [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Embedding) and holders[id(m.weight)] == 1]


def zen_tables(model: nn.Module) -> list[tuple[str, nn.Embedding]]:
    """(name, module) of the tables :func:`shard` hashes and sums with Zen: the untied embeddings natural sparsity
    sums by default (:func:`~zen_analysis.sync.selection.select_sparse`), so a transformers model's token table
    alone. A position table is left out: its gradient is dense, and its forward may take no ids (OPT's
    ``embed_positions`` takes the attention mask, which a hashed order's pre-hook would remap)."""
    chosen = {id(w) for w in select_sparse(model)[0]}
    return [(n, m) for n, m in untied_embeddings(model) if id(m.weight) in chosen]


def shard(
    model: nn.Module,
    *,
    mesh=None,
    blocks: Iterable[nn.Module] = (),
    hashed_rows: bool = True,
    strata: int | None = STRATA,
    seed: int = 0,
    row_source: str = "ids",
    all_gather: bool = False,
    max_replica_bytes: int | None = None,
    **fsdp_kwargs,
) -> ZenFSDP:
    """``fully_shard`` ``model`` with Zen in one call: each table of :func:`zen_tables` (the untied token table of a
    transformers model) stored in the hashed row order (``hashed_rows``;
    :class:`~zen_analysis.fsdp.hashed.HashedRows` with ``seed`` and ``strata``) and made a unit of its own, each of
    ``blocks`` a unit, then the model the root unit; ``fsdp_kwargs`` (``mp_policy``, ``reshard_after_forward``, ...)
    go to every ``fully_shard`` call. Then :func:`install` on those tables. A tied table and a position table
    (GPT-2's ``wpe``, OPT's ``embed_positions``) stay in the root unit with stock FSDP2 (their gradients are
    dense)."""
    tables = zen_tables(model)
    if not tables:
        raise UnitError(
            "the model has no untied nn.Embedding that is not a position table: nothing for Zen to sum by rows "
            "(stock FSDP2 it is)"
        )
    hashed = {name: HashedRows(emb, seed=seed, strata=strata) for name, emb in tables if hashed_rows}
    for _, emb in tables:
        fully_shard(emb, mesh=mesh, **fsdp_kwargs)
    for block in blocks:
        fully_shard(block, mesh=mesh, **fsdp_kwargs)
    fully_shard(model, mesh=mesh, **fsdp_kwargs)
    zen = install(
        model,
        row_source=row_source,
        all_gather=all_gather,
        max_replica_bytes=max_replica_bytes,
        only=[name for name, _ in tables],  # the root's position table is stock FSDP2 by choice: no warning
    )
    zen.hashed.update(hashed)
    return zen
