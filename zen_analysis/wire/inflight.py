"""Tensors handed to a collective stay referenced from Python until the backend's thread has let go of them.

gloo runs every collective on a worker thread of its process group, and that thread drops its references to the
collective's tensors a moment after the collective completes. A tensor whose Python object died first (a
temporary: a packed bucket, a count vector) is then deallocated from that thread, which must take the GIL. At
interpreter exit that aborts the process ("terminate called without an active exception", SIGABRT): torch keeps a
DDP model's process group, and so its threads, alive past ``destroy_process_group()``, and a thread that asks for
the GIL after finalization began is torn down mid-unwind. A DDP comm hook written in Python meets it: the README's
DDP script could exit so, after printing its result (``scripts/exit_aborts.py`` counts such exits; the guide's
"Zen in your own DDP training: the details").

:func:`hold` keeps each tensor, with its count of C++ references before the call, until the count is back (the
backend's release is then a plain decrement, no GIL). Every collective of :mod:`zen_analysis` passes its tensors
through :func:`hold`.

A Python callback chained on a collective's future (``fut.then(fn)``, what a DDP comm hook must return) is the same
hazard and a likelier one: torch runs it on gloo's thread and then destroys it there, taking the GIL, after the
future DDP waits for is already complete; so the main thread may be past backward, past the user's teardown and
into finalization before gloo's thread gets to it (``tests/unit/test_inflight.py`` makes it certain with a callback
that sleeps). :func:`then` chains it and keeps track of it until it is gone, and keeps
the chained future (DDP's last reference may go with the user's ``del model``) so that gloo's thread never drops the
last one.

:func:`settle`, run at exit (an ``atexit`` handler runs before finalization, the GIL free while it sleeps), waits for
both, then keeps whatever it held to the end of the process instead of releasing it: a count that dropped for
another reason (the user deleted the model, and with it DDP's references) would otherwise let a tensor go while
gloo still holds it, and a leak at exit is harmless where an abort is not.

A third hazard is torch's own, and it hits stock DDP on gloo as often as any hook: ``backward()`` stashes a Python
object (a ``contextvars`` context, for compiled autograd's device threads) in the thread-local state, and every gloo
collective issued during backward copies that state into its work object. The work is destroyed on gloo's thread
when its last reference goes, and the copy's release takes the GIL there: after finalization began, SIGABRT (a core
of an aborted stock DDP rank shows ``~AsyncWork`` -> ``~ThreadLocalState`` -> ``SafePyObject`` -> ``take_gil``).
:func:`no_python_tls` takes the object out of the thread-local state while a hook of the toolkit issues its
collectives and puts it back after, so the toolkit's works hold no Python object; ``scripts/exit_aborts.py`` counts
the aborts of both, under load."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import threading
import time
import weakref
from collections.abc import Callable

import torch

_LOCK = threading.Lock()
_HELD: list[tuple[torch.Tensor, int]] = []
_CHAINED: list[tuple[weakref.ref, object]] = []
"""(the callback, weakly; the future :func:`then` returned) while torch still holds the callback."""


def _released(t: torch.Tensor, before: int) -> bool:
    return t._use_count() <= before


def hold(*tensors: torch.Tensor) -> None:
    """Keep ``tensors`` referenced until the collective about to take them has released them (call it just before
    the collective); drops those whose collectives have."""
    with _LOCK:
        _HELD[:] = [(t, n) for t, n in _HELD if not _released(t, n)]
        _HELD.extend((t, t._use_count()) for t in tensors)


def then(fut: torch.futures.Future, fn: Callable) -> torch.futures.Future:
    """``fut.then(fn)``, with ``fn`` and the future it returns kept track of until the thread that completes ``fut``
    (gloo's) has destroyed ``fn``: :func:`settle` waits for that at exit. ``fn`` must be referenced by nothing else
    (a lambda made for the call): its death is the sign."""
    chained = fut.then(fn)
    with _LOCK:
        _CHAINED[:] = [(r, c) for r, c in _CHAINED if r() is not None]
        _CHAINED.append((weakref.ref(fn), chained))
    return chained


_TLS_KEY = "context"
"""The key ``torch.autograd.graph._engine_run_backward`` stashes its Python object under for the backward's length."""


@contextlib.contextmanager
def no_python_tls():
    """The thread-local Python object that backward stashes left out while the block runs (module docstring): the
    collectives issued inside copy a thread-local state that holds no Python object, so gloo's thread destroys
    their works without the GIL. A no-op outside backward, or on a torch without the stash."""
    has = getattr(torch._C, "_is_key_in_tls", None)
    if has is None or not has(_TLS_KEY):
        yield
        return
    obj = torch._C._get_obj_in_tls(_TLS_KEY)
    torch._C._remove_obj_from_tls(_TLS_KEY)
    try:
        yield
    finally:
        torch._C._stash_obj_in_tls(_TLS_KEY, obj)


def outside_python_tls(fn: Callable) -> Callable:
    """``fn`` run inside :func:`no_python_tls`: for a hook that backward calls (a DDP comm hook, FSDP2's custom
    reduce-scatter), so that what it issues carries no Python object to gloo's thread."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with no_python_tls():
            return fn(*args, **kwargs)

    return wrapped


def _busy() -> int:
    return sum(not _released(t, n) for t, n in _HELD) + sum(r() is not None for r, _ in _CHAINED)


def pending() -> int:
    """How many held tensors a backend thread still references, and chained callbacks it has not yet destroyed."""
    with _LOCK:
        _HELD[:] = [(t, n) for t, n in _HELD if not _released(t, n)]
        _CHAINED[:] = [(r, c) for r, c in _CHAINED if r() is not None]
        return len(_HELD) + len(_CHAINED)


_KEPT: list = []


def settle(timeout: float = 5.0) -> bool:
    """Wait (sleeping, the GIL free) until the backends have released every held tensor and destroyed every chained
    callback; then keep all of it to the end of the process (never released: a count of references may also have
    dropped because the user deleted what held them, and a tensor released by Python while gloo still holds it
    would be freed later from gloo's thread). False if something was still busy after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    done = True
    while True:
        with _LOCK:
            busy = _busy()
        if not busy:
            break
        if time.monotonic() > deadline:
            done = False
            break
        time.sleep(0.001)
    with _LOCK:
        _KEPT.extend([*_HELD, *_CHAINED])
        _HELD.clear()
        _CHAINED.clear()
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(_KEPT))  # never freed, not even by finalization
    return done


atexit.register(settle)
