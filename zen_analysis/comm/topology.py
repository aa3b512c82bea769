"""Where ranks sit and what their links cost: nodes x GPUs per node, alpha (latency) and bandwidth per link.

Presets (each a template: ``preset(name).for_ranks(n)`` places n ranks, filling nodes in order):

* ``paper-tcp25``: the Zen paper's testbed (section 5.1), AWS p3dn-style nodes of 8 V100 with NVLink inside and
  25 Gbps TCP between nodes (up to 16 nodes).
* ``paper-efa100``: the same nodes with 100 Gbps EFA between them.
* ``h200-node``: one node of 8 H200 on NVLink 4 (450 GB/s per direction per GPU).
* ``local`` / ``local-<n>``: this machine, alpha and bandwidth fitted per primitive (p2p swap,
  all_to_all_single, all_reduce) between n forked gloo ranks (default 2; :func:`calibrate`, stored in
  ``data/calibration/local-<n>.json``).
* ``netlab-<B>``: this machine's ranks behind the emulated network's B Gbit/s links (:func:`netlab`).

Latencies are order-of-magnitude values for NCCL-class stacks, not measurements of the paper's cluster: the
alpha term matters for small tensors only; the paper's own model is bandwidth-only (alpha = 0).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

import numpy as np

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
    local_work: tuple[tuple[str, float, float, float], ...] = ()
    """(scheme, seconds per dense element scanned, per byte sent or received, per non-zero written): the ranks'
    own work, fitted per scheme on this machine with the links (:func:`fit_local_work`); a scheme without an
    entry is priced by its wire time alone (the presets: GPU kernels next to a network)."""

    def local_costs(self, scheme: str) -> tuple[float, float, float] | None:
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
    "paper-tcp25": Topology(name="paper-tcp25", gpus_per_node=8, intra_alpha_s=5e-6, intra_bandwidth=25e9,
                            inter_alpha_s=30e-6, inter_bandwidth=25 * GBPS),
    "paper-efa100": Topology(name="paper-efa100", gpus_per_node=8, intra_alpha_s=5e-6, intra_bandwidth=25e9,
                             inter_alpha_s=15e-6, inter_bandwidth=100 * GBPS),
    # H200 SXM: NVLink 4, 900 GB/s bidirectional per GPU
    "h200-node": Topology(name="h200-node", gpus_per_node=8, intra_alpha_s=5e-6, intra_bandwidth=450e9,
                          inter_alpha_s=10e-6, inter_bandwidth=400 * GBPS),
}  # fmt: skip


def calibration_path(num_ranks: int = 2):
    return paths.data_dir() / "calibration" / f"local-{num_ranks}.json"


def _sweep(rank: int, world: int, sizes: list[int], repeats: int) -> dict:
    """Wire seconds of each repeat, per primitive and size in bytes, measured by the schemes' own instrument
    (:class:`~zen_analysis.comm.exchange.Exchange` with a sync before each call) in the schemes' own call
    patterns: a count swap + a buffer swap between pairs r, r ^ 1 (``p2p``); a count exchange + an
    ``all_to_all_single`` with split sizes, ``size`` bytes to each peer (``all_to_all``); a dense
    ``all_reduce`` of ``size`` bytes per rank."""
    import torch

    from zen_analysis.comm.exchange import Exchange

    ex = Exchange(sync=True)
    peer = rank ^ 1
    out: dict[str, dict[int, list[float]]] = {"p2p": {}, "all_to_all": {}, "all_reduce": {}}
    for size in sizes:
        n = max(1, size // 4)
        buf = torch.zeros(n)
        counts = torch.full((world,), n, dtype=torch.int64)
        a2a = torch.zeros(n * world)
        for prim in out:
            times = []
            for rep in range(repeats):
                ex.records.clear()
                with ex.phase("calibrate"):
                    if prim == "p2p" and peer < world:  # odd world: the last rank sits out
                        ex.sendrecv_count(n, peer)
                        ex.sendrecv(buf, peer, n)
                    elif prim == "all_to_all":
                        recv = ex.exchange_counts(counts)
                        ex.all_to_all_v(a2a, counts, recv)
                    elif prim == "all_reduce":
                        ex.all_reduce_dense(buf)
                times.append(sum(r.wire_seconds for r in ex.records.values()))
            out[prim][size] = times
    return out


def calibrate(num_ranks: int = 2, *, method: str = "schemes", repeats: int | None = None) -> Topology:
    """Fit alpha and bandwidth per primitive of this machine's gloo at ``num_ranks`` forked ranks; saves
    ``data/calibration/local-<n>.json`` and returns it.

    ``method="schemes"`` (default): regress the schemes' own measured phases on synthetic index sets
    (:func:`zen_analysis.comm.measure.calibrate_from_schemes`). ``"primitives"``: time each primitive alone
    (:func:`calibrate_primitives`, seconds instead of half a minute). On this project's 2-core machine the
    primitives alone price a call at 4 ranks 2-3x cheaper than it costs inside a scheme, so the model-vs-
    measured benchmark uses the schemes fit.
    """
    if method == "schemes":
        from zen_analysis.comm.measure import calibrate_from_schemes

        return calibrate_from_schemes(num_ranks, **({"repeats": repeats} if repeats else {}))
    if method == "primitives":
        return calibrate_primitives(num_ranks, repeats=repeats or 100)
    raise ValueError(f"unknown calibration method {method!r}; use 'schemes' or 'primitives'")


def calibrate_primitives(num_ranks: int = 2, *, repeats: int = 100) -> Topology:
    """Fit alpha and bandwidth of this machine's gloo between ``num_ranks`` forked ranks from each primitive
    timed alone; saves and returns it.

    Each primitive the schemes use is swept separately with the schemes' own instrument and call patterns
    (:func:`_sweep`) and summarised as the benchmark summarises schemes: slowest rank of each repeat, *mean*
    over repeats. Mean, not median: on a shared CPU each gloo call takes either ~0.3 ms or a whole 4 ms
    scheduler tick longer (bimodal), and only the mean adds up over a scheme's calls the way the model's
    calls x alpha does; calls x alpha + bytes / bw is then fitted on relative error (so small messages pin alpha
    and large ones the bandwidth) in the unit the time model prices it in: a p2p swap (alpha per call +
    bytes / bw); ``all_to_all_single`` (alpha per call + the bytes one rank sends, (W - 1) x per-peer, / bw);
    ``all_reduce`` (2 (W - 1) ring steps of alpha + buffer / W / bw). Calibrate at the rank count you measure: with more
    ranks than cores they share cores, and a plain 2-rank ping-pong underestimates gloo's collectives several
    fold (their per-call overhead is larger and all_reduce also reduces).
    """
    import numpy as np

    from zen_analysis.dist.launch import fork_launch

    if num_ranks < 2:
        raise ValueError("calibration needs at least 2 ranks")
    W = num_ranks
    sizes = [2**6, 2**10, 2**14, 2**18, 2**20, 2**22]
    sweeps = fork_launch(_sweep, W, sizes, repeats)
    slowest = {p: {s: float(np.mean(np.max([sw[p][s] for sw in sweeps], axis=0))) for s in sizes} for p in sweeps[0]}
    fits = []
    for prim, table in slowest.items():
        x = np.array(sizes, dtype=float)
        y = np.array([table[s] for s in sizes])
        calls = 2  # count + buffer
        if prim == "all_to_all":
            x = x * (W - 1)
        elif prim == "all_reduce":
            x, y, calls = x / W, y / (2 * (W - 1)), 1
        slope, intercept = np.polyfit(x, y, 1, w=1.0 / y)
        fits.append((prim, max(float(intercept), 0.0) / calls, 1.0 / max(float(slope), 1e-15)))
    a2a = dict((p, (a, b)) for p, a, b in fits)["all_to_all"]
    topo = Topology(name=f"local-{W}", gpus_per_node=1 << 20, intra_alpha_s=a2a[0], intra_bandwidth=a2a[1],
                    inter_alpha_s=a2a[0], inter_bandwidth=a2a[1], num_ranks=W, calibrated=tuple(fits))  # fmt: skip
    samples = {p: {str(k): v for k, v in t.items()} for p, t in slowest.items()}
    atomic_write_json(calibration_path(W), {**topo.to_dict(), "method": "primitives", "samples_s": samples})
    return topo


def fit_links(samples, *, bandwidth: float | None = None) -> tuple[tuple[str, float, float], ...]:
    """(primitive, alpha seconds, bytes per second) fitted per primitive to rows of ``samples`` (a DataFrame
    with ``primitive, calls, bytes, seconds``): seconds = calls x alpha + bytes / bandwidth, least squares
    on relative error. A coefficient that comes out negative (below the measurement's resolution) is dropped
    and the other refitted alone; a bandwidth too high to resolve is reported as 1e12 bytes/s. With
    ``bandwidth`` (bytes per second: a link of known rate) only alpha is fitted, to what the transfer leaves."""
    fits = []
    for prim, g in samples.groupby("primitive"):
        X = g[["calls", "bytes"]].to_numpy(dtype=float)
        y = g["seconds"].to_numpy(dtype=float)
        w = 1.0 / y
        if bandwidth is not None:
            rest = y - X[:, 1] / bandwidth
            alpha = float(np.sum(w * w * X[:, 0] * rest) / max(np.sum((w * X[:, 0]) ** 2), 1e-300))
            fits.append((str(prim), max(alpha, 0.0), float(bandwidth)))
            continue
        coef = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)[0]
        if coef[1] <= 0:  # transfer below resolution: latency only
            coef = np.array([float(np.sum(w * w * X[:, 0] * y) / np.sum((w * X[:, 0]) ** 2)), 1e-12])
        if coef[0] < 0:  # latency below resolution: bandwidth only
            coef = np.array([0.0, float(np.sum(w * w * X[:, 1] * y) / np.sum((w * X[:, 1]) ** 2))])
        fits.append((str(prim), float(coef[0]), 1.0 / float(coef[1])))
    return tuple(fits)


def fit_local_work(samples) -> tuple[tuple[str, float, float, float], ...]:
    """(scheme, seconds per element scanned, per byte moved, per non-zero written) fitted per scheme to rows of
    ``samples`` (a DataFrame with ``scheme, scanned, bytes, written, seconds``): non-negative least squares on
    relative error, by trying every subset of the three costs (a cost the data cannot resolve stays 0)."""
    from itertools import combinations

    fits = []
    for scheme, g in samples.groupby("scheme"):
        X = g[["scanned", "bytes", "written"]].to_numpy(dtype=float)
        y = g["seconds"].to_numpy(dtype=float)
        keep = y > 0
        X, y = X[keep], y[keep]
        best, best_loss = np.zeros(3), np.inf
        for k in (1, 2, 3):
            for cols in combinations(range(3), k):
                if not len(y):
                    break
                coef = np.linalg.lstsq(X[:, list(cols)] / y[:, None], np.ones_like(y), rcond=None)[0]
                if (coef < 0).any():
                    continue
                full = np.zeros(3)
                full[list(cols)] = coef
                loss = float(np.sum((X @ full / y - 1) ** 2))
                if loss < best_loss:
                    best, best_loss = full, loss
        fits.append((str(scheme), *map(float, best)))
    return tuple(fits)


def local(num_ranks: int = 2, *, recalibrate: bool = False) -> Topology:
    """This machine calibrated at ``num_ranks`` gloo ranks (stored; calibrated on first use, and again when the
    stored file predates the local-work costs)."""
    topo = None if recalibrate else _load(calibration_path(num_ranks))
    return topo or calibrate(num_ranks)


NETLAB_CALIBRATION_GBPS = 1.0
"""The link rate the lab's per-call costs are fitted at (:func:`netlab`)."""


def netlab_calibration_path(num_ranks: int):
    return paths.data_dir() / "calibration" / f"netlab-{num_ranks}.json"


def _load(path) -> Topology | None:
    if not path.exists():
        return None
    d = json.loads(path.read_text())
    if "calibrated" not in d or not ("local_work" in d or d.get("method") == "primitives"):
        return None  # predates the local-work costs
    for extra in ("samples_s", "samples", "local_samples", "method"):
        d.pop(extra, None)
    d["calibrated"] = tuple(tuple(c) for c in d["calibrated"])
    d["local_work"] = tuple(tuple(c) for c in d.get("local_work", ()))
    return Topology(**d)


def netlab(num_ranks: int, bandwidth_gbps: float, *, ranks_per_node: int = 1, recalibrate: bool = False) -> Topology:
    """Ranks behind the emulated network's links (:mod:`zen_analysis.dist.netlab`), ``bandwidth_gbps`` each way.

    Bandwidth as configured, in TCP payload (:data:`~zen_analysis.dist.netlab.TCP_PAYLOAD_FRACTION` of the
    rate); per-call costs (alpha per primitive) and local work fitted inside a lab of ``num_ranks`` single-rank
    nodes at 1 Gbit/s (:func:`~zen_analysis.comm.measure.calibrate_from_schemes`; stored as ``netlab-<n>.json``,
    calibrated on first use) and used at every rate: a token bucket adds no latency, so a call's fixed cost is
    gloo's and the CPU's, not the link's. Where no lab can be built, this machine's loopback
    calibration stands in for the per-call costs (with a warning): calls inside a lab cost less than on
    loopback, so that model runs high for schemes of many small calls.

    ``ranks_per_node`` > 1: nodes of that many ranks sharing one shaped link, loopback inside the node; the
    links are then priced per path (intra: loopback all-to-all alpha and bandwidth at ``num_ranks`` ranks;
    inter: the lab's all-to-all alpha, the link's payload rate shared by the node's ranks)."""
    from zen_analysis.dist.netlab import TCP_PAYLOAD_FRACTION, available

    bw = bandwidth_gbps * GBPS * TCP_PAYLOAD_FRACTION
    base = None if recalibrate else _load(netlab_calibration_path(num_ranks))
    if base is None and available()[0]:
        from zen_analysis.comm.measure import calibrate_from_schemes

        base = calibrate_from_schemes(num_ranks, bandwidth_gbps=NETLAB_CALIBRATION_GBPS)
    if base is None:
        import warnings

        warnings.warn(f"no network lab here ({available()[1]}): netlab-{bandwidth_gbps:g} takes its per-call costs "
                      "from the loopback calibration", stacklevel=2)  # fmt: skip
        base = local(num_ranks)
    lab = replace(base, name=f"netlab-{bandwidth_gbps:g}", intra_bandwidth=bw, inter_bandwidth=bw,
                  calibrated=tuple((prim, alpha, bw) for prim, alpha, _ in base.calibrated))  # fmt: skip
    if ranks_per_node == 1:
        return lab
    loop = dict((p, (a, b)) for p, a, b in local(num_ranks).calibrated).get("all_to_all", (lab.intra_alpha_s, 1e12))
    return replace(lab, name=f"netlab-{bandwidth_gbps:g}x{ranks_per_node}", gpus_per_node=ranks_per_node,
                   intra_alpha_s=loop[0], intra_bandwidth=loop[1], inter_alpha_s=lab.inter_alpha_s,
                   inter_bandwidth=bw, calibrated=())  # fmt: skip


def preset(name: str) -> Topology:
    """A topology template by name; ``local`` (2 ranks) or ``local-<n>`` is this machine, calibrated on first
    use (:func:`local`); ``netlab-<B>``, this machine's per-call costs (at 2 ranks) behind B Gbit/s links
    (:func:`netlab`, which takes the rank count)."""
    if name == "local" or (name.startswith("local-") and name[6:].isdigit()):
        return local(int(name[6:]) if name != "local" else 2)
    if name.startswith("netlab-"):
        try:
            gbps = float(name[7:])
        except ValueError:
            gbps = 0.0
        if gbps > 0:
            return netlab(2, gbps)
    if name not in PRESETS:
        raise ValueError(f"unknown topology {name!r}; available: {sorted(PRESETS) + ['local']}")
    return PRESETS[name]
