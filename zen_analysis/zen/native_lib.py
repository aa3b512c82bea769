"""Loading the native kernel (:mod:`zen_analysis.zen.native`): its exports' one declaration
(``csrc/zen_exports.h``) parsed into ctypes signatures, the shared library built on first use and loaded, and
whether it is available (and why not). The calls into it live in :mod:`zen_analysis.zen.native`."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

from zen_analysis.zen.build import build, cache_dir

EXPORTS = Path(__file__).with_name("csrc") / "zen_exports.h"
"""The one declaration of the kernel's exported functions; the ctypes signatures are built from it."""
_C_TYPES = {"int64_t": ctypes.c_int64, "uint32_t": ctypes.c_uint32, "int": ctypes.c_int, "void": None}


def _c_type(decl: str, where: str):
    """The ctypes type of a C parameter or return type: any pointer is an address; the scalars by name."""
    words = decl.replace("const ", "").split()
    if "*" in decl:
        return ctypes.c_void_p
    if not words or words[0] not in _C_TYPES:
        raise RuntimeError(
            f"{EXPORTS.name}: {where} has type {decl!r}, which native.py cannot map (add it to _C_TYPES)"
        )
    return _C_TYPES[words[0]]


@lru_cache(maxsize=1)
def declarations() -> dict[str, tuple[Any, list[Any]]]:
    """Each exported function's (restype, argtypes), parsed from :data:`EXPORTS`."""
    text = re.sub(r"/\*.*?\*/", "", EXPORTS.read_text(), flags=re.S)
    out = {}
    for ret, name, params in re.findall(r"^\s*([\w ]+?)\s+(zen_\w+)\s*\(([^)]*)\)\s*;", text, flags=re.M):
        args = [p.strip() for p in params.split(",") if p.strip()]
        argtypes = [_c_type(re.sub(r"\w+$", "", a).strip() or a, f"{name}'s {a!r}") for a in args]
        out[name] = (_c_type(ret, f"{name}'s return"), argtypes)
    if not out:
        raise RuntimeError(f"{EXPORTS} declares no zen_* function")
    return out


@lru_cache(maxsize=1)
def _library() -> tuple[ctypes.CDLL | None, str]:
    if os.environ.get("ZEN_ANALYSIS_NATIVE", "1") == "0":
        return None, "turned off by ZEN_ANALYSIS_NATIVE=0"
    try:
        path = build()
        lib = ctypes.CDLL(str(path))
    except (OSError, RuntimeError) as err:
        return None, str(err)
    if path.parent != cache_dir():  # a one-off private build: loaded, so its directory can go
        shutil.rmtree(path.parent, ignore_errors=True)
    for name, (restype, argtypes) in declarations().items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise RuntimeError(
                f"the kernel library {path} has no {name}, which {EXPORTS.name} declares: a stale build? Remove "
                f"{path.parent} and run again"
            ) from None
        fn.restype, fn.argtypes = restype, argtypes
    return lib, ""


def available() -> bool:
    """Whether the kernel is built (or builds now) and loads."""
    return _library()[0] is not None


def unavailable_reason() -> str:
    return _library()[1]


def loaded_library() -> ctypes.CDLL:
    """The compiled kernel, built and loaded on first use; raises ``RuntimeError`` saying why where it cannot be
    (callers check :func:`available` first, or want the error)."""
    lib, why = _library()
    if lib is None:
        raise RuntimeError(f"the native hashing kernel is unavailable: {why}")
    return lib


def warn_fallback() -> None:
    """One warning per process when ``backend="auto"`` falls back to torch rounds."""
    if not getattr(warn_fallback, "done", False):
        warn_fallback.done = True
        warnings.warn(
            f"hierarchical_hash: native kernel unavailable ({unavailable_reason()}); using torch rounds", stacklevel=3
        )
