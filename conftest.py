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


def _poll_shell_replies_in_slices(slice_s: float = 1.0) -> None:
    """nbclient waits for a cell's ``execute_reply`` with one asyncio poll of the shell socket for the whole cell
    timeout. pyzmq's asyncio poll can miss the wake-up of a reply that has arrived (an edge-triggered socket
    descriptor): the poll then returns only at its timeout, when it checks the socket once more and finds the reply.
    Seen here on notebook 03 after its widget cell, in about 1 run in 3 on a loaded machine, with ipykernel 7.4 and
    6.31 alike: the notebook sat for exactly ``--nbmake-timeout`` (129 s at 120, 303 s at 300) and then passed, or
    failed when the timeout was hit first. Waiting in slices of ``slice_s`` makes pyzmq check the socket at every
    slice's end: a missed wake-up costs at most a slice."""
    import time
    from queue import Empty

    try:
        from jupyter_client.channels import AsyncZMQSocketChannel
    except ModuleNotFoundError:  # a Python without the notebooks extra (a GPU machine's own): no kernels to poll
        return

    whole = AsyncZMQSocketChannel.get_msg
    if getattr(whole, "in_slices", False):
        return

    async def get_msg(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = slice_s if deadline is None else min(slice_s, max(0.0, deadline - time.monotonic()))
            try:
                return await whole(self, timeout=left)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    get_msg.in_slices = True
    AsyncZMQSocketChannel.get_msg = get_msg


_poll_shell_replies_in_slices()


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
