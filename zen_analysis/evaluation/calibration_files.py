"""Where calibrations are saved (``data/calibration``), and the link rates the emulated network's are fitted at;
:mod:`zen_analysis.evaluation.calibrate` fits them and re-exports these names."""

from __future__ import annotations

import os
from pathlib import Path

from zen_analysis import paths


def _calibration_file(name: str) -> Path:
    """``data/calibration/<name>.json``; ``<name>-quick.json`` under ``ZEN_ANALYSIS_QUICK=1`` (``make test``'s
    notebooks fit with fewer repeats and smaller tensors), so a quick fit is never read as ``make reproduce``'s."""
    quick = "-quick" if os.environ.get("ZEN_ANALYSIS_QUICK") == "1" else ""
    return paths.data_dir() / "calibration" / f"{name}{quick}.json"


def calibration_path(num_ranks: int = 2) -> Path:
    """This machine's loopback fit for ``num_ranks`` gloo ranks (:func:`~zen_analysis.evaluation.calibrate.calibrate`
    writes it, the measured replays read it)."""
    return _calibration_file(f"local-{num_ranks}")


NETLAB_CALIBRATION_GBPS = 1.0
"""The link rate the lab's per-call costs are fitted at (:func:`netlab`)."""


def netlab_calibration_path(num_ranks: int) -> Path:
    """The network lab's fit of its per-call costs for ``num_ranks`` ranks behind shaped links."""
    return _calibration_file(f"netlab-{num_ranks}")


NETLAB_HOST_GBPS = 40.0
"""The link rate the lab's host limit is fitted at (:func:`calibrate` with ``host``): faster than these ranks move
bytes, so what is measured is the host (gloo, the kernel's TCP over veth and the bridge, 2 cores)."""


def netlab_host_calibration_path(num_ranks: int) -> Path:
    """The network lab's fit of what the host moves behind links too fast to matter (at :data:`NETLAB_HOST_GBPS`)."""
    return _calibration_file(f"netlab-host-{num_ranks}")
