"""Zen under FSDP2 where torchtitan (PyTorch's LLM pretraining platform, ``torchtitan`` 0.3.0) shards the model: the
token embedding's reduce-scatter becomes Zen's sparse one
(:class:`~zen_analysis.fsdp.reduce_scatter.SparseReduceScatter`), every other unit stays torchtitan's stock FSDP2.

torchtitan's ``apply_fsdp_to_decoder`` (``torchtitan.distributed.fsdp``) already makes an untied ``tok_embeddings`` an
FSDP2 unit of its own, which is what a sparse reduce-scatter by rows needs (:mod:`~zen_analysis.fsdp.units`). Zen goes
on through torchtitan's own extension point, the ``ModelSpec``'s ``parallelize_fn`` (as torchft applies its hooks after
``parallelize``), with no fork of torchtitan:

* :class:`ZenParallelize` wraps a ``parallelize_fn``: before it, on the unsharded (meta-device) model, the token table
  is put in Zen's hashed row order (:class:`~zen_analysis.fsdp.hashed.HashedRows`; ``hashed_rows=False`` keeps the
  vocabulary's); after it, :func:`~zen_analysis.fsdp.install` on that table's unit (optionally the sparse all-gather
  too, ``all_gather=True``). Pipeline parallelism calls the same function once per stage; a stage without the table
  is left as it is;
* :func:`with_zen` puts it into a torchtitan ``Trainer.Config``; :func:`llama3_debugmodel` and :func:`llama3_8b` are
  torchtitan's own Llama 3 configs so wrapped, for ``--module zen_analysis.fsdp.titan --config llama3_8b``
  (torchtitan's config registry takes a module by its dotted path).

What the hashed order means here: torchtitan initialises the weights after ``parallelize`` (``to_empty`` then
``init_weights``), so a fresh run's table is drawn in the stored order (the same i.i.d. rows, another draw); a
checkpoint or Hugging Face weights load through ``state_dict`` in the original order, as
:class:`~zen_analysis.fsdp.hashed.HashedRows` provides. Refused, with the reason: a tied table (its gradient is
dense: a warning, and stock FSDP2), tensor parallelism (torchtitan's vocab-parallel embedding shards the rows across the
TP group already), and an ``spmd_backend`` other than ``"partial_dtensor"``: 0.3.0's default, ``"spmd_types"``, puts
every parameter on the full SPMD mesh, which Zen's FSDP2 comms are not tested on (with torch 2.13 on CPU, torchtitan's
own ``parallelize_llama`` refuses a model built outside its trainer under it).

``torchtitan`` is imported only inside the functions that need it: it is an optional install beside this package
(``make venv-titan``: its wheel pins ``datasets<4.8``, so it goes in with ``--no-deps``; docs/guide/fsdp.md), and
importing this module needs it not.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

from torch import nn

from zen_analysis.fsdp.hashed import STRATA, HashedRows
from zen_analysis.fsdp.install import ZenFSDP, install
from zen_analysis.fsdp.reduce_scatter import ROW_SOURCES

__all__ = ["ZenParallelize", "llama3_8b", "llama3_debugmodel", "with_zen"]

TABLE = "tok_embeddings"
"""The token table's name in torchtitan's decoders (``torchtitan.models.common.decoder.Decoder``)."""
INSTALL = "pip install --no-deps torchtitan==0.3.0 (and its light imports: make venv-titan)"


class ZenParallelize:
    """A torchtitan ``parallelize_fn`` with Zen on the token table's FSDP2 unit (module docstring). ``hashed_rows``,
    ``seed`` and ``strata`` as in :class:`~zen_analysis.fsdp.hashed.HashedRows`; ``row_source``, ``all_gather`` and
    ``max_replica_bytes`` as in :func:`~zen_analysis.fsdp.install`. :attr:`installed` holds what each call put on its
    model part (a :class:`~zen_analysis.fsdp.install.ZenFSDP`), in call order."""

    def __init__(
        self,
        parallelize_fn: Callable[..., nn.Module],
        *,
        hashed_rows: bool = True,
        seed: int = 0,
        strata: int | None = STRATA,
        row_source: str = "ids",
        all_gather: bool = False,
        max_replica_bytes: int | None = None,
    ) -> None:
        if row_source not in ROW_SOURCES:
            raise ValueError(f"row_source must be one of {ROW_SOURCES}, got {row_source!r}")
        self.inner = parallelize_fn
        self.hashed_rows, self.seed, self.strata = hashed_rows, seed, strata
        self.row_source, self.all_gather, self.max_replica_bytes = row_source, all_gather, max_replica_bytes
        self.installed: list[ZenFSDP] = []

    def __repr__(self) -> str:  # torchtitan logs its config; say what is inside
        return f"ZenParallelize({getattr(self.inner, '__name__', self.inner)!r}, hashed_rows={self.hashed_rows})"

    def __call__(self, model: nn.Module, **kwargs: Any) -> nn.Module:
        backend = getattr(kwargs.get("parallelism"), "spmd_backend", "partial_dtensor")
        if backend != "partial_dtensor":
            raise ValueError(
                f"Zen's reduce-scatter goes on torchtitan's FSDP2 units under spmd_backend='partial_dtensor' (plain "
                f"FSDP2 over DTensor shards), not {backend!r}: with_zen sets it, or pass "
                "--parallelism.spmd_backend partial_dtensor"
            )
        table = _zen_table(model, kwargs.get("parallel_dims"))
        if table is None:
            return self.inner(model, **kwargs)
        hashed = HashedRows(table, seed=self.seed, strata=self.strata) if self.hashed_rows else None
        model = self.inner(model, **kwargs)
        zen = install(
            model,
            row_source=self.row_source,
            all_gather=self.all_gather,
            max_replica_bytes=self.max_replica_bytes,
            only=[TABLE],  # torchtitan's other units hold no table; name it so a refusal names this one
        )
        if hashed is not None:
            zen.hashed[TABLE] = hashed
        self.installed.append(zen)
        return model


def _zen_table(model: nn.Module, parallel_dims: Any) -> nn.Embedding | None:
    """The token table Zen sums, or None where this model part has none (a later pipeline stage) or ties it (a
    warning: its gradient is dense, the part stays stock FSDP2). Tensor parallelism is refused."""
    table = getattr(model, TABLE, None)
    if table is None:
        return None
    if not isinstance(table, nn.Embedding):
        raise TypeError(f"{type(model).__name__}.{TABLE} is a {type(table).__name__}, not an nn.Embedding")
    if getattr(model, "enable_weight_tying", False):
        warnings.warn(
            f"{type(model).__name__}: {TABLE} is tied to the output head (enable_weight_tying): its gradient is dense, "
            "not row-sparse; the model stays stock FSDP2",
            stacklevel=3,
        )
        return None
    if getattr(parallel_dims, "tp_enabled", False):
        raise ValueError(
            f"Zen sums {TABLE} across the FSDP ranks, but tensor parallelism is on: torchtitan's vocab-parallel "
            "embedding shards the rows across the TP group already; run Zen with --parallelism.tensor_parallel_degree 1"
        )
    return table


def with_zen(config: Any, **options: Any) -> Any:
    """A torchtitan ``Trainer.Config`` whose ``model_spec.parallelize_fn`` is wrapped by :class:`ZenParallelize`
    (``options`` go to it) and whose ``parallelism.spmd_backend`` is ``"partial_dtensor"``, the one Zen runs under
    (module docstring); the config given is left as it was."""
    spec = config.model_spec
    config = copy.copy(config)  # not dataclasses.replace: that would run the config's __post_init__ checks again
    config.model_spec = dataclasses.replace(spec, parallelize_fn=ZenParallelize(spec.parallelize_fn, **options))
    parallelism = getattr(config, "parallelism", None)
    if parallelism is not None:
        config.parallelism = dataclasses.replace(parallelism, spmd_backend="partial_dtensor")
    return config


def _titan_llama3(name: str) -> Any:
    try:
        from torchtitan.models.llama3 import config_registry  # deferred: optional, heavy, not beside every install
    except ImportError as e:
        raise ImportError(f"zen_analysis.fsdp.titan.{name} needs torchtitan: {INSTALL}") from e
    return getattr(config_registry, name)()


def llama3_debugmodel() -> Any:
    """torchtitan's ``llama3_debugmodel`` config with Zen (``--module zen_analysis.fsdp.titan --config
    llama3_debugmodel``)."""
    return with_zen(_titan_llama3("llama3_debugmodel"))


def llama3_8b() -> Any:
    """torchtitan's ``llama3_8b`` config with Zen (``--module zen_analysis.fsdp.titan --config llama3_8b``)."""
    return with_zen(_titan_llama3("llama3_8b"))
