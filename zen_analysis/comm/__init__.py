"""Communication schemes for sparse gradient synchronization (Zen paper section 2.2-2.4).

``SCHEMES`` maps each scheme name to its class; every scheme has ``run`` (real torch.distributed collectives)
and ``traffic`` (the bytes ``run`` moves, computed from index sets alone).

The registry is imported lazily: the ``zen`` scheme runs :mod:`zen_analysis.zen.sparse_allreduce`, which itself
builds on :mod:`zen_analysis.wire.exchange`, so importing the exchange must not pull in the schemes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SCHEMES", "build_scheme"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from zen_analysis.comm import schemes

        return getattr(schemes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
