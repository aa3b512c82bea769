"""One call on a user's ``fully_shard`` model: :func:`install` puts Zen's reduce-scatter on every embedding unit
and leaves every other unit to stock FSDP2.

    fully_shard(model.embed_tokens, mesh=mesh)      # the table, a unit of its own
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    zen = zen_analysis.fsdp.install(model)            # then train as before
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from zen_analysis.fsdp.reduce_scatter import SparseReduceScatter
from zen_analysis.fsdp.units import UnitError, embedding_units


@dataclass
class ZenFSDP:
    """What :func:`install` put on a model: one sparse reduce-scatter per embedding unit, by the embedding's
    name."""

    reduce_scatters: dict[str, SparseReduceScatter] = field(default_factory=dict)

    def bytes_sent(self) -> int:
        """Bytes this rank's sparse reduce-scatters sent to other ranks so far (counts and rows)."""
        return sum(
            r.bytes_sent for rs in self.reduce_scatters.values() if rs.exchange for r in rs.exchange.records.values()
        )


def install(model: nn.Module, *, row_source: str = "ids") -> ZenFSDP:
    """Zen's sparse reduce-scatter on every FSDP2 unit of ``model`` that holds an untied embedding on its own
    (:func:`~zen_analysis.fsdp.units.embedding_units` refuses a unit that mixes it with other parameters, saying how
    to wrap it). ``row_source``: ``"ids"`` (the looked-up ids) or ``"scan"`` (a row-wise pass), as in
    :class:`~zen_analysis.fsdp.reduce_scatter.SparseReduceScatter`. Call it after ``fully_shard`` and before the
    first backward."""
    units = embedding_units(model)
    if not units:
        raise UnitError(
            "no FSDP2 unit of this model holds an nn.Embedding: apply fully_shard(model.<embedding>) to the table "
            "first, then to the modules around it"
        )
    zen = ZenFSDP()
    for u in units:
        comm = SparseReduceScatter(u, row_source=row_source)
        u.unit.set_custom_reduce_scatter(comm)
        zen.reduce_scatters[u.name] = comm
    return zen
