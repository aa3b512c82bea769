"""Crash-safe file writes, cross-process locks, and the checkpoint protocol, shared by every cache and store.

A run killed mid-way must leave every completed file readable: write to a temporary name in the same directory,
fsync, then ``os.replace`` (atomic on POSIX); a set of files that belong together (a run's characterization
tables) is built in a temporary directory and swapped in whole (:func:`atomic_dir`). Caches built by several processes
(ranks started by torchrun on
one node) are guarded by an ``flock`` so only one builds them.

**Checkpoint folders.** Every checkpoint of the toolkit follows one protocol: the training loop's (DDP, local SGD or
FSDP2: :mod:`zen_analysis.train.checkpoint`) and a user's FSDP2 model's (:mod:`zen_analysis.fsdp.dcp`). The
checkpoint of step k (the next step to run) is the folder ``<root>/step-<k>/``, k in 8 digits (``step-00000012``).
It is built as ``step-<k>.partial/`` (:func:`begin_checkpoint`; every rank then writes its files in it), and one
rank, once all have written, calls :func:`commit_checkpoint`, which

1. fsyncs every file in it (``torch.save`` does not, and DCP's shards come from other processes),
2. writes :data:`CHECKPOINT_MARKER` last, through an fsynced temporary file: the step, the world size that wrote it,
   the sha256 of every other file, and the caller's JSON ``extra``,
3. fsyncs the folder's directories, renames it to ``step-<k>`` (one ``rename`` of a directory, atomic on POSIX,
   replacing an older folder of that step: a run resumed from an earlier checkpoint) and fsyncs ``root``, so the
   rename survives a power cut too,
4. removes all but the newest ``keep`` complete checkpoints.

A process killed at any point leaves the previous checkpoints as they were and at most a ``.partial`` folder, which
nothing reads (the next :func:`begin_checkpoint` of that step removes it). A folder without a readable marker is
incomplete. :func:`newest_checkpoint` orders folders by the step parsed from their names (never by sorting the names
as text) and skips, saying why, incomplete ones, those written by another world size when one is asked for, and
those whose files do not match their checksums (a truncated or altered file).

Earlier layouts still read. The training loop wrote this layout before (``meta.json`` with the same keys,
``extra`` aside). :mod:`zen_analysis.fsdp.dcp` wrote ``step-<k>/`` unpadded, marked by
:data:`LEGACY_CHECKPOINT_MARKER` (``zen.json``: the step and ``extra``; no checksums, no world size). A name's step
is parsed whatever its padding, and a ``zen.json`` counts as the marker: written last, its presence meant complete,
and its files are trusted as its writer trusted them, with no world size to check (DCP reshards). Where both layouts
hold a step, the current one is the newer. ``tests/multirank/test_checkpoint_layouts.py`` resumes both from files
the earlier code wrote (``tests/data/checkpoints_2026-12/``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
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


# ---- checkpoint folders: the one protocol every checkpoint follows (module docstring)

CHECKPOINT_MARKER = "meta.json"
"""Written last, inside the folder before its rename: ``{"step", "world", "files": {relative path: sha256},
"extra"}``."""
LEGACY_CHECKPOINT_MARKER = "zen.json"
"""The marker :mod:`zen_analysis.fsdp.dcp` wrote before this protocol: ``{"step", "extra"}``."""
_PARTIAL = ".partial"
_CHECKPOINT_NAME = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class CheckpointMarker:
    """A checkpoint folder's marker, read. ``files`` and ``world`` are None for a legacy ``zen.json``."""

    step: int
    world: int | None
    files: dict[str, str] | None
    extra: Any


def checkpoint_dir(root: str | os.PathLike, step: int) -> Path:
    """Where the complete checkpoint of ``step`` lives under ``root``."""
    return Path(root) / f"step-{step:08d}"


def partial_checkpoint_dir(root: str | os.PathLike, step: int) -> Path:
    """Where the checkpoint of ``step`` is built before :func:`commit_checkpoint` renames it to
    :func:`checkpoint_dir`."""
    final = checkpoint_dir(root, step)
    return final.with_name(final.name + _PARTIAL)


def begin_checkpoint(root: str | os.PathLike, step: int) -> Path:
    """One rank's first move: an empty :func:`partial_checkpoint_dir` (a killed run's leftover removed). Returns
    it; the other ranks write into it after a barrier."""
    partial = partial_checkpoint_dir(root, step)
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    return partial


