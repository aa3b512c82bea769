"""Zen under FSDP2 (``torch.distributed.fsdp.fully_shard``): an embedding unit's gradient reduce-scattered by rows
to the ranks that own them, instead of the whole table.

* :mod:`~zen_analysis.fsdp.units`: which units qualify (an untied embedding in a unit of its own, sharded by rows)
  and the error that says how to wrap one that does not;
* :mod:`~zen_analysis.fsdp.reduce_scatter`: the sparse reduce-scatter (Zen's push), with stock FSDP2's division;
* :mod:`~zen_analysis.fsdp.install`: :func:`install`, one call on a user's ``fully_shard`` model.
"""

from zen_analysis.fsdp.install import ZenFSDP, install
from zen_analysis.fsdp.reduce_scatter import SparseReduceScatter
from zen_analysis.fsdp.units import EmbeddingUnit, UnitError, embedding_units

__all__ = ["EmbeddingUnit", "SparseReduceScatter", "UnitError", "ZenFSDP", "embedding_units", "install"]
