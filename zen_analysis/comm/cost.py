"""Time models: alpha-beta per phase from a scheme's traffic, and the Zen paper's closed forms.

``phase_times(traffic, topology)``: for each phase and rank, the time to push its outgoing bytes and to take in
its incoming bytes over the links of the topology (each peer message pays alpha once), the larger of the two;
the phase takes as long as its slowest (bottleneck) rank. Dense ring all-reduce phases use the ring formula,
2 (n - 1) steps of alpha + chunk / bandwidth on the slowest link of the ring.

Closed forms (section 3.4 of the digest; bandwidth-only, M elements, 4-byte words, COO = 2 words per non-zero,
b in bytes per second, gamma(k) the densification ratio of k workers):

* dense ring all-reduce  T_ar = 2 (n-1)/n * 4M / b
* AGsparse               T_ag = 2 (n-1) d * 4M / b
* Balanced Parallelism   T_bp = (n-1)/n (gamma(n) + 1) * 2 d * 4M / b          (Eq. 1)
* Hierarchical Centr.    T_hc = sum_{i=1..log n} gamma(2^{i-1}) * 2 d * 4M / b  (Eq. 2)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from zen_analysis.comm.topology import Topology
from zen_analysis.comm.traffic import Traffic


def phase_times(traffic: Traffic, topology: Topology) -> pd.DataFrame:
    """One row per phase: modelled seconds and the bottleneck rank."""
    topo = topology.for_ranks(traffic.world)
    W = traffic.world
    alpha = np.zeros((W, W))
    bw = np.ones((W, W))
    for i in range(W):
        for j in range(W):
            if i != j:
                alpha[i, j], bw[i, j] = topo.link(i, j)
    rows = []
    ring_links = [topo.link(i, (i + 1) % W, shared=False) for i in range(W)] if W > 1 else [(0.0, 1.0)]
    for phase, (numel, width) in traffic.ring_phases.items():
        ring_alpha = max(a for a, _ in ring_links)
        ring_bw = min(b for _, b in ring_links)
        chunk = math.ceil(numel / W) * width
        seconds = 2 * (W - 1) * (ring_alpha + chunk / ring_bw) if W > 1 else 0.0
        rows.append({"phase": phase, "seconds": seconds, "bottleneck_rank": 0})
    for phase, M in traffic.pairs.items():
        with np.errstate(divide="ignore", invalid="ignore"):
            out_t = (M / bw).sum(1) + (alpha * (M > 0)).sum(1)
            in_t = (M / bw).sum(0) + (alpha * (M > 0)).sum(0)
        per_rank = np.maximum(out_t, in_t)
        r = int(per_rank.argmax())
        rows.append({"phase": phase, "seconds": float(per_rank[r]), "bottleneck_rank": r})
    return pd.DataFrame(rows, columns=["phase", "seconds", "bottleneck_rank"])


def t_allreduce(n: int, M: int, b: float) -> float:
    return 2 * (n - 1) / n * 4 * M / b


def t_agsparse(n: int, d: float, M: int, b: float) -> float:
    return 2 * (n - 1) * d * 4 * M / b


def t_bp(n: int, d: float, gamma: Callable[[int], float], M: int, b: float) -> float:
    """Eq. 1: Balanced Parallelism with COO push and pull."""
    return (n - 1) / n * (gamma(n) + 1) * 2 * d * 4 * M / b


def t_hc(n: int, d: float, gamma: Callable[[int], float], M: int, b: float) -> float:
    """Eq. 2: Hierarchical Centralization (recursive doubling with incremental aggregation)."""
    return sum(gamma(2 ** (i - 1)) for i in range(1, int(math.log2(n)) + 1)) * 2 * d * 4 * M / b