def _fsync(path: Path) -> None:
    """Flush ``path`` (a file or a directory's entries) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit_checkpoint(partial: Path, *, step: int, world: int, extra: Any = None, keep: int | None = None) -> Path:
    """Complete the checkpoint built in ``partial`` (every rank's files written: call it after a barrier, on one
    rank): fsync, checksum, marker last, rename, prune (the module docstring's steps 1-4). Returns the complete
    folder."""
    partial = Path(partial)
    final = checkpoint_dir(partial.parent, step)
    files = {}
    for p in sorted(partial.rglob("*")):
        if p.is_file():
            _fsync(p)
            files[str(p.relative_to(partial))] = file_sha256(p)
    atomic_write_text(
        partial / CHECKPOINT_MARKER, json.dumps({"step": step, "world": world, "files": files, "extra": extra})
    )
    for d in (partial, *(p for p in partial.rglob("*") if p.is_dir())):
        _fsync(d)
    if final.exists():
        shutil.rmtree(final)
    os.replace(partial, final)
    _fsync(final.parent)
    if keep is not None:
        for _, old in complete_checkpoints(final.parent)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def read_checkpoint_marker(path: str | os.PathLike) -> CheckpointMarker:
    """The marker of checkpoint folder ``path`` (:data:`CHECKPOINT_MARKER`, or an earlier layout's
    :data:`LEGACY_CHECKPOINT_MARKER`). ValueError: it has none that is readable, with its step (and, in a
    ``meta.json``, its files)."""
    path = Path(path)
    current = (path / CHECKPOINT_MARKER).is_file()
    if not current and not (path / LEGACY_CHECKPOINT_MARKER).is_file():
        raise ValueError(f"checkpoint {path.name} has no {CHECKPOINT_MARKER}")
    try:
        meta = json.loads((path / (CHECKPOINT_MARKER if current else LEGACY_CHECKPOINT_MARKER)).read_text())
        if not current:
            return CheckpointMarker(step=int(meta["step"]), world=None, files=None, extra=meta.get("extra"))
        return CheckpointMarker(int(meta["step"]), meta.get("world"), dict(meta["files"]), meta.get("extra"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"checkpoint {path.name}'s marker cannot be read ({type(exc).__name__}: {exc})") from None


def checkpoint_folders(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """Every checkpoint folder under ``root`` (complete or not; ``.partial`` ones left out) with the step its name
    gives, oldest first; for a step both layouts hold, the unpadded (earlier) name first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _CHECKPOINT_NAME.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), len(p.name), p))
    return [(step, p) for step, _, p in sorted(found)]


def complete_checkpoints(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """:func:`checkpoint_folders` with a readable marker (files not hashed: what a listing or pruning needs)."""
    out = []
    for step, p in checkpoint_folders(root):
        try:
            read_checkpoint_marker(p)
        except ValueError:
            continue
        out.append((step, p))
    return out


def latest_checkpoint_step(root: str | os.PathLike) -> int | None:
    """The step of the newest folder with a readable marker (files not hashed: a listing's answer;
    :func:`newest_checkpoint` verifies). None: none."""
    found = complete_checkpoints(root)
    return read_checkpoint_marker(found[-1][1]).step if found else None


def _why_not_resumable(path: Path, world: int | None) -> str | None:
    """Why checkpoint folder ``path`` cannot be resumed by ``world`` ranks (None: any), or None when it can."""
    try:
        meta = read_checkpoint_marker(path)
    except ValueError:
        return f"checkpoint {path.name} is incomplete (no readable {CHECKPOINT_MARKER} with its step and files)"
    if meta.files is None:
        return None  # a legacy zen.json: complete, no checksums, any world size (DCP reshards)
    if world is not None and meta.world != world:
        return f"checkpoint {path.name} was written by {meta.world} ranks, not {world}"
    bad = [n for n, digest in meta.files.items() if not (path / n).is_file() or file_sha256(path / n) != digest]
    if bad:
        return f"checkpoint {path.name} is damaged ({', '.join(bad)} do not match their checksums)"
    return None


def newest_checkpoint(root: str | os.PathLike, *, world: int | None = None, log=print) -> tuple[int, Path] | None:
    """(step, folder) of the newest complete checkpoint under ``root`` whose files match their checksums (and, given
    ``world``, written by that many ranks); every one skipped on the way gets a line through ``log`` saying why.
    None: there is none."""
    for _, path in reversed(checkpoint_folders(root)):
        why = _why_not_resumable(path, world)
        if why is None:
            return read_checkpoint_marker(path).step, path
        log(f"{why}: skipped")
    return None
