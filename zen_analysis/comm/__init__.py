"""Communication schemes for sparse gradient synchronization (Zen paper section 2.2-2.4).

``SCHEMES`` maps each scheme name to its class; every scheme has ``run`` (real torch.distributed collectives)
and ``traffic`` (the bytes ``run`` moves, computed from index sets alone).
"""

from zen_analysis.comm.schemes import SCHEMES, build_scheme

__all__ = ["SCHEMES", "build_scheme"]
