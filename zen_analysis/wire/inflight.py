"""Tensors handed to a collective stay referenced from Python until the backend's thread has let go of them.

gloo runs every collective on a worker thread of its process group, and that thread drops its references to the
collective's tensors a moment after the collective completes. A tensor whose Python object died first (a
temporary: a packed bucket, a count vector) is then deallocated from that thread, which must take the GIL. At
interpreter exit that aborts the process ("terminate called without an active exception", SIGABRT): torch keeps a
DDP model's process group, and so its threads, alive past ``destroy_process_group()``, and a thread that asks for
the GIL after finalization began is torn down mid-unwind. A DDP comm hook written in Python meets it: the README's
DDP script exited so on 2 runs in 35 here, always after printing its result.

:func:`hold` keeps each tensor, with its count of C++ references before the call, until the count is back (the
backend's release is then a plain decrement, no GIL); :func:`settle`, run at exit, waits for the last releases and
lets the tensors go on the main thread. Every collective of :mod:`zen_analysis` passes its tensors through
:func:`hold`."""

from __future__ import annotations

import atexit
import threading
import time

import torch

_LOCK = threading.Lock()
_HELD: list[tuple[torch.Tensor, int]] = []


def _released(t: torch.Tensor, before: int) -> bool:
    return t._use_count() <= before


def hold(*tensors: torch.Tensor) -> None:
    """Keep ``tensors`` referenced until the collective about to take them has released them (call it just before
    the collective); drops those whose collectives have."""
    with _LOCK:
        _HELD[:] = [(t, n) for t, n in _HELD if not _released(t, n)]
        _HELD.extend((t, t._use_count()) for t in tensors)


def pending() -> int:
    """How many held tensors a backend thread still references."""
    with _LOCK:
        _HELD[:] = [(t, n) for t, n in _HELD if not _released(t, n)]
        return len(_HELD)


def settle(timeout: float = 5.0) -> bool:
    """Wait (sleeping, the GIL free) until the backends have released every held tensor, then let them go; False if
    some are still referenced after ``timeout`` seconds (they stay held: a leak at exit is harmless, an abort not)."""
    deadline = time.monotonic() + timeout
    while pending():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


atexit.register(settle)
