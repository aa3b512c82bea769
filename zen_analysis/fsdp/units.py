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

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import Shard

from zen_analysis.wire.exchange import Exchange
from zen_analysis.wire.torch_features import fsdp_param_groups


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


class OnExchange:
    """What Zen's FSDP2 comms share: a plain allocation (FSDP2's default one) and one
    :class:`~zen_analysis.wire.exchange.Exchange` per process group, which counts their bytes by phase."""

    exchange: Exchange | None = None

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def _exchange(self, group: dist.ProcessGroup) -> Exchange:
        if self.exchange is None or self.exchange.group is not group:
            self.exchange = Exchange(group)
        return self.exchange


def _param_groups(unit: nn.Module) -> list:
    """The unit's FSDP parameter groups (FSDP2 keeps one per mesh; a custom comm needs exactly one)."""
    return fsdp_param_groups(unit)


def scan_units(model: nn.Module) -> tuple[list[EmbeddingUnit], list[UnitError]]:
    """Every FSDP2 unit of ``model`` (itself included) that manages an ``nn.Embedding`` weight, checked: the ones
    that hold that weight alone, untied, sharded on dim 0, and for every other one the :class:`UnitError` that says
    how to wrap it."""
    names = {id(m): n for n, m in model.named_modules()}
    found, refused = [], []
    for unit in model.modules():
        if isinstance(unit, FSDPModule):
            try:
                got = _check(unit, names)
            except UnitError as e:
                refused.append(e)
            else:
                found += [got] if got is not None else []
    return found, refused


def embedding_units(model: nn.Module) -> list[EmbeddingUnit]:
    """:func:`scan_units`' units, raising the first refusal."""
    found, refused = scan_units(model)
    if refused:
        raise refused[0]
    return found


def current_comm(unit: nn.Module, kind: str):
    """The FSDP2 ``unit``'s ``kind`` comm now (``"all_gather"`` or ``"reduce_scatter"``): the custom one set, or an
    instance of stock FSDP2's default when none was set."""
    group = fsdp_param_groups(unit)[0]
    return group._all_gather_comm if kind == "all_gather" else group._reduce_scatter_comm


def unit_of(model: nn.Module, table: nn.Embedding) -> EmbeddingUnit:
    """The FSDP2 unit ``table`` was made (``fully_shard(table)``), checked as :func:`scan_units` checks a unit, by its
    name in ``model``; the other units are not looked at, so a position table in the root (GPT-2's ``wpe``, OPT's
    ``embed_positions``) stays stock FSDP2 without refusing the token table's Zen."""
    if not isinstance(table, FSDPModule):
        raise UnitError(
            f"{type(table).__name__} is not an FSDP2 unit of its own: call fully_shard() on it before fully_shard() "
            "of the modules around it"
        )
    return _check(table, {id(m): n for n, m in model.named_modules()})  # never None: the unit holds table.weight


def _check(unit: nn.Module, names: dict[int, str]) -> EmbeddingUnit | None:
    groups = _param_groups(unit)
    params = [fp for g in groups for fp in g.fsdp_params]
    tables = [fp for fp in params if isinstance(fp._module_info.module, nn.Embedding)]
    if not tables:
        return None
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
    return EmbeddingUnit(unit=unit, embedding=emb, name=name)
