"""``local_sgd``: the user's overrides of a local SGD method's defaults.

Two classes hold local SGD settings, on purpose, with one name per setting:

* :class:`LocalSGDSection` (here) is what a user writes — the ``local_sgd`` section of ``config.json`` and
  ``--set local_sgd.<field>=...``. Its fields are *overrides*: a sentinel (a negative number, ``interval`` 0, an
  empty ``granularity``, ``penalty`` ``default``) means "the method's own default", so one section serves every
  method, and EDiT's penalty is one ``penalty`` string.
* ``zen_analysis.local_sgd.settings.LocalSGDConfig`` is what the engine runs on — the *resolved* values:
  ``method_config(sync.method, **section.overrides(sync.scheme))`` starts from the method's preset and applies
  :meth:`LocalSGDSection.overrides`. It also holds settings users do not set (``nesterov``, ``temperature``,
  the EWMA detector's ``ewma_alpha`` / ``ewma_threshold``, ``anomaly`` / ``weighting`` from ``penalty``).

A field both have carries the same name in both (``sync_time_s``, ``interval``, ``clip``, ...). They are not
merged: one class would either put the sentinels into the engine or the engine-only settings into every stored
``config.json`` (and with them change which stored runs match a config).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zen_analysis.config.names import COMPRESS

EDIT_CLIP = 10.0
"""EDiT's pseudo-gradient clip: the ``edit`` / ``a_edit`` presets' ``clip`` (``local_sgd.settings.method_config``),
and what ``local_sgd.penalty=...,clip`` turns on for a method whose own default is no clipping."""

PENALTY_PARTS = ("anomaly", "weighting", "clip")
GRANULARITIES = ("module", "tensor", "global")

_DEFAULT_WHEN_NEGATIVE = (
    "warmup_steps",
    "ewma_warmup",
    "min_total_steps",
    "sync_time_s",
    "step_weight",
    "outer_lr",
    "outer_momentum",
    "clip",
    "topk_ratio",
)
"""Fields passed on when >= 0; a negative value keeps the method's default."""


@dataclass(kw_only=True, slots=True)
class LocalSGDSection:
    """Overrides of the local SGD method's defaults (``sync.method`` = post_local_sgd | diloco | edit | a_edit; see
    ``zen_analysis.local_sgd``). Negative numbers and empty strings mean "the method's default" (module docstring:
    how this differs from the engine's ``LocalSGDConfig``)."""

    warmup_steps: int = -1
    """Synchronous steps before local training (edit, post_local_sgd: 10; diloco: 0)."""
    interval: int = 0
    """Steps between syncs, tau / H (default 8); 0 keeps the default."""
    outer_lr: float = -1.0
    outer_momentum: float = -1.0
    clip: float = -1.0
    """EDiT's pseudo-gradient clip (default 10; 0 = off)."""
    penalty: str = "default"
    """EDiT's penalty parts: ``default`` (the method's), ``none``, or a comma list of anomaly, weighting, clip."""
    granularity: str = ""
    """module | tensor | global (edit default: module)."""
    layerwise: bool = True
    """Sync each unit just before its forward (EDiT); false: all units before the model's forward."""
    prefetch: bool = True
    """Layer-wise: start the next unit's all-reduce (asynchronous) before this unit's forward runs."""
    ewma_warmup: int = -1
    """Syncs before the anomaly detector tests (default 10)."""
    sync_time_s: float = -1.0
    """A-EDiT (``a_edit``): seconds of wall-clock time between syncs (default 5). > 0 with another method makes
    its syncs time-based too."""
    min_total_steps: int = -1
    """A-EDiT: a due sync is skipped (timer reset) if all workers together made fewer steps since the last."""
    step_weight: float = -1.0
    """A-EDiT: mix of step-count weights into the norm weights, w = (1 - r) w_norm + r K_m / sum K (default 0)."""
    compress: str = "dense"
    """What of the pseudo-gradient is sent, in the per-step methods' words (``config.names.COMPRESS``): ``dense``,
    a dense all-reduce; ``natural``, the whole pseudo-gradient summed losslessly by ``sync.scheme`` (what no worker
    changed is not sent); ``topk``, each worker's top ``topk_ratio`` plus an error-feedback residual per sync group,
    summed by ``sync.scheme`` (``zen_analysis.local_sgd.sparse_pseudo``; ``sync.scheme=auto``: the planner picks per
    sync group, on ``sync.planner_topology``, every ``sync.planner_every`` steps)."""
    topk_ratio: float = -1.0
    """With ``compress=topk``: the share of each group's elements a worker sends per outer sync (default 0.02)."""

    def __post_init__(self) -> None:
        if self.compress not in COMPRESS:
            raise ValueError(f"local_sgd.compress must be one of {COMPRESS}, got {self.compress!r}")
        if self.granularity not in ("", *GRANULARITIES):
            raise ValueError(f"local_sgd.granularity must be module, tensor or global, got {self.granularity!r}")
        if self.penalty not in ("default", "none") and not self._penalty_parts() <= set(PENALTY_PARTS):
            raise ValueError(
                f"local_sgd.penalty must be default, none or a list of anomaly, weighting, clip; got {self.penalty!r}"
            )

    def _penalty_parts(self) -> set[str]:
        return {p.strip() for p in self.penalty.split(",") if p.strip()}

    def overrides(self, scheme: str = "allreduce") -> dict[str, Any]:
        """The fields to pass to ``method_config`` (same names as ``LocalSGDConfig``'s), sentinels left out;
        ``scheme`` is ``sync.scheme``, what sums a sparse pseudo-gradient (the engine calls a dense one ``none``)."""
        out: dict[str, Any] = {
            "layerwise": self.layerwise,
            "prefetch": self.prefetch,
            "compress": "none" if self.compress == "dense" else self.compress,
            "scheme": scheme,
        }
        for name in _DEFAULT_WHEN_NEGATIVE:
            if getattr(self, name) >= 0:
                out[name] = getattr(self, name)
        if self.interval > 0:
            out["interval"] = self.interval
        if self.granularity:
            out["granularity"] = self.granularity
        if self.penalty != "default":
            parts = set() if self.penalty == "none" else self._penalty_parts()
            out["anomaly"], out["weighting"] = "anomaly" in parts, "weighting" in parts
            if "clip" not in parts:
                out["clip"] = 0.0
            elif self.clip < 0:
                out["clip"] = EDIT_CLIP  # also for methods whose own default is no clipping
        return out
