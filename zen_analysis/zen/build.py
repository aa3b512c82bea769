"""Building the native kernel's shared library (:mod:`zen_analysis.zen.native` loads it).

The library is compiled once per source version with the system C compiler (``$CC`` or ``cc``) into
``$ZEN_ANALYSIS_CACHE`` (default ``~/.cache/zen_analysis``)/native; it has no dependency on torch's headers, so the
build takes about a second. That directory is private (mode 0700, owned by the user) and a library found there is
used only if the user owns it and no one else can write it; without a usable cache the kernel is built in a fresh
``mkdtemp`` directory, never under a fixed shared name.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

SOURCES = (Path(__file__).with_name("csrc") / "hierarchical_hash.c", Path(__file__).with_name("csrc") / "hash_bitmap.c")
HEADERS = (Path(__file__).with_name("csrc") / "zen_hash.h", Path(__file__).with_name("csrc") / "zen_exports.h")
"""h0, shared by the kernels, and the declaration of every export (:data:`zen_analysis.zen.native.EXPORTS`)."""
FLAGS = ("-O3", "-std=c11", "-fPIC", "-shared")


def cache_dir() -> Path | None:
    """``$ZEN_ANALYSIS_CACHE/native`` (default ``~/.cache/zen_analysis/native``); None without a home directory."""
    if "ZEN_ANALYSIS_CACHE" in os.environ:
        return Path(os.environ["ZEN_ANALYSIS_CACHE"]) / "native"
    try:
        return Path.home() / ".cache" / "zen_analysis" / "native"
    except (RuntimeError, KeyError):
        return None


def compiler() -> str | None:
    """The C compiler the kernel is built with (``$CC``, else ``cc`` or ``gcc`` on the PATH), or None."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _private_dir(folder: Path) -> bool:
    """Create ``folder`` (mode 0700) if needed; True when it is a real directory owned by this user that no one
    else can write (an existing one of ours is tightened to 0700). We load code from here: trust nothing else."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.stat()  # a symlink to a directory of ours is fine: the directory is what we check
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return False
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(folder, 0o700)
    except OSError:
        return False
    return True


def _trusted(path: Path) -> bool:
    """A regular file (not a link) owned by this user and writable by no one else."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def build() -> Path:
    """The kernel's shared library: reused from the private cache when this user built it there, else compiled.

    Without a usable cache (read-only home, a cache directory owned by someone else) it is compiled into a new
    private directory from ``mkdtemp`` (unpredictable name, mode 0700), which the loader removes once loaded:
    never a fixed name under the shared temporary directory, never a file another user could have planted."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set $CC or install gcc)")
    source = b"".join(src.read_bytes() for src in (*SOURCES, *HEADERS))
    tag = hashlib.sha256(source + " ".join((cc, *FLAGS)).encode()).hexdigest()[:16]
    name = f"zen_hash-{tag}.so"
    folder = cache_dir()
    if folder is not None and _private_dir(folder):
        target = folder / name
        if _trusted(target):
            return target
        try:
            return _compile(cc, target)  # also replaces a file there that we do not trust
        except OSError:
            pass
    private = Path(tempfile.mkdtemp(prefix="zen_analysis-native-"))
    try:
        return _compile(cc, private / name)
    except BaseException:
        shutil.rmtree(private, ignore_errors=True)
        raise


def _compile(compiler: str, target: Path) -> Path:
    # build beside the target and rename: ranks starting together may all build, the rename is atomic
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run(
            [compiler, *FLAGS, *map(str, SOURCES), "-o", tmp], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{compiler} failed to build {', '.join(s.name for s in SOURCES)}:\n{proc.stderr[-2000:]}"
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
