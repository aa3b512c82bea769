"""Repository-relative locations of everything the toolkit reads or writes.

Every other module builds paths through here, so notebooks never assemble path strings and a user can move
all generated data elsewhere with one environment variable (``ZEN_ANALYSIS_DATA``).
"""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

__all__ = [
    "REPO_ROOT",
    "RUN_ID",
    "check_run_id",
    "ctr_dir",
    "data_dir",
    "derived_dir",
    "derived_run_dir",
    "figures_dir",
    "gpu_dir",
    "new_run_id",
    "run_dir",
    "runs_dir",
    "tokenizers_dir",
    "tokens_dir",
    "trace_dir",
    "traces_dir",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The checkout that holds ``zen_analysis/`` (the package is installed in editable mode)."""


def data_dir() -> Path:
    """Root of caches, traces and derived tables (``data/``, or ``$ZEN_ANALYSIS_DATA``)."""
    return Path(os.environ.get("ZEN_ANALYSIS_DATA", REPO_ROOT / "data"))


def figures_dir() -> Path:
    """Where generated figures go (``figures/``, or ``$ZEN_ANALYSIS_FIGURES``)."""
    return Path(os.environ.get("ZEN_ANALYSIS_FIGURES", REPO_ROOT / "figures"))


def tokenizers_dir() -> Path:
    """Trained tokenizers, one per corpus and vocabulary size: ``data/tokenizers/``."""
    return data_dir() / "tokenizers"


def tokens_dir() -> Path:
    """Tokenized corpora, cached so ranks only read them: ``data/tokens/``."""
    return data_dir() / "tokens"


def ctr_dir() -> Path:
    """Generated click-through-rate datasets (``zen_analysis.workload.ctr``): ``data/ctr/<name>-<params hash>/``."""
    return data_dir() / "ctr"


def traces_dir() -> Path:
    """Every run's captured gradients (:func:`trace_dir` is one run's): ``data/traces/``."""
    return data_dir() / "traces"


def runs_dir() -> Path:
    """Every run's logs, config and metrics (:func:`run_dir` is one run's): ``data/runs/``."""
    return data_dir() / "runs"


def derived_dir() -> Path:
    """Tables computed from the traces (characterization, evaluation, sweeps), reused while their inputs are
    unchanged: ``data/derived/``."""
    return data_dir() / "derived"


def gpu_dir() -> Path:
    """Results of GPU runs, committed with the code: ``data/gpu/<folder>/`` in the checkout, one folder per run (its
    tables and ``env.json``). Not under ``$ZEN_ANALYSIS_DATA``: these are measurements kept in git, not caches."""
    return REPO_ROOT / "data" / "gpu"


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
"""What a run id may be: a name (letters, digits, '.', '_', '-'; not starting with '.', '_' or '-'), never a
path: ``.``, ``..``, ``a/b`` and absolute paths are refused, so no id can point a delete or a write elsewhere."""


def new_run_id(name: str) -> str:
    """A fresh run id for a config called ``name``: ``<name>-<YYYYmmdd-HHMMSS>-<4 hex>`` (the suffix keeps two
    launches in the same second apart)."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def check_run_id(run_id: object, *, what: str = "run id") -> str:
    """``run_id`` if it is a valid name, else ``ValueError`` saying what a run id may be."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        raise ValueError(
            f"{what} {run_id!r} is not a name: use letters, digits, '.', '_' and '-' (at most 200, starting with "
            "a letter or digit); a run id names directories under the data root, it is never a path"
        )
    return run_id


def _inside(parent: Path, run_id: str) -> Path:
    """``parent / run_id`` after checking the id, and that the resolved path (symlinks followed) stays inside."""
    path = parent / check_run_id(run_id)
    if not path.resolve().is_relative_to(parent.resolve()):
        raise ValueError(f"{path} resolves to {path.resolve()}, outside {parent}: refusing to use it as run {run_id!r}")
    return path


def run_dir(run_id: str) -> Path:
    """Logs, config and metrics of one launch: ``data/runs/<run_id>/``."""
    return _inside(runs_dir(), run_id)


def trace_dir(run_id: str) -> Path:
    """Captured gradients of one launch: ``data/traces/<run_id>/``."""
    return _inside(traces_dir(), run_id)


def derived_run_dir(run_id: str) -> Path:
    """Tables derived from the traces of run ``run_id``: ``data/derived/<run_id>/``."""
    return _inside(derived_dir(), run_id)
