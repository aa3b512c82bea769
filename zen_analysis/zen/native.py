"""The CPU kernel of hierarchical hashing (``csrc/hierarchical_hash.c``), built on first use and called by ctypes.

Why a kernel: Algorithm 1 is a GPU design, thousands of threads claiming slots of a hash memory at once. In torch
rounds on a CPU every round is several full passes over the indices (gather, compare, scatter, read back,
compact), slower than sorting 4-bit keys. The kernel does one pass: hash an index, prefetch its first slot, claim
a slot with compare-and-swap, and the threads (one chunk of the indices each, ``torch.get_num_threads()`` of them,
so a forked rank with one thread runs it single-threaded) then compact the memory per partition.

The shared library is compiled once per source version with the system C compiler (``$CC`` or ``cc``) into
``$ZEN_ANALYSIS_CACHE`` (default ``~/.cache/zen_analysis``)/native; it has no dependency on torch's headers, so
the build takes about a second. That directory is private (mode 0700, owned by the user) and a library found
there is loaded only if the user owns it and no one else can write it; without a usable cache the kernel is
built in a fresh ``mkdtemp`` directory, never under a fixed shared name. Without a compiler, :func:`available` is False, and ``hierarchical_hash`` falls
back to its torch rounds (``backend="auto"``) with one warning. ``ZEN_ANALYSIS_NATIVE=0`` turns the kernel off.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import torch

from zen_analysis.indices import check_indices

SOURCE = Path(__file__).with_name("csrc") / "hierarchical_hash.c"
FLAGS = ("-O3", "-std=c11", "-fPIC", "-shared")
_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_U32 = ctypes.c_uint32
_INT = ctypes.c_int


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


def _build() -> Path:
    """The kernel's shared library: reused from the private cache when this user built it there, else compiled.

    Without a usable cache (read-only home, a cache directory owned by someone else) it is compiled into a new
    private directory from ``mkdtemp`` (unpredictable name, mode 0700), which the loader removes once loaded:
    never a fixed name under the shared temporary directory, never a file another user could have planted."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set $CC or install gcc)")
    source = SOURCE.read_bytes()
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
        proc = subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", tmp], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{compiler} failed to build {SOURCE.name}:\n{proc.stderr[-2000:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


@lru_cache(maxsize=1)
def _library() -> tuple[ctypes.CDLL | None, str]:
    if os.environ.get("ZEN_ANALYSIS_NATIVE", "1") == "0":
        return None, "turned off by ZEN_ANALYSIS_NATIVE=0"
    try:
        path = _build()
        lib = ctypes.CDLL(str(path))
    except (OSError, RuntimeError) as err:
        return None, str(err)
    if path.parent != cache_dir():  # a one-off private build: loaded, so its directory can go
        shutil.rmtree(path.parent, ignore_errors=True)
    lib.zen_place.restype = _I64
    lib.zen_place.argtypes = [_P, _I64, _I64, _I64, _INT, _U32, _INT, _U32, _INT, _I64, _I64, _P, _P, _P, _P, _P, _INT]

    lib.zen_compact.restype = None
    lib.zen_compact.argtypes = [_P, _I64, _I64, _I64, _I64, _P, _P, _P, _P, _P]
    lib.zen_h0.restype = None
    lib.zen_h0.argtypes = [_P, _I64, _U32, _P]
    return lib, ""


def available() -> bool:
    """Whether the kernel is built (or builds now) and loads."""
    return _library()[0] is not None


def unavailable_reason() -> str:
    return _library()[1]


def _lib() -> ctypes.CDLL:
    lib, why = _library()
    if lib is None:
        raise RuntimeError(f"the native hashing kernel is unavailable: {why}")
    return lib


def h0(indices: torch.Tensor, seed: int) -> torch.Tensor:
    """The kernel's h0 (for tests: it must equal ``zen.hashing.h0``)."""
    idx = check_indices(indices).contiguous()
    out = torch.empty_like(idx)
    _lib().zen_h0(idx.data_ptr(), idx.numel(), seed & 0xFFFFFFFF, out.data_ptr())
    return out


def _ranges(total: int, parts: int) -> list[tuple[int, int]]:
    step = -(-total // parts)
    return [(lo, min(total, lo + step)) for lo in range(0, total, step)]


def hierarchical_hash(idx_K: torch.Tensor, n: int, *, seed: int, k: int, par: int, ser: int,
                      level2_seed: int | None, threads: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int, int]:  # fmt: skip
    """Algorithm 1 on CPU int64 ``idx_K`` (K < 2**31) with ``par`` parallel and ``ser`` serial slots per partition;
    returns (positions_K grouped by partition, counts_n, indices sent to serial regions, partitions that
    overflowed their serial region). ``level2_seed`` is already mixed (``hierarchical._level2_seed``)."""
    lib = _lib()
    idx_K = check_indices(idx_K).contiguous()
    K = idx_K.numel()
    threads = max(1, min(threads or torch.get_num_threads(), K // 65536 or 1))
    memory = torch.full((n * (par + ser),), -1, dtype=torch.int32)
    serial_fill = torch.zeros(n, dtype=torch.long)
    overflow = torch.empty(K, dtype=torch.int32)
    overflow_len = torch.zeros(1, dtype=torch.long)
    shift = n.bit_length() - 1 if n & (n - 1) == 0 else -1
    chunks = _ranges(K, threads) if K else []
    counts = torch.zeros(max(1, len(chunks)), n, dtype=torch.long)

    def place(c: int) -> int:
        lo, hi = chunks[c]
        return lib.zen_place(idx_K.data_ptr(), lo, hi, n, shift, seed & 0xFFFFFFFF, level2_seed is not None,
                             (level2_seed or 0) & 0xFFFFFFFF, k, par, ser, memory.data_ptr(), counts[c].data_ptr(),
                             serial_fill.data_ptr(), overflow.data_ptr(), overflow_len.data_ptr(), len(chunks) > 1)  # fmt: skip

    def run(fn, count: int) -> list:
        if count <= 1 or threads == 1:
            return [fn(i) for i in range(count)]
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(fn, range(count)))

    serial = sum(run(place, len(chunks)))
    counts_n = counts.sum(0)
    m = int(overflow_len)
    overflow = overflow[:m]
    if m:  # positions past a full serial region (rare): grouped by partition for the compaction
        from zen_analysis.zen.hashing import owner

        part = owner(idx_K[overflow.long()], n, seed)
        overflow = overflow[torch.argsort(part, stable=True)].contiguous()
        overflow_offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(torch.bincount(part, minlength=n), 0)])
    else:
        overflow_offsets = torch.zeros(n + 1, dtype=torch.long)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts_n, 0)])  # n + 1 bounds
    out = torch.empty(K, dtype=torch.long)
    groups = _ranges(n, threads)

    def compact(c: int) -> None:
        lo, hi = groups[c]
        lib.zen_compact(memory.data_ptr(), lo, hi, par, ser, serial_fill.data_ptr(), overflow.data_ptr(),
                        overflow_offsets.data_ptr(), offsets.data_ptr(), out.data_ptr())  # fmt: skip

    run(compact, len(groups))
    return out, counts_n, int(serial), int((serial_fill > ser).sum())


def warn_fallback() -> None:
    """One warning per process when ``backend="auto"`` falls back to torch rounds."""
    if not getattr(warn_fallback, "done", False):
        warn_fallback.done = True
        warnings.warn(f"hierarchical_hash: native kernel unavailable ({unavailable_reason()}); using torch rounds", stacklevel=3)
