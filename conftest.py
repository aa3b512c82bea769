"""Test setup (tests and notebooks under pytest): offline hub, all generated data in one temporary directory.

Notebook kernels started by nbmake inherit these variables, so notebooks under test write there too.
"""

from __future__ import annotations

import os
import shutil
import tempfile

# Before anything imports transformers/datasets: never wait on hub retries in tests.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
_DATA = tempfile.mkdtemp(prefix="zen-analysis-tests-")
os.environ["ZEN_ANALYSIS_DATA"] = _DATA
os.environ["ZEN_ANALYSIS_FIGURES"] = os.path.join(_DATA, "figures")
os.environ["ZEN_ANALYSIS_QUICK"] = "1"  # notebooks under test take fewer repeats where they time things


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_DATA, ignore_errors=True)


def _figures_outside_notebooks() -> dict[str, tuple[int, int]]:
    """Every file under the figures folder but the notebooks' own: (size, mtime)."""
    from pathlib import Path

    root = Path(os.environ["ZEN_ANALYSIS_FIGURES"])
    if not root.exists():
        return {}
    own = root / "notebooks"
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() and own not in p.parents
    }


import pytest  # noqa: E402 - after the environment above, which must be set before anything imports torch


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A notebook run by nbmake leaves ``make reproduce``'s figures alone: it writes under figures/notebooks/ only."""
    if not str(item.fspath).endswith(".ipynb"):
        yield
        return
    before = _figures_outside_notebooks()
    yield
    changed = sorted(k for k, v in _figures_outside_notebooks().items() if before.get(k) != v)
    if changed:
        raise AssertionError(f"{item.name} wrote figures outside figures/notebooks/: {changed}")
