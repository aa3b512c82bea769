"""Which FSDP2 units Zen sums: a unit (a module ``fully_shard`` was applied to) whose only parameter is an untied
``nn.Embedding``'s weight, sharded by rows (``Shard(0)``, FSDP2's default).

Why a unit of its own: FSDP2 reduce-scatters a unit's gradients as one flat buffer, rank r's chunk holding its
shard of every parameter one after another. A sparse reduce-scatter of that buffer by embedding rows needs the
buffer to be the table's rows, so a unit that mixes the embedding with dense parameters is refused with the line
that fixes it (``fully_shard(model.embed)`` before ``fully_shard(model)``). A tied embedding (the LM head's weight
too) has a dense gradient: it is refused the same way (untie it, or leave it to stock FSDP2). A tie across two
units is no tie under FSDP2 (torch 2.13): each unit shards a copy of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import Shard


class UnitError(ValueError):
    """An FSDP2 unit Zen cannot sum by rows, with what to do instead."""


@dataclass(frozen=True)
class EmbeddingUnit:
    """An FSDP2 unit that holds one untied embedding table and nothing else."""

    unit: nn.Module
    """The module ``fully_shard`` was applied to (an ``FSDPModule``)."""
    embedding: nn.Embedding
    name: str
    """The embedding's qualified name in the model (for messages and captures)."""

    @property
    def rows(self) -> int:
        return self.embedding.num_embeddings

    @property
    def dim(self) -> int:
        return self.embedding.embedding_dim


def _param_groups(unit: nn.Module) -> list:
    """The unit's FSDP parameter groups (FSDP2 keeps one per mesh; a custom comm needs exactly one)."""
    return [g for g in unit._get_fsdp_state()._fsdp_param_groups if g is not None]


def embedding_units(model: nn.Module) -> list[EmbeddingUnit]:
    """Every FSDP2 unit of ``model`` (itself included) that manages an ``nn.Embedding`` weight, checked: the unit
    holds that weight alone, untied, sharded on dim 0. Raises :class:`UnitError` saying how to wrap it otherwise."""
    names = {id(m): n for n, m in model.named_modules()}
    found = []
    for unit in model.modules():
        if not isinstance(unit, FSDPModule):
            continue
        groups = _param_groups(unit)
        params = [fp for g in groups for fp in g.fsdp_params]
        tables = [fp for fp in params if isinstance(fp._module_info.module, nn.Embedding)]
        if not tables:
            continue
        emb = tables[0]._module_info.module
        name = names.get(id(emb), "embedding")
        wrap = f"fully_shard(model.{name}) before fully_shard() of the modules around it"
        if len(params) != 1:
            others = [f"{names.get(id(fp._module_info.module), '?')}.{fp._module_info.param_name}" for fp in params]
            raise UnitError(
                f"the FSDP2 unit {names.get(id(unit)) or '(root)'!r} holds the embedding {name!r} with "
                f"{len(params) - 1} other parameters ({', '.join(o for o in others if not o.startswith(name + '.'))}"
                f"): a sparse reduce-scatter needs the table in a unit of its own; call {wrap}"
            )
        if len(groups) != 1:
            raise UnitError(f"{name}: its unit has {len(groups)} parameter groups (a per-parameter mesh); use one mesh")
        info = tables[0]._module_info
        if info.shared_modules:
            raise UnitError(
                f"{name} is tied to another module's weight ({len(info.shared_modules)} sharing it): its gradient is "
                "dense, not row-sparse; untie it, or leave its unit to stock FSDP2"
            )
        placement = tables[0].fsdp_placement
        if not (isinstance(placement, Shard) and placement.dim == 0):
            raise UnitError(f"{name} is sharded as {placement}; Zen sums tables sharded by rows (Shard(0))")
        found.append(EmbeddingUnit(unit=unit, embedding=emb, name=name))
    return found
