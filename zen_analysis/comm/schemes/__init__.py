"""The registry of synchronization schemes: ``SCHEMES[name]`` and ``build_scheme(name, **options)``."""

from __future__ import annotations

from typing import Any

from zen_analysis.comm.schemes.agsparse import AGSparse
from zen_analysis.comm.schemes.allreduce import AllReduce
from zen_analysis.comm.schemes.base import CommScheme
from zen_analysis.comm.schemes.bp_coo import BPCOO
from zen_analysis.comm.schemes.omnireduce import OmniReduce
from zen_analysis.comm.schemes.sparcml import SparCML
from zen_analysis.comm.schemes.sparse_ps import SparsePS
from zen_analysis.comm.schemes.zen import Zen

SCHEMES: dict[str, type[CommScheme]] = {
    cls.name: cls for cls in (AllReduce, AGSparse, SparCML, OmniReduce, SparsePS, BPCOO, Zen)
}


def build_scheme(name: str, *, seed: int | None = None, **options: Any) -> CommScheme:
    """An instance of the scheme called ``name``; unknown names and options raise ``ValueError``. ``seed``, the
    hash seed (h0), goes to the schemes that hash indices (``hashed``) and is ignored by the others, so a caller
    can pass it whatever the scheme."""
    if name not in SCHEMES:
        raise ValueError(f"unknown scheme {name!r}; available: {sorted(SCHEMES)}")
    if seed is not None and SCHEMES[name].hashed:
        options["seed"] = seed
    try:
        return SCHEMES[name](**options)
    except TypeError as exc:
        raise ValueError(f"scheme {name!r}: {exc}") from None


__all__ = ["SCHEMES", "CommScheme", "build_scheme"]
