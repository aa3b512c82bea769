"""Crash-safe file writes and cross-process locks shared by every cache and store.

A run killed mid-way must leave every completed file readable: write to a temporary name in the same directory,
fsync, then ``os.replace`` (atomic on POSIX); a set of files that belong together (a run's characterization
tables) is built in a temporary directory and swapped in whole (:func:`atomic_dir`). Caches built by several processes (ranks started by torchrun on
one node) are guarded by an ``flock`` so only one builds them.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def tmp_path_for(path: Path) -> Path:
    """A temporary sibling of ``path`` (same filesystem, so the final rename is atomic)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path`` atomically, on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path_for(path)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock on ``path`` (created if needed) for the duration of the block."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the kernel or the
    filesystem cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0


@contextlib.contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``path`` to fill; on success it takes ``path``'s place whole,
    on error it is removed and ``path`` is left exactly as it was.

    A reader sees either the old directory or the new one, never a mix: the swap is one ``renameat2`` exchange
    where Linux supports it, else two renames (the old directory is moved aside first, so a crash between them
    leaves it intact under ``.<name>.<pid>.old``, never half-replaced).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmpdir")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        if not path.exists():
            os.rename(tmp, path)
        elif _exchange(tmp, path):
            pass  # tmp now holds the old directory
        else:
            old = path.with_name(f".{path.name}.{os.getpid()}.old")
            os.rename(path, old)
            os.rename(tmp, path)
            os.rename(old, tmp)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
