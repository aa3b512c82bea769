"""Time models: alpha-beta per phase from a scheme's traffic, the ranks' local work, and the Zen paper's closed
forms.

``phase_times(traffic, topology)``: for each phase and rank, its latency (alpha per call) plus the time to push its
outgoing bytes or take in its incoming bytes over the links of the topology, whichever is larger; the phase
takes as long as its slowest (bottleneck) rank. Dense ring all-reduce phases use the ring formula,
2 (n - 1) steps of alpha + chunk / bandwidth on the slowest link of the ring; gloo's ring all-gathers (stock
DDP's sparse path, :func:`~zen_analysis.pricing.traffic.ddp_sparse`) step by step, each step as long as its slowest
link. ``local_time``: on a topology calibrated on this machine, each rank's own work per scheme (per dense
element scanned, byte moved, non-zero written), which on loopback outweighs the wire for large tensors.

Closed forms (section 3.4 of the digest; bandwidth-only, M elements, 4-byte words, COO = 2 words per non-zero,
b in bytes per second, gamma(k) the densification ratio of k workers):

* dense ring all-reduce  T_ar = 2 (n-1)/n * 4M / b
* AGsparse               T_ag = 2 (n-1) d * 4M / b
* Balanced Parallelism   T_bp = (n-1)/n (gamma(n) + 1) * 2 d * 4M / b          (Eq. 1)
* Hierarchical Centr.    T_hc = sum_{i=1..log n} gamma(2^{i-1}) * 2 d * 4M / b  (Eq. 2)

Shape suffixes: W ranks of the ring (one link to the next rank each).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from zen_analysis.pricing.topology import Topology
from zen_analysis.pricing.traffic import WORK_FEATURES, Traffic


def phase_times(traffic: Traffic, topology: Topology) -> pd.DataFrame:
    """One row per phase: modelled seconds and the bottleneck rank.

    A rank's phase time is its message latencies + the larger of its outgoing and incoming bytes over its
    links' bandwidths; the phase lasts as long as its slowest rank. Latency: a p2p call pays its peer link's
    alpha; an all_to_all call pays the largest alpha of its links once (its W - 1 messages are in flight
    together: per-message injection overhead is not modelled, which flatters all-to-all schemes at hundreds
    of ranks); a ring all-reduce pays 2 (W - 1) sequential steps. A calibrated topology (fitted at one rank count)
    prices each primitive (all_to_all, p2p, all_reduce) with its own measured alpha per call and bandwidth."""
    topo = topology.for_ranks(traffic.world)
    W = traffic.world
    alpha, bw = topo.link_matrices()
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
    for phase, gathers in traffic.ring_gathers.items():
        seconds, r = ring_gather_seconds(gathers, topo)
        rows.append({"phase": phase, "seconds": seconds, "bottleneck_rank": r})
    for phase, M in traffic.pairs.items():
        if phase in traffic.ring_gathers:
            continue
        calls = traffic.calls.get(phase, 0)
        calibrated = topo.primitive_link(traffic.primitive.get(phase))
        if calibrated:  # fitted per call at this rank count
            transfer = np.maximum(M.sum(1), M.sum(0)) / calibrated[1]
            latency = calls * calibrated[0]
        else:
            seconds = M / bw
            transfer = np.maximum(seconds.sum(1), seconds.sum(0))
            if traffic.primitive.get(phase) == "p2p":  # one message per call, to the phase's peer
                talks = (M > 0) | (M.T > 0)
                latency = calls * np.where(talks, alpha, 0.0).max(1, initial=0.0)
            else:  # all_to_all: the messages to all peers are in flight together; the slowest link's alpha
                latency = calls * alpha.max(1, initial=0.0)
        per_rank = transfer + latency
        r = int(per_rank.argmax())
        rows.append({"phase": phase, "seconds": float(per_rank[r]), "bottleneck_rank": r})
    return pd.DataFrame(rows, columns=["phase", "seconds", "bottleneck_rank"])


def ring_gather_seconds(gathers, topo: Topology) -> tuple[float, int]:
    """(seconds, the rank whose send bounds the most steps) of gloo ring all-gathers (:meth:`Traffic.ring_all_gather`;
    ``gathers``: their (block bytes, segments, kind)) on ``topo`` placed for the blocks' W ranks.

    Step by step: at step s every rank r sends block (r - s) mod W to r + 1 and waits for its own send and receive
    before the next, so a step lasts as long as its slowest link: max over r of segments x alpha + block / bandwidth
    of the link r -> r + 1 (unshared: a ring crosses each node boundary once). A calibrated topology prices a step as
    one step of its fitted ring all-reduce (``all_reduce``: gloo's ring, per step alpha and bandwidth). Lock-step is a
    slight overestimate where the blocks differ: a rank may start its next send while a slower link still works."""
    W = topo.num_ranks
    if W < 2:
        return 0.0, 0
    links = [topo.link(i, (i + 1) % W, shared=False) for i in range(W)]
    alpha_W, bw_W = np.array([a for a, _ in links]), np.array([b for _, b in links])
    calibrated = topo.primitive_link("all_reduce")
    if calibrated:
        alpha_W, bw_W = np.full(W, calibrated[0]), np.full(W, calibrated[1])
    ranks = np.arange(W)
    steps = (ranks[None, :] - np.arange(W - 1)[:, None]) % W  # (W - 1, W): the block rank r sends at step s
    seconds, bound = 0.0, np.zeros(W, dtype=np.int64)
    for sizes, segments, _ in gathers:
        per_step = segments * alpha_W[None, :] + sizes[steps] / bw_W[None, :]  # (W - 1, W)
        slowest = per_step.argmax(1)
        seconds += float(per_step[np.arange(W - 1), slowest].sum())
        bound += np.bincount(slowest, minlength=W)
    return seconds, int(bound.argmax())


def local_time(traffic: Traffic, topology: Topology, scheme: str) -> tuple[float, int] | None:
    """(seconds, bottleneck rank) of the ranks' own work — scanning the dense tensor, encoding / decoding /
    summing what they send and receive, writing the result — priced by ``topology``'s fitted costs for
    ``scheme`` (:attr:`~zen_analysis.pricing.topology.Topology.local_work`); None where it has none. The slowest
    rank's total stands for the whole run's local time (phases wait for it)."""
    costs = topology.local_costs(scheme, rows=traffic.width > 0)
    if costs is None or not traffic.work:
        return None
    per_rank = sum(c * traffic.work[f] for f, c in zip(WORK_FEATURES, costs))
    r = int(np.argmax(per_rank))
    return float(per_rank[r]), r


def total_seconds(traffic: Traffic, topology: Topology, scheme: str) -> float:
    """A whole sum's modelled seconds: every phase (:func:`phase_times`) and the ranks' local work
    (:func:`local_time`, where ``topology`` prices ``scheme``'s)."""
    local = local_time(traffic, topology, scheme)
    return float(phase_times(traffic, topology)["seconds"].sum()) + (local[0] if local else 0.0)


def phase_features(traffic: Traffic) -> pd.DataFrame:
    """What a uniform (calibrated) topology prices per phase: its primitive, the collective calls its slowest
    rank makes and the bytes that rank moves (the larger of sent and received), so that
    ``seconds = calls x alpha + bytes / bandwidth`` equals :func:`phase_times`. A ring all-reduce is
    2 (W - 1) calls of one chunk each."""
    W = traffic.world
    rows = []
    for phase, (numel, width) in traffic.ring_phases.items():
        steps = 2 * (W - 1)
        rows.append(
            {"phase": phase, "primitive": "all_reduce", "calls": steps, "bytes": steps * math.ceil(numel / W) * width}
        )
    for phase, gathers in traffic.ring_gathers.items():
        steps = sum(segments * (W - 1) for _, segments, _ in gathers)
        largest = sum((W - 1) * int(sizes.max(initial=0)) for sizes, _, _ in gathers)
        rows.append({"phase": phase, "primitive": "all_reduce", "calls": steps, "bytes": largest})
    for phase, M in traffic.pairs.items():
        if phase in traffic.ring_gathers:
            continue
        rows.append(
            {
                "phase": phase,
                "primitive": traffic.primitive.get(phase, "all_to_all"),
                "calls": traffic.calls.get(phase, 0),
                "bytes": int(np.maximum(M.sum(1), M.sum(0)).max(initial=0)),
            }
        )
    return pd.DataFrame(rows, columns=["phase", "primitive", "calls", "bytes"])


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
