"""Where ranks sit and what their links cost: nodes x GPUs per node, alpha (latency) and bandwidth per link.

Presets (each a template: ``preset(name).for_ranks(n)`` places n ranks, filling nodes in order):

* ``paper-tcp25``: the Zen paper's testbed (section 5.1), AWS p3dn-style nodes of 8 V100 with NVLink inside and
  25 Gbps TCP between nodes (up to 16 nodes).
* ``paper-efa100``: the same nodes with 100 Gbps EFA between them.
* ``h200-node``: one node of 8 H200 on NVLink 4 (450 GB/s per direction per GPU).
* ``local``: this machine, alpha and bandwidth fitted from a gloo ping-pong between two forked ranks
  (:func:`calibrate`, stored in ``data/calibration/local.json``).

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

    def for_ranks(self, num_ranks: int) -> Topology:
        return replace(self, num_ranks=num_ranks)

    @property
    def num_nodes(self) -> int:
        return -(-self.num_ranks // self.gpus_per_node)

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

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


def _pingpong(rank: int, world: int, sizes: list[int], repeats: int) -> dict:
    import time

    import torch
    import torch.distributed as dist

    out = {}
    for size in sizes:
        buf = torch.zeros(size, dtype=torch.uint8)
        times = []
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
            else:
                dist.recv(buf, 0)
                dist.send(buf, 0)
            times.append((time.perf_counter() - t0) / 2)
        out[size] = sorted(times)[len(times) // 2]
    return out


def calibrate(*, repeats: int = 15) -> Topology:
    """Fit alpha and bandwidth of this machine's gloo loopback from a two-rank ping-pong; saves and returns it."""
    import numpy as np

    from zen_analysis.dist.launch import fork_launch

    sizes = [2**k for k in range(4, 25, 2)]
    one_way = fork_launch(_pingpong, 2, sizes, repeats)[0]
    x = np.array(sizes, dtype=float)
    y = np.array([one_way[s] for s in sizes])
    slope, intercept = np.polyfit(x, y, 1)
    topo = Topology(name="local", gpus_per_node=1 << 20, intra_alpha_s=max(float(intercept), 0.0),
                    intra_bandwidth=1.0 / float(slope), inter_alpha_s=max(float(intercept), 0.0),
                    inter_bandwidth=1.0 / float(slope))  # fmt: skip
    atomic_write_json(calibration_path(), {**topo.to_dict(), "samples_one_way_s": {str(k): v for k, v in one_way.items()}})
    return topo


def preset(name: str) -> Topology:
    """A topology template by name; ``local`` is calibrated on first use."""
    if name == "local":
        path = calibration_path()
        if path.exists():
            d = json.loads(path.read_text())
            d.pop("samples_one_way_s", None)
            return Topology(**d)
        return calibrate()
    if name not in PRESETS:
        raise ValueError(f"unknown topology {name!r}; available: {sorted(PRESETS) + ['local']}")
    return PRESETS[name]
