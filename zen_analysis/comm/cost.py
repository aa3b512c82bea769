"""Time models: alpha-beta per phase from a scheme's traffic, and the Zen paper's closed forms.

``phase_times(traffic, topology)``: for each phase and rank, alpha per collective call plus the time to push its
outgoing bytes or take in its incoming bytes over the links of the topology, whichever is larger; the phase
takes as long as its slowest (bottleneck) rank. Dense ring all-reduce phases use the ring formula,
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
    """One row per phase: modelled seconds and the bottleneck rank.

    A rank's phase time is (collective calls in the phase) x alpha + the larger of its outgoing and incoming
    bytes over its links' bandwidths; the phase lasts as long as its slowest rank. A calibrated topology prices
    each primitive (all_to_all, p2p, all_reduce) with its own measured alpha and bandwidth.
    """
    topo = topology.for_ranks(traffic.world)
    W = traffic.world
    alpha = np.zeros((W, W))
    bw = np.ones((W, W))
    for i in range(W):
        for j in range(W):
            if i != j:
                alpha[i, j], bw[i, j] = topo.link(i, j)
    rows = []
    for phase, (numel, width) in traffic.ring_phases.items():
        ring_links = [topo.link(i, (i + 1) % W, shared=False) for i in range(W)] if W > 1 else [(0.0, 1.0)]
        ring_alpha, ring_bw = max(a for a, _ in ring_links), min(b for _, b in ring_links)
        calibrated = topo.primitive_link("all_reduce")
        if calibrated:
            ring_alpha, ring_bw = calibrated
        chunk = math.ceil(numel / W) * width
        seconds = 2 * (W - 1) * (ring_alpha + chunk / ring_bw) if W > 1 else 0.0
        rows.append({"phase": phase, "seconds": seconds, "bottleneck_rank": 0})
    for phase, M in traffic.pairs.items():
        a, b = alpha, bw
        calibrated = topo.primitive_link(traffic.primitive.get(phase))
        if calibrated:
            a, b = np.full((W, W), calibrated[0]), np.full((W, W), calibrated[1])
        transfer = np.maximum((M / b).sum(1), (M / b).sum(0))
        latency = traffic.calls.get(phase, 0) * a.max(initial=0.0)
        per_rank = transfer + latency
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
