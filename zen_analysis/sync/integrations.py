"""Zen's DDP hooks where a framework builds the ``DistributedDataParallel`` model itself: PyTorch Lightning and the
transformers ``Trainer``. Both end in :func:`zen_analysis.sync.ddp.register` on the DDP object the framework made,
once, before the first backward, in the rank's own process.

* Lightning: ``Trainer(strategy=ZenDDPStrategy(mode="natural"))``. :class:`ZenDDPStrategy` is Lightning's
  ``DDPStrategy`` that calls ``register`` on the DDP model it has just built (``configure_ddp``); the strategy's
  ``zen_state`` is the hook's state. Not ``DDPStrategy(ddp_comm_hook=..., ddp_comm_state=...)``: Lightning (2.6,
  ``DDPStrategy._register_ddp_hooks``) registers a comm hook only when the root device is CUDA and silently drops
  it on CPU / gloo; and a state built before the launch reaches the ranks pickled under ``start_method="spawn"``,
  where the parameter identities a :class:`~zen_analysis.sync.ddp.NaturalState` keys on no longer hold. Built in
  the rank after wrapping, neither applies, and the state may create process groups (``mode="topk", overlap=True``).
* transformers: ``ZenTrainer(model=..., args=..., zen_mode="natural")``, or ``ZenTrainerMixin`` before your own
  ``Trainer`` subclass (``class MyTrainer(ZenTrainerMixin, SFTTrainer)``). The hook goes on in the first
  ``training_step``, which receives the model the Trainer wrapped (accelerate's ``prepare``); a ``TrainerCallback``
  cannot do it: its ``model`` argument is the unwrapped ``trainer.model``. With more than one rank and no DDP
  model (FSDP, DeepSpeed) it raises.

Both behave alike where the model gives Zen nothing to do: a tied embedding is named in a warning, and with nothing
left to sum sparsely (GPT-2's tied ``wte``; its position table ``wpe`` is dense by nature and never chosen) the model
stays stock DDP with a warning, its state saying ``hooked=False`` (:func:`~zen_analysis.sync.ddp.register`). Both
states report alike (``zen_state.summary()``). Under ``ZenDDPStrategy(start_method="spawn")`` (or ``"fork"``) the
state lives in the ranks; the launching process gets rank 0's report back as ``zen_state``
(:class:`~zen_analysis.sync.compressed.Report`: the same attributes, read-only). The exit needs no teardown of the
user's (:mod:`zen_analysis.wire.inflight`).

Public names (``__all__``): ``ZenDDPStrategy``, ``ZenTrainer``, ``ZenTrainerMixin``, ``find_ddp``. ``lightning`` /
``transformers`` are imported only when :class:`ZenDDPStrategy` / :class:`ZenTrainer` is first looked up (the extra
``integrations``), so importing this module needs neither; ``dir()`` lists them when their framework is installed.
"""

from __future__ import annotations

import importlib.util
import warnings
import weakref
from typing import Any

import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from zen_analysis.sync.compressed import Report
from zen_analysis.sync.ddp import register

__all__ = ["ZenDDPStrategy", "ZenTrainer", "ZenTrainerMixin", "find_ddp"]  # noqa: F822

MODES = ("natural", "topk")
_INSTALL = "pip install 'zen_analysis[integrations]'"


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def find_ddp(model: Any):
    """The ``DistributedDataParallel`` inside ``model`` (itself, or under ``torch.compile``'s ``_orig_mod`` or a
    wrapper's ``module``), or None: a framework may hand back the DDP model wrapped once more."""
    return find_wrapped(model, DistributedDataParallel)


