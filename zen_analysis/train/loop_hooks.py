"""What a training method adds around the plain loop, at the loop's own seams: which steps run, whether each rank's
loss is its own, the pseudo-gradients a capture records, and what is written once the run is over. The plain loop's
(:class:`LoopHooks`) add nothing; local SGD's (:class:`LocalSGDHooks`) wrap its engine the way torchft's
``LocalSGD`` wraps a training loop: the engine syncs parameters from forward pre-hooks of its own, and these hooks
give the loop its schedule and its records, so the loop itself holds no local SGD branch.

:func:`hooks_for` picks them for a sync: a :class:`~zen_analysis.local_sgd.engine.LocalSGD` gets local SGD's, any
other sync the plain loop's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from zen_analysis.atomic import atomic_path
from zen_analysis.capture.hooks import GradientCapture
from zen_analysis.local_sgd import LocalSGD


class LoopHooks:
    """The plain loop: every configured step, losses averaged over ranks, no pseudo-gradients, nothing to write."""

    local: bool = False
    """True: every rank trains its own model between syncs, so the loop logs rank-local losses (a per-step loss
    all-reduce would make every step a rendezvous) and every rank checkpoints its own model."""

    def steps(self, start: int, num_steps: int) -> Iterator[int]:
        """The steps this rank runs, from ``start`` of ``num_steps`` configured ones."""
        yield from range(start, num_steps)

    def sync_seconds(self) -> float:
        """Seconds spent so far in syncs made during compute (forward pre-hooks), which a straggler's delay, a
        share of compute time, leaves out."""
        return 0.0

    def open_capture(self, capture: GradientCapture, *, rank: int, mode: str) -> dict[str, dict]:
        """``capture.pseudo``: record pseudo-gradients into the capture's shards; returns the trace manifest's
        entries. Only local SGD has pseudo-gradients."""
        raise ValueError("capture.pseudo: only a local SGD method has pseudo-gradients (sync.method)")

    def close_capture(self, capture: GradientCapture | None) -> float:
        """After the sync's last step (:meth:`~zen_analysis.sync.grad_sync.GradSync.end_run`): the records it made,
        written; returns the seconds spent recording pseudo-gradients (part of the capture's time)."""
        return 0.0

    def write(self, run_dir: Path, rank: int) -> None:
        """Once the run is over, this rank's records of the method (none)."""


class LocalSGDHooks(LoopHooks):
    """Local SGD around the plain loop: the engine's schedule (A-EDiT runs more or fewer steps and stops at a sync
    once the step budget is spent), rank-local losses, its pseudo-gradient capture and its per-sync log
    (``local_sgd/rank<r>.jsonl``: per sync and group, each worker's norm, weight, clip and skip)."""

    local = True

    def __init__(self, engine: LocalSGD) -> None:
        self.engine = engine

    def steps(self, start: int, num_steps: int) -> Iterator[int]:
        """Steps from ``start`` up to the engine's limit, stopping after the step whose sync saw the budget spent."""
        for step in range(start, self.engine.max_local_steps(num_steps)):
            yield step
            if self.engine.should_stop():
                return

    def sync_seconds(self) -> float:
        return self.engine.sync_seconds

    def open_capture(self, capture: GradientCapture, *, rank: int, mode: str) -> dict[str, dict]:
        return self.engine.capture_pseudo_gradients(capture.writer, rank=rank, mode=mode)

    def close_capture(self, capture: GradientCapture | None) -> float:
        pseudo = self.engine.pseudo_capture
        if capture is None or pseudo is None:
            return 0.0
        capture.close()  # the last sync's pseudo-gradient records
        return pseudo.seconds

    def write(self, run_dir: Path, rank: int) -> None:
        if self.engine.log:
            with atomic_path(run_dir / "local_sgd" / f"rank{rank}.jsonl") as tmp:
                tmp.write_text("".join(json.dumps(row) + "\n" for row in self.engine.log))


def hooks_for(sync: object) -> LoopHooks:
    """Local SGD's hooks for its engine, the plain loop's for any other sync."""
    return LocalSGDHooks(sync) if isinstance(sync, LocalSGD) else LoopHooks()
