"""The registry of synchronization schemes: ``SCHEMES[name]`` and ``build_scheme(name, **options)``."""

from __future__ import annotations

from typing import Any

from zen_analysis.comm.schemes.agsparse import AGSparse
from zen_analysis.comm.schemes.allreduce import AllReduce
from zen_analysis.comm.schemes.base import CommScheme
from zen_analysis.comm.schemes.omnireduce import OmniReduce
from zen_analysis.comm.schemes.sparcml import SparCML
from zen_analysis.comm.schemes.sparse_ps import BPCOO, SparsePS
from zen_analysis.comm.schemes.zen import Zen

SCHEMES: dict[str, type[CommScheme]] = {
    cls.name: cls for cls in (AllReduce, AGSparse, SparCML, OmniReduce, SparsePS, BPCOO, Zen)
}


def build_scheme(name: str, **options: Any) -> CommScheme:
    """An instance of the scheme called ``name``; unknown names and options raise ``ValueError``."""
    if name not in SCHEMES:
        raise ValueError(f"unknown scheme {name!r}; available: {sorted(SCHEMES)}")
    try:
        return SCHEMES[name](**options)
    except TypeError as exc:
        raise ValueError(f"scheme {name!r}: {exc}") from None


__all__ = ["SCHEMES", "CommScheme", "build_scheme"]
