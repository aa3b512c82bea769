"""Repository-relative locations of everything the toolkit reads or writes.

Every other module builds paths through here, so notebooks never assemble path strings and a user can move
all generated data elsewhere with one environment variable (``ZEN_ANALYSIS_DATA``).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The checkout that holds ``zen_analysis/`` (the package is installed in editable mode)."""


def data_dir() -> Path:
    """Root of caches, traces and derived tables (``data/``, or ``$ZEN_ANALYSIS_DATA``)."""
    return Path(os.environ.get("ZEN_ANALYSIS_DATA", REPO_ROOT / "data"))


def figures_dir() -> Path:
    """Where generated figures go (``figures/``, or ``$ZEN_ANALYSIS_FIGURES``)."""
    return Path(os.environ.get("ZEN_ANALYSIS_FIGURES", REPO_ROOT / "figures"))


def tokenizers_dir() -> Path:
    return data_dir() / "tokenizers"


def tokens_dir() -> Path:
    return data_dir() / "tokens"


def traces_dir() -> Path:
    return data_dir() / "traces"


def runs_dir() -> Path:
    return data_dir() / "runs"


def derived_dir() -> Path:
    return data_dir() / "derived"


def run_dir(run_id: str) -> Path:
    """Logs, config and metrics of one launch: ``data/runs/<run_id>/``."""
    return runs_dir() / run_id


def trace_dir(run_id: str) -> Path:
    """Captured gradients of one launch: ``data/traces/<run_id>/``."""
    return traces_dir() / run_id
