"""Zen under FSDP2 (``torch.distributed.fsdp.fully_shard``): an embedding unit's gradient reduce-scattered by rows
to the ranks that own them, instead of the whole table.

* :mod:`~zen_analysis.fsdp.units`: which units qualify (an untied embedding in a unit of its own, sharded by rows)
  and the error that says how to wrap one that does not;
* :mod:`~zen_analysis.fsdp.reduce_scatter`: the sparse reduce-scatter (Zen's push), with stock FSDP2's division;
* :mod:`~zen_analysis.fsdp.all_gather`: the sparse all-gather of the rows that changed (Zen's pull), against a
  replica of the table each rank keeps;
* :mod:`~zen_analysis.fsdp.hsdp`: HSDP, the table sharded within a replica and summed across replicas by Zen;
* :mod:`~zen_analysis.fsdp.hashed`: hashed row ownership, the table stored in Zen's h0 order so every contiguous
  shard holds a hash-balanced set of rows (state dicts and checkpoints stay in the original order);
* :mod:`~zen_analysis.fsdp.dcp`: checkpoints through ``torch.distributed.checkpoint`` (model and optimizer,
  hashed tables and their moments in the original order), committed by the toolkit's one checkpoint protocol
  (:mod:`zen_analysis.atomic`: checksums, fsyncs, one rename); ``newest`` finds the newest complete one;
* :mod:`~zen_analysis.fsdp.install`: :func:`shard`, ``fully_shard`` the Zen way in one call, and :func:`install`,
  one call on a model the user sharded already; :mod:`~zen_analysis.fsdp.hf_trainer`, the transformers Trainer;
* :mod:`~zen_analysis.fsdp.timing`: where a step's time goes (each unit's collectives timed);
* the toolkit's loop under ``dist.sharding=fsdp``: :mod:`~zen_analysis.fsdp.training` (its sync: the model sharded,
  the embedding unit's reduce-scatter stock, Zen's or :mod:`~zen_analysis.fsdp.auto`'s choice per unit) and
  :mod:`~zen_analysis.fsdp.embedding_capture` (each worker's embedding gradient from its ids and output gradient).
"""

from zen_analysis.fsdp.all_gather import ChangedRowsAllGather
from zen_analysis.fsdp.hashed import HashedRows, hashed_order
from zen_analysis.fsdp.hsdp import ZenHSDP, shard_embedding_hsdp
from zen_analysis.fsdp.install import ZenFSDP, install, shard
from zen_analysis.fsdp.reduce_scatter import SparseReduceScatter
from zen_analysis.fsdp.units import EmbeddingUnit, UnitError, embedding_units

__all__ = [
    "ChangedRowsAllGather",
    "EmbeddingUnit",
    "HashedRows",
    "SparseReduceScatter",
    "UnitError",
    "ZenFSDP",
    "ZenHSDP",
    "embedding_units",
    "hashed_order",
    "install",
    "shard",
    "shard_embedding_hsdp",
]
