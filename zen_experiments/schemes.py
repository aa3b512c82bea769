"""The communication-scheme experiments (Zen paper sections 2.2-2.4), shared by ``make reproduce`` (stage 3) and
notebook 04: every scheme modelled on captured traces, the 1024-worker scale mode, and a run's captured
gradients replayed through every scheme on real gloo ranks."""

from __future__ import annotations

import pandas as pd

from zen_analysis.evaluation.calibrate import calibrate, calibration_path
from zen_analysis.evaluation.evaluate import evaluate, normalized
from zen_analysis.evaluation.replay import replay_run

__all__ = ["measured_replay", "scale_mode"]

SCALE_LABELS = {"natural": "llama embedding", "topk": "llama top-5%"}
"""What a tensor kind of the scale run is called in the tables and figures."""


def scale_mode(
    run_id: str, *, max_workers: int = 1024, topology: str = "paper-tcp25", progress: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every scheme modelled on ``run_id``'s traces up to ``max_workers`` workers (the paper's scale); returns the
    per-configuration table (``workload`` = ``workers<n>: <tensor>``) and its time normalized to dense all-reduce
    on ``topology``, rounded as the reproduce table prints it."""
    scale = evaluate(run_id, max_workers=max_workers, progress=progress)
    scale["workload"] = f"workers{max_workers}: " + scale["kind"].map(SCALE_LABELS).fillna(scale["kind"])
    return scale, normalized(scale, topology=topology).round(2)


def measured_replay(
    run_id: str,
    *,
    ranks: int = 4,
    steps: int = 3,
    repeats: int = 25,
    calibration: dict | None = None,
    progress: bool = True,
) -> pd.DataFrame:
    """``run_id``'s captured gradients replayed through every scheme on ``ranks`` gloo ranks, measured beside the
    model (:func:`zen_analysis.evaluation.replay.replay_run`). The model needs this machine calibrated at ``ranks``
    ranks: with ``calibration`` (keyword arguments of :func:`~zen_analysis.evaluation.calibrate.calibrate`, e.g. fewer
    repeats) a missing calibration is fitted with them first; without, with the defaults on first use."""
    if calibration is not None and not calibration_path(ranks).exists():
        calibrate(ranks, **calibration)
    return replay_run(run_id, ranks=ranks, steps=steps, repeats=repeats, progress=progress)
