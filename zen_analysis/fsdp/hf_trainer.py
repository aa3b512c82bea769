"""Zen under FSDP2 where the transformers ``Trainer`` shards the model (accelerate's FSDP2 path:
``TrainingArguments(fsdp=True, fsdp_config={"version": 2})``): the input embedding's reduce-scatter becomes Zen's
sparse one (:class:`~zen_analysis.fsdp.reduce_scatter.SparseReduceScatter`); every other unit stays stock FSDP2.

    trainer = ZenFSDPTrainer(model=model, args=TrainingArguments(..., fsdp=True, fsdp_config={"version": 2}),
                             train_dataset=...)
    trainer.train()                      # trainer.zen_state: the ZenFSDP installed (bytes, rows pushed)

or ``class MyTrainer(ZenFSDPTrainerMixin, SFTTrainer)``. What the mixin does, and where:

* at construction, on the unsharded model: the input embedding (``model.get_input_embeddings()``, the table with
  natural sparsity) stored in Zen's hashed row order (:class:`~zen_analysis.fsdp.hashed.HashedRows`;
  ``zen_hashed_rows=False`` keeps the vocabulary's order), which must happen before ``fully_shard`` and the Trainer
  shards in ``train()``;
* in the first ``training_step``, which receives the model the Trainer sharded (accelerate's ``prepare``), before
  its forward and backward: Zen's reduce-scatter set on the embedding's unit, as :func:`~zen_analysis.fsdp.install`
  does, and as :class:`~zen_analysis.sync.integrations.ZenTrainerMixin` registers Zen's DDP hook.

The unit: accelerate (1.16, ``fsdp2_prepare_model``) makes an *untied* input embedding an FSDP2 unit of its own
after the wrap policy's layers, whatever the policy, which is what the sparse reduce-scatter needs
(:mod:`~zen_analysis.fsdp.units`). An accelerate that does not: name the embedding's class in the policy,
``fsdp_config={"version": 2, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer", "Embedding"]}``; the mixin
says so when the table shares a unit. A *tied* table (the LM head's weight too) has a dense gradient: the mixin
warns and leaves the model to stock FSDP2, as :mod:`zen_analysis.sync.integrations` leaves it to stock DDP. Other
embedding tables (GPT-2's position table) stay stock.

Where FSDP2 does not happen: accelerate (1.16, ``AcceleratorState.__init__``) turns the FSDP plugin into
``DistributedType.FSDP`` only on accelerator ranks (``MULTI_GPU``, ``MULTI_XPU``, ``MULTI_NPU``, ...); on CPU ranks
(gloo, ``use_cpu=True``) the state stays ``MULTI_CPU``, the plugin is dropped without a word and the Trainer wraps
the model in ``DistributedDataParallel``. The mixin refuses that at construction, pointing to
:class:`~zen_analysis.sync.integrations.ZenTrainer` (Zen's DDP hook), rather than train stock DDP silently.

Public names (``__all__``): ``ZenFSDPTrainer``, ``ZenFSDPTrainerMixin``, ``find_fsdp``. ``transformers`` is imported
only when :class:`ZenFSDPTrainer` is first looked up, so importing this module needs neither it nor accelerate.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
import weakref
from typing import Any

import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule

from zen_analysis.fsdp.hashed import STRATA, HashedRows
from zen_analysis.fsdp.install import ZenFSDP
from zen_analysis.fsdp.reduce_scatter import ROW_SOURCES, SparseReduceScatter
from zen_analysis.fsdp.units import UnitError, embedding_units
from zen_analysis.sync.integrations import find_wrapped

__all__ = ["ZenFSDPTrainer", "ZenFSDPTrainerMixin", "find_fsdp"]  # noqa: F822

_INSTALL = "pip install 'zen_analysis[integrations]'"
_WRAP_HINT = (
    'name its class in the wrap policy: fsdp_config={"version": 2, "transformer_layer_cls_to_wrap": '
    '[<the decoder layer class>, "Embedding"]}'
)


def find_fsdp(model: Any):
    """The FSDP2 root module inside ``model`` (itself, or under ``torch.compile``'s ``_orig_mod`` or a wrapper's
    ``module``), or None."""
    return find_wrapped(model, FSDPModule)


def _input_embedding(model: nn.Module) -> tuple[str, nn.Embedding | None]:
    """(qualified name, module) of ``model``'s input embedding when Zen can sum it by rows: an ``nn.Embedding``,
    untied. A tied one gives (name, None) with a warning; a model with no ``get_input_embeddings`` or a table that
    is not an ``nn.Embedding`` raises :class:`~zen_analysis.fsdp.units.UnitError`."""
    get = getattr(model, "get_input_embeddings", None)
    emb = get() if callable(get) else None
    if not isinstance(emb, nn.Embedding):
        raise UnitError(
            f"{type(model).__name__}: no nn.Embedding from get_input_embeddings() (got {type(emb).__name__}): "
            "ZenFSDPTrainer sums the input embedding; shard the model yourself and call zen_analysis.fsdp.install"
        )
    name = next(n for n, m in model.named_modules() if m is emb)
    get_out = getattr(model, "get_output_embeddings", None)
    head = get_out() if callable(get_out) else None
    if head is not None and getattr(head, "weight", None) is emb.weight:
        warnings.warn(
            f"{name}.weight is tied to the output embedding: its gradient is dense, not row-sparse; the model stays "
            "stock FSDP2 (untie it, tie_word_embeddings=False, for Zen)",
            stacklevel=4,
        )
        return name, None
    return name, emb


def _install_on_input_embedding(fsdp_model: nn.Module, name: str, row_source: str) -> SparseReduceScatter:
    """Zen's sparse reduce-scatter set on the FSDP2 unit of ``fsdp_model``'s input embedding (checked by
    :func:`~zen_analysis.fsdp.units.embedding_units`: the table alone, untied, sharded by rows)."""
    emb = fsdp_model.get_input_embeddings()
    if not isinstance(emb, FSDPModule):
        raise UnitError(
            f"the Trainer did not make {name} an FSDP2 unit of its own (it shares its unit's reduce-scatter with "
            f"other parameters, which a sparse reduce-scatter by rows cannot take): {_WRAP_HINT}"
        )
    (unit,) = embedding_units(emb)
    comm = SparseReduceScatter(dataclasses.replace(unit, name=name), row_source=row_source)
    emb.set_custom_reduce_scatter(comm)
    return comm


class ZenFSDPTrainerMixin:
    """Put before a transformers ``Trainer`` class whose arguments enable FSDP2: the input embedding stored in the
    hashed row order at construction (``zen_hashed_rows``, with ``zen_seed`` and ``zen_strata`` as in
    :class:`~zen_analysis.fsdp.hashed.HashedRows`), Zen's sparse reduce-scatter on its unit in the first
    ``training_step`` (``zen_row_source``: ``"ids"`` or ``"scan"``, as in
    :class:`~zen_analysis.fsdp.reduce_scatter.SparseReduceScatter`). ``self.zen_state`` is then the
    :class:`~zen_analysis.fsdp.install.ZenFSDP` installed (None before). Several processes without FSDP2 (FSDP1,
    no ``fsdp`` argument, CPU ranks where accelerate drops the plugin): RuntimeError at construction. One process
    without FSDP: a warning and stock training."""

    def __init__(
        self,
        *args: Any,
        zen_hashed_rows: bool = True,
        zen_seed: int = 0,
        zen_strata: int | None = STRATA,
        zen_row_source: str = "ids",
        **kwargs: Any,
    ) -> None:
        if zen_row_source not in ROW_SOURCES:
            raise ValueError(f"zen_row_source must be one of {ROW_SOURCES}, got {zen_row_source!r}")
        self.zen_state: ZenFSDP | None = None
        self.zen_row_source = zen_row_source
        self._zen_fsdp: weakref.ref | None = None
        self._zen_table: str | None = None
        self._zen_hashed: HashedRows | None = None
        super().__init__(*args, **kwargs)
        if not self._zen_fsdp2_enabled():
            return
        if zen_hashed_rows and getattr(self, "model_init", None) is not None:
            raise ValueError(
                f"{type(self).__name__}: model_init builds the model again in train(), after the rows were hashed; "
                "apply zen_analysis.fsdp.HashedRows(model.get_input_embeddings()) in your model_init and pass "
                "zen_hashed_rows=False"
            )
        name, emb = _input_embedding(self.model)
        self._zen_table = name if emb is not None else None
        if emb is not None and zen_hashed_rows:
            self._zen_hashed = HashedRows(emb, seed=zen_seed, strata=zen_strata)

    def _zen_fsdp2_enabled(self) -> bool:
        """Whether the Trainer will shard with FSDP2; several processes without it raise (class docstring)."""
        accelerator = getattr(self, "accelerator", None)
        if getattr(self, "is_fsdp_enabled", False) and getattr(accelerator, "is_fsdp2", False):
            return True
        args = getattr(self, "args", None)
        world = max(dist.get_world_size() if dist.is_initialized() else 1, int(getattr(args, "world_size", 1) or 1))
        if world == 1:
            warnings.warn(
                f"{type(self).__name__}: one process, no FSDP: no gradient to reduce-scatter, Zen is not installed",
                stacklevel=3,
            )
            return False
        kind = str(getattr(accelerator, "distributed_type", "?"))
        if getattr(self, "is_fsdp_enabled", False):
            why = "the Trainer shards with FSDP1 (flat parameters); set fsdp_config={'version': 2}"
        elif getattr(args, "fsdp", None) and kind.endswith("MULTI_CPU"):
            why = (
                "accelerate enables FSDP on accelerator ranks only: on CPU ranks its state stays MULTI_CPU, the "
                "FSDP plugin is dropped and the Trainer wraps the model in DistributedDataParallel; use "
                "zen_analysis.sync.integrations.ZenTrainer (Zen's DDP hook) there"
            )
        else:
            why = "pass fsdp=True, fsdp_config={'version': 2} in TrainingArguments"
        raise RuntimeError(f"{type(self).__name__}: {world} processes ({kind}) but no FSDP2: {why}")

    def training_step(self, model, *args: Any, **kwargs: Any):
        self._zen_attach(model)
        return super().training_step(model, *args, **kwargs)

    def _zen_attach(self, model) -> None:
        if self._zen_table is None:
            return
        fsdp_model = find_fsdp(model)
        if fsdp_model is None:
            raise RuntimeError(
                f"{type(self).__name__}: the Trainer's model is a {type(model).__name__}, not an FSDP2 module: "
                "Zen's reduce-scatter has nowhere to go"
            )
        if self._zen_fsdp is not None and self._zen_fsdp() is fsdp_model:
            return
        comm = _install_on_input_embedding(fsdp_model, self._zen_table, self.zen_row_source)
        hashed = {self._zen_table: self._zen_hashed} if self._zen_hashed is not None else {}
        self.zen_state = ZenFSDP(reduce_scatters={self._zen_table: comm}, hashed=hashed)
        self._zen_fsdp = weakref.ref(fsdp_model)


def _zen_fsdp_trainer_class() -> type:
    try:
        from transformers import Trainer  # deferred: slow import, Trainer users only
    except ImportError as e:  # a core dependency, but say what to do anyway
        raise ImportError(f"ZenFSDPTrainer needs transformers: {_INSTALL}") from e

    class ZenFSDPTrainer(ZenFSDPTrainerMixin, Trainer):
        """transformers' ``Trainer`` with Zen under FSDP2 (:class:`ZenFSDPTrainerMixin`): ``ZenFSDPTrainer(model=...,
        args=TrainingArguments(..., fsdp=True, fsdp_config={"version": 2}), train_dataset=...,
        zen_hashed_rows=True, zen_seed=0, zen_strata=256, zen_row_source="ids")``."""

    return ZenFSDPTrainer


def __dir__() -> list[str]:
    # the lazy class too, where transformers is installed (found without importing it)
    lazy = ["ZenFSDPTrainer"] if importlib.util.find_spec("transformers") is not None else []
    return sorted({*globals(), *lazy})


def __getattr__(name: str) -> Any:
    # built on first use (PEP 562), once; pickle then finds it here by name
    if name == "ZenFSDPTrainer":
        cls = _zen_fsdp_trainer_class()
        cls.__module__, cls.__qualname__ = __name__, name
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
