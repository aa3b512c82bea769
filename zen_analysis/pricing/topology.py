"""Where ranks sit and what their links cost: nodes x GPUs per node, alpha (latency) and bandwidth per link.

Presets (each a template: ``preset(name).for_ranks(n)`` places n ranks, filling nodes in order):

* ``paper-tcp25``: the Zen paper's testbed (section 5.1), AWS p3dn-style nodes of 8 V100 with NVLink inside and
  25 Gbps TCP between nodes (up to 16 nodes).
* ``paper-efa100``: the same nodes with 100 Gbps EFA between them.
* ``h200-node``: one node of 8 H200 on NVLink 4 (450 GB/s per direction per GPU).
* ``local`` / ``local-<n>``: this machine, alpha and bandwidth fitted per primitive (p2p swap,
  all_to_all_single, all_reduce) between n forked gloo ranks (default 2; stored in
  ``data/calibration/local-<n>.json``, :func:`load`).
* ``netlab-<B>``: this machine's ranks behind the emulated network's B Gbit/s links.

A topology is data: this module runs nothing. The measured ones (``local-<n>``, ``netlab-<B>``) are fitted and
looked up by name in :mod:`zen_analysis.evaluation.calibrate` (:func:`~zen_analysis.evaluation.calibrate.preset`).

Latencies are order-of-magnitude values for NCCL-class stacks, not measurements of the paper's cluster: the
alpha term matters for small tensors only; the paper's own model is bandwidth-only (alpha = 0).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

import numpy as np

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
    local_work: tuple[tuple[str, float, float, float], ...] = ()
    """(scheme, seconds per dense element scanned, per byte sent or received, per non-zero written): the ranks'
    own work, fitted per scheme on this machine with the links (:func:`fit_local_work`); a scheme without an
    entry is priced by its wire time alone (the presets: GPU kernels next to a network)."""
    local_work_rows: tuple[tuple[str, float, float, float], ...] = ()
    """The same for row-granular sums (:meth:`~zen_analysis.comm.schemes.base.CommScheme.sum_rows`, a traffic of
    ``width`` > 0): per element scanned (none: the rows are given), per byte sent or received, per row written.
    Fitted apart: a row's index is handled once for its D values, so the per-element costs of a flat sum price an
    embedding's rows too high (the measurement: the guide's "`auto`: the planner chooses the scheme"). Without an
    entry a row sum is priced by the flat costs."""

    def local_costs(self, scheme: str, *, rows: bool = False) -> tuple[float, float, float] | None:
        """``scheme``'s fitted local-work costs (``rows``: of its row-granular sums, where fitted)."""
        for name, *costs in self.local_work_rows if rows else ():
            if name == scheme:
                return tuple(costs)
        for name, *costs in self.local_work:
            if name == scheme:
                return tuple(costs)
        return None

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

    def link_matrices(self) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, bandwidth) as (W, W) arrays of :meth:`link` with ``shared`` links (diagonal: no cost)."""
        node = np.arange(self.num_ranks) // self.gpus_per_node
        same = node[:, None] == node[None, :]
        sharing = min(self.gpus_per_node, self.num_ranks)
        alpha = np.where(same, self.intra_alpha_s, self.inter_alpha_s)
        bw = np.where(same, self.intra_bandwidth, self.inter_bandwidth / sharing)
        np.fill_diagonal(alpha, 0.0)
        return alpha, bw

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, Topology] = {
    # V100 NVLink 2: ~25 GB/s per link direction between GPU pairs of a p3dn node
    "paper-tcp25": Topology(
        name="paper-tcp25",
        gpus_per_node=8,
        intra_alpha_s=5e-6,
        intra_bandwidth=25e9,
        inter_alpha_s=30e-6,
        inter_bandwidth=25 * GBPS,
    ),
    "paper-efa100": Topology(
        name="paper-efa100",
        gpus_per_node=8,
        intra_alpha_s=5e-6,
        intra_bandwidth=25e9,
        inter_alpha_s=15e-6,
        inter_bandwidth=100 * GBPS,
    ),
    # H200 SXM: NVLink 4, 900 GB/s bidirectional per GPU
    "h200-node": Topology(
        name="h200-node",
        gpus_per_node=8,
        intra_alpha_s=5e-6,
        intra_bandwidth=450e9,
        inter_alpha_s=10e-6,
        inter_bandwidth=400 * GBPS,
    ),
}


LOCAL_FIT = "whole-run+rows"
"""How a calibration's local-work costs were fitted (:func:`zen_analysis.evaluation.calibrate.fit_local_work`); a stored
calibration of the schemes fitted otherwise is stale and is calibrated again on first use."""


def load(path, *, links_only: bool = False) -> Topology | None:
    """The topology stored at ``path`` (a calibration), or None if there is none or it predates the local-work costs
    or their current fit (:data:`LOCAL_FIT`; ``links_only``: the caller reads its links alone, any fit will do)."""
    if not path.exists():
        return None
    d = json.loads(path.read_text())
    if "calibrated" not in d or not ("local_work" in d or d.get("method") == "primitives"):
        return None  # predates the local-work costs
    if d.get("method") == "schemes" and d.get("local_fit") != LOCAL_FIT and not links_only:
        return None  # local work fitted on the residual alone
    for extra in ("samples_s", "samples", "local_samples", "local_samples_rows", "method", "local_fit"):
        d.pop(extra, None)
    d["calibrated"] = tuple(tuple(c) for c in d["calibrated"])
    d["local_work"] = tuple(tuple(c) for c in d.get("local_work", ()))
    d["local_work_rows"] = tuple(tuple(c) for c in d.get("local_work_rows", ()))
    return Topology(**d)
