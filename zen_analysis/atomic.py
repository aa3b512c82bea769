"""Crash-safe file writes and cross-process locks shared by every cache and store.

A run killed mid-way must leave every completed file readable: write to a temporary name in the same directory,
fsync, then ``os.replace`` (atomic on POSIX); a set of files that belong together (a run's characterization
tables) is built in a temporary directory and swapped in whole (:func:`atomic_dir`). Caches built by several processes
(ranks started by torchrun on
one node) are guarded by an ``flock`` so only one builds them.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
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


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes (hex), read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


def _exchange(a: Path, b: Path) -> int:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); 0 on success, else the errno (ENOSYS
    where libc has no ``renameat2``)."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return errno.ENOSYS
    at_fdcwd = -100
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return 0
    return ctypes.get_errno()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(path: Path) -> None:
    """Temporary directories of ``path`` left by processes that died mid-way (``.<name>.<pid>.<random>.tmpdir``)."""
    for d in path.parent.glob(f".{path.name}.*.tmpdir"):
        parts = d.name[len(path.name) + 2 :].split(".")
        if parts and parts[0].isdigit() and not _pid_alive(int(parts[0])):
            shutil.rmtree(d, ignore_errors=True)


def _swap_in(tmp: Path, path: Path) -> None:
    """Make ``tmp`` the new ``path``; afterwards ``tmp`` holds the old directory (or nothing)."""
    for _ in range(3):  # another writer may create or replace ``path`` between our attempts
        err = _exchange(tmp, path)
        if err == 0:
            return
        if err == errno.ENOENT:  # no old directory: a plain rename, which refuses to replace a non-empty one
            try:
                os.rename(tmp, path)
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                continue
        break  # renameat2 unsupported here: two renames, the old directory moved aside first
    old = path.with_name(f"{tmp.name}.old")
    os.rename(path, old)
    os.rename(tmp, path)
    os.rename(old, tmp)


@contextlib.contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``path`` to fill; on success it takes ``path``'s place whole,
    on error it is removed and ``path`` is left exactly as it was.

    The swap is one ``renameat2`` exchange where Linux supports it (else two renames, the old directory moved
    aside first, so a crash between them never leaves it half-replaced). Each writer has its own temporary
    directory (``mkdtemp``), so concurrent writers of the same ``path`` never share one; the last to finish
    wins. Temporary directories of writers that were killed are removed by the next writer.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmpdir", dir=path.parent))
    try:
        yield tmp
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        _swap_in(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