def find_wrapped(model: Any, kind: type):
    """The first module of type ``kind`` met unwrapping ``model`` (itself, then ``torch.compile``'s ``_orig_mod`` or
    a wrapper's ``module``, up to 8 levels), or None."""
    for _ in range(8):
        if isinstance(model, kind):
            return model
        inner = getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            inner = getattr(model, "module", None)
        if not isinstance(inner, nn.Module) or inner is model:
            return None
        model = inner
    return None


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class ZenTrainerMixin:
    """Put before a transformers ``Trainer`` class: registers Zen's DDP hook (``zen_mode``, ``zen_scheme``, and
    ``zen_options`` passed on to :func:`~zen_analysis.sync.ddp.register`: ``params``, ``seed``, ``ratio``,
    ``threshold``, ``overlap``) on the Trainer's DDP model in the first ``training_step``, before its backward;
    ``self.zen_state`` is then the hook's state. A later ``train()`` on the same DDP model keeps the hook and the
    state. One process: nothing to synchronize, a warning and no hook. More than one and no DDP model: RuntimeError.
    """

    def __init__(
        self,
        *args: Any,
        zen_mode: str = "natural",
        zen_scheme: str = "zen",
        zen_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        _check_mode(zen_mode)
        self.zen_mode, self.zen_scheme, self.zen_options = zen_mode, zen_scheme, dict(zen_options or {})
        self.zen_state = None
        self._zen_ddp: weakref.ref | None = None
        self._zen_warned = False
        super().__init__(*args, **kwargs)

    def training_step(self, model, *args: Any, **kwargs: Any):
        self._zen_attach(model)
        return super().training_step(model, *args, **kwargs)

    def _zen_attach(self, model) -> None:
        ddp = find_ddp(model)
        if ddp is None:
            world = max(_world_size(), int(getattr(getattr(self, "args", None), "world_size", 1) or 1))
            if world > 1:
                raise RuntimeError(
                    f"{type(self).__name__}: {world} processes but the Trainer's model is a "
                    f"{type(model).__name__}, not a DistributedDataParallel model, so Zen's DDP hook "
                    "has nowhere to go (FSDP and DeepSpeed are not supported)"
                )
            if not self._zen_warned:
                warnings.warn(
                    f"{type(self).__name__}: one process, no DDP model: no gradient to synchronize, Zen's "
                    "hook is not registered",
                    stacklevel=3,
                )
                self._zen_warned = True
            return
        if self._zen_ddp is not None and self._zen_ddp() is ddp:
            return
        self.zen_state = register(ddp, mode=self.zen_mode, scheme=self.zen_scheme, **self.zen_options)
        self._zen_ddp = weakref.ref(ddp)


def _zen_trainer_class() -> type:
    try:
        from transformers import Trainer  # deferred: slow import, Trainer users only
    except ImportError as e:  # a core dependency, but say what to do anyway
        raise ImportError(f"ZenTrainer needs transformers: {_INSTALL}") from e

    class ZenTrainer(ZenTrainerMixin, Trainer):
        """transformers' ``Trainer`` with Zen's DDP hook (:class:`ZenTrainerMixin`): ``ZenTrainer(model=...,
        args=..., train_dataset=..., zen_mode="natural", zen_scheme="zen", zen_options=None)``."""

    return ZenTrainer


def _zen_strategy_class() -> type:
    try:
        from lightning.pytorch.strategies import DDPStrategy  # deferred: the integrations extra
    except ImportError as e:
        raise ImportError(f"ZenDDPStrategy needs PyTorch Lightning (lightning.pytorch): {_INSTALL}") from e

    from lightning.pytorch.strategies.launchers.multiprocessing import (  # deferred: the integrations extra
        _MultiProcessingLauncher,
    )

    class _ZenLauncher(_MultiProcessingLauncher):
        """Lightning's launcher of ``start_method="spawn"`` / ``"fork"`` ranks, bringing rank 0's hook report back
        with the results it already returns (Lightning's own hooks for that: ``get_extra_results`` in the rank,
        ``update_main_process_results`` in the launching process)."""

        def get_extra_results(self, trainer) -> dict[str, Any]:
            extra = super().get_extra_results(trainer)
            state = getattr(trainer.strategy, "zen_state", None)
            extra["zen_report"] = None if state is None else state.summary()
            return extra

        def update_main_process_results(self, trainer, extra: dict[str, Any]) -> None:
            super().update_main_process_results(trainer, extra)
            report = extra.get("zen_report")
            self._strategy.zen_state = None if report is None else Report(**report)

    class ZenDDPStrategy(DDPStrategy):
        """Lightning's ``DDPStrategy`` with Zen's DDP hook: ``ZenDDPStrategy(mode="natural", scheme="zen",
        zen_options=None, **ddp_strategy_kwargs)``; ``zen_options`` go to :func:`~zen_analysis.sync.ddp.register`,
        the other keywords to ``DDPStrategy`` (and through it to ``DistributedDataParallel``: ``bucket_cap_mb``...).
        ``zen_state`` is the hook's state once ``fit`` has wrapped the model (each ``fit`` wraps anew: a new
        state); in the process that launched ``start_method="spawn"`` / ``"fork"`` ranks, rank 0's report after
        ``fit`` (:class:`~zen_analysis.sync.compressed.Report`: the state lived in the rank)."""

        def __init__(
            self, mode: str = "natural", scheme: str = "zen", *, zen_options: dict | None = None, **kwargs: Any
        ) -> None:
            _check_mode(mode)
            taken = [k for k in ("ddp_comm_hook", "ddp_comm_state", "ddp_comm_wrapper") if kwargs.get(k) is not None]
            if taken:
                raise TypeError(f"ZenDDPStrategy registers Zen's own comm hook; it takes no {taken}")
            super().__init__(**kwargs)
            self.zen_mode, self.zen_scheme, self.zen_options = mode, scheme, dict(zen_options or {})
            self.zen_state = None

        def configure_ddp(self) -> None:
            super().configure_ddp()
            ddp = find_ddp(self.model)
            if ddp is None:
                raise RuntimeError(
                    f"ZenDDPStrategy: Lightning built a {type(self.model).__name__}, not a "
                    "DistributedDataParallel model: Zen's hook has nowhere to go"
                )
            self.zen_state = register(ddp, mode=self.zen_mode, scheme=self.zen_scheme, **self.zen_options)

        def _configure_launcher(self) -> None:
            super()._configure_launcher()
            if type(self._launcher) is _MultiProcessingLauncher:
                self._launcher = _ZenLauncher(self, start_method=self._start_method)

        def teardown(self) -> None:
            close = getattr(self.zen_state, "close", None)  # the top-k state's worker thread (overlap=True)
            if close is not None:
                close()
            super().teardown()

    _ZenLauncher.__module__, _ZenLauncher.__qualname__ = __name__, "_ZenLauncher"
    globals()["_ZenLauncher"] = _ZenLauncher  # pickled to spawned ranks with the strategy: found here by name
    return ZenDDPStrategy


_BUILDERS = {"ZenTrainer": _zen_trainer_class, "ZenDDPStrategy": _zen_strategy_class}
_FRAMEWORK = {"ZenTrainer": "transformers", "ZenDDPStrategy": "lightning"}


def __dir__() -> list[str]:
    # the lazy classes too, where their framework is installed (found without importing it): help() and
    # tab completion show them, and help() never fails on a missing extra
    lazy = [name for name, pkg in _FRAMEWORK.items() if importlib.util.find_spec(pkg) is not None]
    return sorted({*globals(), *lazy})


def __getattr__(name: str) -> Any:
    # The framework classes are built on first use (PEP 562), once: pickle finds them here by name, as a launcher
    # that spawns ranks needs.
    if name == "_ZenLauncher":  # a spawned rank unpickling the launcher: building the strategy defines it
        __getattr__("ZenDDPStrategy")
        return globals()[name]
    if name in _BUILDERS:
        cls = _BUILDERS[name]()
        cls.__module__, cls.__qualname__ = __name__, name
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
