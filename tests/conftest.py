"""Test setup: offline hub, and all generated data in one temporary directory for the whole session."""

from __future__ import annotations

import os
import tempfile

# Before anything imports transformers/datasets: never wait on hub retries in tests.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
# Runs and traces of the tests go to a throw-away directory (paths.py reads this at call time).
os.environ["ZEN_ANALYSIS_DATA"] = tempfile.mkdtemp(prefix="zen-analysis-tests-")
os.environ["ZEN_ANALYSIS_FIGURES"] = os.path.join(os.environ["ZEN_ANALYSIS_DATA"], "figures")
