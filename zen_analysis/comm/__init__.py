"""Communication schemes for sparse gradient synchronization (Zen paper section 2.2-2.4).

``SCHEMES`` maps each scheme name to its class; every scheme has ``run`` (real torch.distributed collectives)
and ``traffic`` (the bytes ``run`` moves, computed from index sets alone). ``register_scheme(cls)`` adds a scheme
defined outside the package, :func:`~zen_analysis.comm.scheme_contract.check_scheme` checks it meets the contract.

The registry lives in :mod:`zen_analysis.comm.schemes`, one file per scheme; this package re-exports it. Nothing the
schemes build on (``wire``, ``zen``, ``pricing``, ``sparsity``) imports this package, so the re-export is a plain
import.
"""

from __future__ import annotations

from zen_analysis.comm.schemes import SCHEMES, build_scheme, register_scheme, unregister_scheme

__all__ = ["SCHEMES", "build_scheme", "register_scheme", "unregister_scheme"]
