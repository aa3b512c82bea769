"""Reusable per-thread CPU buffers for the per-sync hot paths (Zen's push / pull, the extraction).

Why: glibc serves large allocations with fresh ``mmap``s, so every page of a new buffer faults on first touch, and
a collective receiving tens of MB into a fresh buffer spends more time faulting pages than moving bytes (``zen-analysis
bench zen`` measures it: ``docs/results/bench/zen.md``). A named workspace keeps its pages mapped between
calls.

``buffer(name, numel, dtype, device)`` returns a tensor of ``numel`` elements (uninitialised) that stays valid
until the next request of the same name on the same thread: callers must not hand it out beyond that (results
that escape are copied, or documented as such). Buffers grow by 25% steps and are dropped when a request needs
less than a quarter of them, so memory follows the largest recent tensor. Other devices get a plain
``torch.empty`` (CUDA's caching allocator already reuses memory).
"""

from __future__ import annotations

import threading

import torch

_LOCAL = threading.local()


def buffer(name: str, numel: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """A buffer of ``numel`` ``dtype`` elements on ``device``, reused between calls with the same ``name``."""
    device = torch.device(device)
    if device.type != "cpu":
        return torch.empty(numel, dtype=dtype, device=device)
    pool = _LOCAL.__dict__.setdefault("pool", {})
    key = (name, dtype)
    buf = pool.get(key)
    if buf is None or buf.numel() < numel or buf.numel() > 4 * numel + (1 << 20):
        buf = pool[key] = None  # drop the old one before allocating its successor
        buf = pool[key] = torch.empty(numel + numel // 4, dtype=dtype, device=device)
    return buf[:numel]


def capacity(name: str, dtype: torch.dtype) -> int:
    """Elements the buffer ``name`` holds now on this thread (0 if none): what a caller that must guess a size
    before a pass (the extraction) can use without reallocating."""
    buf = _LOCAL.__dict__.get("pool", {}).get((name, dtype))
    return 0 if buf is None else buf.numel()


def clear() -> None:
    """Drop this thread's buffers."""
    _LOCAL.__dict__.pop("pool", None)
