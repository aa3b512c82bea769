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
