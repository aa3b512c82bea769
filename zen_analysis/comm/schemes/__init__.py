"""The registry of synchronization schemes: ``SCHEMES[name]``, ``build_scheme(name, **options)``, and
``register_scheme(cls)`` for a scheme defined outside the package (:mod:`~zen_analysis.comm.schemes.registration`)."""

from __future__ import annotations

from typing import Any

from zen_analysis.comm.schemes.base import CommScheme
from zen_analysis.comm.schemes.registration import (
    BUILTIN_SCHEMES,
    SCHEMES,
    register_scheme,
    sums_rows,
    unregister_scheme,
)
from zen_analysis.config.plugins import unknown_name


def build_scheme(name: str, *, seed: int | None = None, **options: Any) -> CommScheme:
    """An instance of the scheme called ``name``; unknown names and options raise ``ValueError``. ``seed``, the
    hash seed (h0), goes to the schemes that hash indices (``hashed``) and is ignored by the others, so a caller
    can pass it whatever the scheme."""
    if name not in SCHEMES:
        raise ValueError(unknown_name(f"unknown scheme {name!r}", name, sorted(SCHEMES)))
    if seed is not None and SCHEMES[name].hashed:
        options["seed"] = seed
    try:
        return SCHEMES[name](**options)
    except TypeError as exc:
        raise ValueError(f"scheme {name!r}: {exc}") from None


__all__ = [
    "BUILTIN_SCHEMES",
    "SCHEMES",
    "CommScheme",
    "build_scheme",
    "register_scheme",
    "sums_rows",
    "unregister_scheme",
]
