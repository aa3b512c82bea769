"""The local-SGD engine's resolved settings: :class:`LocalSGDConfig` and each method's preset (:func:`method_config`).

Users write the ``local_sgd`` config section (:class:`zen_analysis.config.LocalSGDSection`); the registry resolves it
against the method's preset into a :class:`LocalSGDConfig`, which :class:`zen_analysis.local_sgd.engine.LocalSGD`
runs on.
"""

from __future__ import annotations

from dataclasses import dataclass

from zen_analysis.comm import SCHEMES
from zen_analysis.config.local_sgd import EDIT_CLIP, GRANULARITIES
from zen_analysis.config.names import MethodName
from zen_analysis.local_sgd.sparse_pseudo import COMPRESSIONS


@dataclass(kw_only=True)
class LocalSGDConfig:
    """The resolved settings the engine runs on: ``method_config(method, **overrides)``, a method's preset with
    the user's overrides applied. Users do not write this class: they write the ``local_sgd`` config section
    (:class:`zen_analysis.config.LocalSGDSection`, whose sentinels mean "the method's default" and whose
    ``overrides()`` gives the overrides). A setting both classes hold has the same name in both."""

    warmup_steps: int = 0
    interval: int = 8
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    nesterov: bool = True
    anomaly: bool = False
    weighting: bool = False
    clip: float = 0.0
    """Max norm of the averaged pseudo-gradient per group; 0 = off."""
    temperature: float = 1.0
    ewma_alpha: float = 0.02
    ewma_warmup: int = 10
    ewma_threshold: float = 3.0
    granularity: str = "module"
    layerwise: bool = True
    prefetch: bool = True
    """Layer-wise only: start unit l+1's all-reduce asynchronously when unit l syncs (EDiT's prefetch)."""
    sync_time_s: float = 0.0
    """A-EDiT when > 0: sync when this much wall-clock time has passed since the last (instead of every
    ``interval`` steps), after a rendezvous that all-reduces the workers' step counters."""
    min_total_steps: int = 0
    """A-EDiT: skip a due sync (and reset the timer) if the workers made fewer steps together since the last."""
    step_weight: float = 0.0
    """A-EDiT: w = (1 - r) w_norm + r K_m / sum_j K_j, K the workers' cumulative step counts."""
    compress: str = "none"
    """``topk``: each worker sends the top ``topk_ratio`` of its pseudo-gradient plus error-feedback residual per
    group (:mod:`zen_analysis.local_sgd.sparse_pseudo`), summed by ``scheme``; ``natural``: the whole pseudo-gradient,
    summed losslessly by ``scheme`` (its exact zeros, e.g. the embedding rows no worker touched under
    ``train.embedding_update=lazy``, are not sent); ``none``: the dense all-reduce."""
    topk_ratio: float = 0.02
    scheme: str = "zen"
    """The sparse scheme that sums the selections (any of ``zen_analysis.comm.SCHEMES``, or ``auto``: the planner
    of :mod:`zen_analysis.comm.planner` picks per sync group from a sketch of the selections)."""
    seed: int = 0
    """Seeds the sampled top-k threshold and the scheme's hashing."""

    def __post_init__(self) -> None:
        if self.interval < 1 or self.warmup_steps < 0:
            raise ValueError("local SGD needs interval >= 1 and warmup_steps >= 0")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be module, tensor or global, got {self.granularity!r}")
        if self.compress not in COMPRESSIONS:
            raise ValueError(f"local_sgd.compress must be one of {COMPRESSIONS}, got {self.compress!r}")
        if self.scheme not in (*SCHEMES, "auto"):
            raise ValueError(f"sync.scheme must be one of {sorted(SCHEMES)} or auto, got {self.scheme!r}")
        if not 0 < self.topk_ratio <= 1:
            raise ValueError(f"local_sgd.topk_ratio must be in (0, 1], got {self.topk_ratio}")


def method_config(method: str, **overrides) -> LocalSGDConfig:
    """The documented defaults of each method (override any field)."""
    presets = {
        MethodName.POST_LOCAL_SGD: dict(
            warmup_steps=10,
            interval=8,
            outer_lr=1.0,
            outer_momentum=0.0,
            nesterov=False,
            granularity="global",
            layerwise=False,
        ),
        MethodName.DILOCO: dict(
            warmup_steps=0, interval=8, outer_lr=0.7, outer_momentum=0.9, granularity="global", layerwise=False
        ),
        MethodName.EDIT: dict(
            warmup_steps=10, interval=8, outer_lr=0.7, outer_momentum=0.9, anomaly=True, weighting=True, clip=EDIT_CLIP
        ),
        MethodName.A_EDIT: dict(
            warmup_steps=10,
            outer_lr=0.7,
            outer_momentum=0.9,
            anomaly=True,
            weighting=True,
            clip=EDIT_CLIP,
            sync_time_s=5.0,
            min_total_steps=4,
        ),
    }
    if method not in presets:
        raise ValueError(f"unknown local SGD method {method!r}; available: {sorted(m.value for m in presets)}")
    return LocalSGDConfig(**{**presets[method], **overrides})
