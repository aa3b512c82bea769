"""One training step's clock: where the step's time went (compute, sync, clip, optimizer, zero_grad, the statistics
wait, capture), as the time fields of the step's ``metrics.jsonl`` row. The loop marks each phase as it begins; the
timer keeps the clock, so the loop reads as the algorithm. What the sync counted comes from the sync itself, as one
:class:`~zen_analysis.sync.contract.SyncRecord` a step."""

from __future__ import annotations

import time
from collections.abc import Callable

from zen_analysis.capture.hooks import GradientCapture

PHASES = ("sync", "clip", "optimizer", "zero_grad", "stats")
"""The phases after compute, in the order the loop enters them; compute runs from the timer's start."""


class StepTimer:
    """Started as the step starts; :meth:`begin` marks each phase of :data:`PHASES` as it begins (compute ends
    where ``sync`` begins); :meth:`times` gives the row's fields once the step is done.

    The row's times: ``step_s`` (the whole step), ``compute_s`` (this rank's micro-batches and capture before the
    sync), ``sync_s`` (its time in ``synchronize``: the exchange, and waiting for slower ranks to reach it),
    ``exchange_s`` (the exchange alone: ``sync_s`` less the wait for the slowest rank's compute), ``clip_s``,
    ``optimizer_s``, ``zero_grad_s``, ``stats_s`` (the rest of the step, after the sync: clipping, the lazy update's
    row finding included, the optimizer, zero_grad, and the wait for the loss mean over ranks, which travels while
    the clip and the optimizer run) and ``capture_s``."""

    def __init__(self, capture: GradientCapture | None, sync_seconds: Callable[[], float]) -> None:
        """``sync_seconds``: the seconds spent so far in syncs made during compute (local SGD's forward pre-hooks,
        :meth:`~zen_analysis.train.loop_hooks.LoopHooks.sync_seconds`)."""
        self._capture, self._sync_seconds = capture, sync_seconds
        self._t0 = time.perf_counter()
        self._at: dict[str, float] = {}
        self._capture_s0 = capture.seconds if capture else 0.0
        self._sync_s0 = sync_seconds()

    def compute_only_s(self) -> float:
        """The step's time so far less what syncs made during compute spent in it: compute alone, for the
        straggler delay."""
        return time.perf_counter() - self._t0 - (self._sync_seconds() - self._sync_s0)

    def begin(self, phase: str) -> None:
        """``phase`` (one of :data:`PHASES`, in order) begins now."""
        self._at[phase] = time.perf_counter()

    @property
    def compute_s(self) -> float:
        """The compute phase's seconds (known once ``sync`` has begun)."""
        return self._at["sync"] - self._t0

    def times(self, compute_max_s: float) -> dict[str, float]:
        """The row's time fields, the step ending now; ``compute_max_s``: the longest compute over ranks."""
        at, compute_s = self._at, self.compute_s
        step_s = time.perf_counter() - self._t0
        sync_s = at["clip"] - at["sync"]
        capture = self._capture
        return {
            "step_s": step_s,
            "compute_s": compute_s,
            "sync_s": sync_s,
            "exchange_s": max(sync_s - (compute_max_s - compute_s), 0.0),
            "clip_s": at["optimizer"] - at["clip"],
            "optimizer_s": at["zero_grad"] - at["optimizer"],
            "zero_grad_s": at["stats"] - at["zero_grad"],
            "stats_s": self._t0 + step_s - at["stats"],
            "capture_s": (capture.seconds - self._capture_s0) if capture else 0.0,
        }
