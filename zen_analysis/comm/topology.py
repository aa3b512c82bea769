"""Where ranks sit and what their links cost: nodes x GPUs per node, alpha (latency) and bandwidth per link.

Presets (each a template: ``preset(name).for_ranks(n)`` places n ranks, filling nodes in order):

* ``paper-tcp25``: the Zen paper's testbed (section 5.1), AWS p3dn-style nodes of 8 V100 with NVLink inside and
  25 Gbps TCP between nodes (up to 16 nodes).
* ``paper-efa100``: the same nodes with 100 Gbps EFA between them.
* ``h200-node``: one node of 8 H200 on NVLink 4 (450 GB/s per direction per GPU).
* ``local``: this machine, alpha and bandwidth fitted per primitive (p2p swap, all_to_all_single, all_reduce)
  between two forked gloo ranks (:func:`calibrate`, stored in ``data/calibration/local.json``).

Latencies are order-of-magnitude values for NCCL-class stacks, not measurements of the paper's cluster: the
alpha term matters for small tensors only; the paper's own model is bandwidth-only (alpha = 0).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

from zen_analysis import paths
from zen_analysis.atomic import atomic_write_json

GBPS = 1e9 / 8  # bytes per second in one Gbit/s


@dataclass(frozen=True, kw_only=True)
class Topology:
    name: str
    gpus_per_node: int
    intra_alpha_s: float
    intra_bandwidth: float
    """Bytes per second per direction between two GPUs of one node."""
    inter_alpha_s: float
    inter_bandwidth: float
    """Bytes per second per direction of a node's network link, shared by its GPUs."""
    num_ranks: int = 0
    """0 for a template; set by :meth:`for_ranks`."""
    calibrated: tuple[tuple[str, float, float], ...] = ()
    """(primitive, alpha seconds, bytes per second) measured for ``all_to_all``, ``p2p``, ``all_reduce``;
    when present they price phases of that primitive instead of the link values."""

    def for_ranks(self, num_ranks: int) -> Topology:
        return replace(self, num_ranks=num_ranks)

    @property
    def num_nodes(self) -> int:
        return -(-self.num_ranks // self.gpus_per_node)

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def primitive_link(self, primitive: str | None) -> tuple[float, float] | None:
        for name, alpha, bw in self.calibrated:
            if name == primitive:
                return alpha, bw
        return None

    def link(self, a: int, b: int, *, shared: bool = True) -> tuple[float, float]:
        """(alpha seconds, bytes per second) of the path from rank a to rank b.

        Between nodes the GPUs of a node share its network link: with ``shared`` (every GPU exchanging with
        other nodes at once, as in all-to-all and all-gather) each gets bandwidth / GPUs per node; a ring crosses
        each node boundary once and has the link to itself (``shared=False``).
        """
        if self.node(a) == self.node(b):
            return self.intra_alpha_s, self.intra_bandwidth
        sharing = min(self.gpus_per_node, self.num_ranks) if shared else 1
        return self.inter_alpha_s, self.inter_bandwidth / sharing

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, Topology] = {
    # V100 NVLink 2: ~25 GB/s per link direction between GPU pairs of a p3dn node
    "paper-tcp25": Topology(name="paper-tcp25", gpus_per_node=8, intra_alpha_s=5e-6, intra_bandwidth=25e9,
                            inter_alpha_s=30e-6, inter_bandwidth=25 * GBPS),
    "paper-efa100": Topology(name="paper-efa100", gpus_per_node=8, intra_alpha_s=5e-6, intra_bandwidth=25e9,
                             inter_alpha_s=15e-6, inter_bandwidth=100 * GBPS),
    # H200 SXM: NVLink 4, 900 GB/s bidirectional per GPU
    "h200-node": Topology(name="h200-node", gpus_per_node=8, intra_alpha_s=5e-6, intra_bandwidth=450e9,
                          inter_alpha_s=10e-6, inter_bandwidth=400 * GBPS),
}  # fmt: skip


def calibration_path():
    return paths.data_dir() / "calibration" / "local.json"


def _sweep(rank: int, world: int, sizes: list[int], repeats: int) -> dict:
    """Median seconds of barrier-synchronised p2p swaps, all_to_all_single and all_reduce per size in bytes."""
    import time

    import torch
    import torch.distributed as dist

    def timed(fn) -> float:
        times = []
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2]

    peer = 1 - rank
    out = {"p2p": {}, "all_to_all": {}, "all_reduce": {}}
    for size in sizes:
        n = max(1, size // 4)
        buf, got = torch.zeros(n), torch.zeros(n)
        a2a_in, a2a_out = torch.zeros(n * world), torch.zeros(n * world)

        def swap() -> None:
            ops = [dist.P2POp(dist.isend, buf, peer), dist.P2POp(dist.irecv, got, peer)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()

        out["p2p"][size] = timed(swap)
        out["all_to_all"][size] = timed(lambda: dist.all_to_all_single(a2a_out, a2a_in))
        out["all_reduce"][size] = timed(lambda: dist.all_reduce(buf))
    return out


def calibrate(*, repeats: int = 9) -> Topology:
    """Fit alpha and bandwidth of this machine's gloo loopback between two forked ranks; saves and returns it.

    Each primitive the schemes use is swept separately (barrier-synchronised, medians): a p2p swap
    (``sendrecv``), ``all_to_all_single`` (bytes per peer) and ``all_reduce`` (bytes per rank, priced as a
    ring of 2 (n - 1) steps of half the buffer at n = 2). A plain ping-pong underestimates gloo's collectives
    several-fold: their per-call overhead is larger and ``all_reduce`` also reduces.
    """
    import numpy as np

    from zen_analysis.dist.launch import fork_launch

    sizes = [2**k for k in range(6, 25, 2)]
    sweep = fork_launch(_sweep, 2, sizes, repeats)[0]
    fits = []
    for prim, table in sweep.items():
        x = np.array(sizes, dtype=float)
        if prim == "all_reduce":
            x = x / 2  # ring at n = 2: 2 steps of half the buffer -> fit per step
        y = np.array([table[s] for s in sizes]) / (2 if prim == "all_reduce" else 1)
        slope, intercept = np.polyfit(x, y, 1)
        fits.append((prim, max(float(intercept), 0.0), 1.0 / float(slope)))
    a2a = dict((p, (a, b)) for p, a, b in fits)["all_to_all"]
    topo = Topology(name="local", gpus_per_node=1 << 20, intra_alpha_s=a2a[0], intra_bandwidth=a2a[1],
                    inter_alpha_s=a2a[0], inter_bandwidth=a2a[1], calibrated=tuple(fits))  # fmt: skip
    samples = {p: {str(k): v for k, v in t.items()} for p, t in sweep.items()}
    atomic_write_json(calibration_path(), {**topo.to_dict(), "samples_s": samples})
    return topo


def preset(name: str) -> Topology:
    """A topology template by name; ``local`` is calibrated on first use."""
    if name == "local":
        path = calibration_path()
        if path.exists():
            d = json.loads(path.read_text())
            d.pop("samples_s", None)
            if "calibrated" in d:
                d["calibrated"] = tuple(tuple(c) for c in d["calibrated"])
                return Topology(**d)
        return calibrate()
    if name not in PRESETS:
        raise ValueError(f"unknown topology {name!r}; available: {sorted(PRESETS) + ['local']}")
    return PRESETS[name]
