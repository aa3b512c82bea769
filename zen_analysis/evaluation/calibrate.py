"""This machine's links, measured: the one calibration, and the topologies built from it.

:func:`calibrate` fits each primitive's alpha and bandwidth (and each scheme's local-work costs) by running the
schemes themselves on forked gloo ranks (:func:`zen_analysis.evaluation.measure.measure`) over synthetic index sets and
regressing the measured phases on the model's calls and bytes (:func:`fit_links`, :func:`fit_local_work`). It is
stored in ``data/calibration/local-<n>.json`` (loopback) or ``netlab-<n>.json`` (inside the emulated network).
:func:`local`, :func:`netlab` and :func:`preset` return topologies, calibrating on first use; the topology itself
(:class:`~zen_analysis.pricing.topology.Topology`, the paper's presets) is plain data and runs nothing.

Why the schemes and not each primitive timed alone: a gloo call on a shared CPU may wait a scheduler tick, more
often when ranks wake from local work, so a primitive timed in a tight loop prices a call cheaper than a scheme's
call sequence pays (the numbers: ``docs/results/bench/comm.md``, ``zen-analysis bench comm``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace
from itertools import combinations

import numpy as np
import pandas as pd

from zen_analysis.atomic import atomic_write_json
from zen_analysis.comm import SCHEMES, build_scheme
from zen_analysis.evaluation.calibration_files import NETLAB_CALIBRATION_GBPS as NETLAB_CALIBRATION_GBPS
from zen_analysis.evaluation.calibration_files import NETLAB_HOST_GBPS as NETLAB_HOST_GBPS
from zen_analysis.evaluation.calibration_files import calibration_path as calibration_path
from zen_analysis.evaluation.calibration_files import netlab_calibration_path as netlab_calibration_path
from zen_analysis.evaluation.calibration_files import netlab_host_calibration_path as netlab_host_calibration_path
from zen_analysis.evaluation.measure import measure
from zen_analysis.pricing.cost import phase_features
from zen_analysis.pricing.topology import GBPS, LOCAL_FIT, PRESETS, Topology, load
from zen_analysis.ranks.netlab import TCP_PAYLOAD_FRACTION, available
from zen_analysis.sparsity.synthetic import synthetic_index_sets

__all__ = [
    "NETLAB_HOST_GBPS",
    "calibrate",
    "netlab",
    "netlab_calibration_path",
    "netlab_host_calibration_path",
    "planner_topology",
    "preset",
]


def calibrate(
    num_ranks: int = 2,
    *,
    numel: int | Sequence[int] = (1_000_000, 4_000_000),
    densities: Sequence[float] = (0.004, 0.015, 0.06),
    repeats: int = 10,
    seed: int = 1000,
    bandwidth_gbps: float | None = None,
    host: bool = False,
    row_cases: Sequence[tuple[int, int, float]] = ((50_000, 64, 0.004), (50_000, 64, 0.03), (16_384, 256, 0.01)),
) -> Topology:
    """Fit each primitive's alpha and bandwidth from the schemes themselves, run on synthetic index sets
    (skew 1, overlap 0.3, three densities) — so per-call costs that only show inside a scheme's call sequence
    (waking ranks that idled through local work, scheduler ticks on a shared CPU) are in alpha. For every
    measured (scheme, phase) the model's slowest-rank calls and bytes
    (:func:`~zen_analysis.pricing.cost.phase_features`) are regressed on its mean wire time, per primitive, on relative
    error. The fit never sees the workload it is later checked on (captured traces). The same runs fit each scheme's
    local-work costs
    (:func:`fit_local_work`: per dense element scanned, byte moved, non-zero
    written) on what a whole run takes end to end (median of the slowest rank, no sync between collectives)
    beyond its modelled wire time — not on the local time of the synced runs, which on a shared CPU counts the
    ranks' contention after every barrier (more ranks woken together than there are cores) and prices local work
    too high end to end (the guide's "Measuring on an emulated network"); two tensor sizes (``numel``) separate
    the per-element scan from the per-non-zero work. Saved as ``local-<n>.json`` with ``method: schemes``.

    ``bandwidth_gbps``: the same inside the emulated network, each rank behind a link of that rate; the
    bandwidth is then the link's (TCP payload of the configured rate), only alpha is fitted; saved as
    ``netlab-<n>.json``, named ``netlab-<B>``. With ``host`` too, alpha and bandwidth are both fitted, behind
    links too fast to be the bottleneck (:data:`NETLAB_HOST_GBPS`): what the ranks' host moves inside the lab
    (``netlab-host-<n>.json``; :func:`netlab` caps each primitive by it).

    ``row_cases`` (rows, width, density of rows): row-granular sums (an embedding's rows, each index with its D
    values), timed end to end as the flat ones and fitted apart (``local_work_rows``: per byte moved and per row
    written), on the links the flat cases fitted; not with ``host``, which fits links only."""
    sizes = [numel] if isinstance(numel, int) else list(numel)
    df, cases = _flat_samples(num_ranks, sizes, densities, repeats=repeats, seed=seed, bandwidth_gbps=bandwidth_gbps)
    fixed = bandwidth_gbps * GBPS * TCP_PAYLOAD_FRACTION if bandwidth_gbps and not host else None
    fits = fit_links(df, bandwidth=fixed)
    a2a = {p: (a, b) for p, a, b in fits}.get("all_to_all", (0.0, 1e9))
    if host:
        name, path = f"netlab-host-{num_ranks}", netlab_host_calibration_path(num_ranks)
    else:
        name = f"netlab-{bandwidth_gbps:g}" if bandwidth_gbps else f"local-{num_ranks}"
        path = netlab_calibration_path(num_ranks) if bandwidth_gbps else calibration_path(num_ranks)
    topo = Topology(
        name=name,
        gpus_per_node=1 << 20,
        intra_alpha_s=a2a[0],
        intra_bandwidth=a2a[1],
        inter_alpha_s=a2a[0],
        inter_bandwidth=a2a[1],
        num_ranks=num_ranks,
        calibrated=tuple(fits),
    )
    local_df = _local_samples(cases, topo)
    row_df = pd.DataFrame()
    if not host and row_cases:
        by_rows = []
        for k, (num_rows, width, d) in enumerate(row_cases):
            sets = synthetic_index_sets(num_rows, num_ranks, d, skew=1.0, overlap=0.3, seed=seed + 500 + k)
            measured = measure(sets, num_rows, repeats=repeats, bandwidth_gbps=bandwidth_gbps, width=width)
            by_rows.append((num_rows, d, sets, measured, width))
        row_df = _local_samples(by_rows, topo)
    topo = replace(
        topo,
        local_work=fit_local_work(local_df) if len(local_df) else (),
        local_work_rows=fit_local_work(row_df) if len(row_df) else (),
    )
    atomic_write_json(
        path,
        {
            **topo.to_dict(),
            "method": "schemes",
            "local_fit": LOCAL_FIT,
            "samples": df.to_dict(orient="records"),
            "local_samples": local_df.to_dict(orient="records"),
            "local_samples_rows": row_df.to_dict(orient="records"),
        },
    )
    return topo


def _flat_samples(
    num_ranks: int,
    sizes: Sequence[int],
    densities: Sequence[float],
    *,
    repeats: int,
    seed: int,
    bandwidth_gbps: float | None,
) -> tuple[pd.DataFrame, list]:
    """:func:`calibrate`'s flat cases: every scheme measured on synthetic index sets of each size and density.
    Returns the link samples (one row per (case, scheme, phase): the model's features beside the measured wire
    seconds) and the cases ((numel, density, sets, measured)) that :func:`_local_samples` fits local work on."""
    rows, cases = [], []
    for j, size in enumerate(sizes):
        for i, d in enumerate(densities):
            sets = synthetic_index_sets(size, num_ranks, d, skew=1.0, overlap=0.3, seed=seed + i + 100 * j)
            measured = measure(sets, size, repeats=repeats, bandwidth_gbps=bandwidth_gbps)
            cases.append((size, d, sets, measured))
            for name in SCHEMES:
                feats = phase_features(build_scheme(name).model(sets, size)).set_index("phase")
                for phase, f in feats.iterrows():
                    rows.append(
                        {
                            "numel": size,
                            "density": d,
                            "scheme": name,
                            "phase": phase,
                            **f.to_dict(),
                            "seconds": float(measured.loc[(name, phase), "wire_s"]),
                        }
                    )
    return pd.DataFrame(rows), cases


def _local_samples(cases, topo: Topology) -> pd.DataFrame:
    """Local work: what each measured whole run (``total``: median of the slowest rank) takes beyond its modelled
    wire time on ``topo``, with the model's work features of the rank with the most bytes (it stands for the
    slowest). ``cases``: (numel, density, index sets, measured[, width])."""
    out = []
    for size, d, sets, measured, *width in cases:
        width = width[0] if width else 0
        for name in SCHEMES:
            scheme = build_scheme(name)
            model = scheme.model(sets, size, width=width)
            if not model.work:
                continue
            wire = float(scheme.time(sets, size, topo, width=width)["seconds"].sum())
            r = int(model.work["bytes"].argmax())
            out.append(
                {
                    "numel": size,
                    "width": width,
                    "density": d,
                    "scheme": name,
                    **{f: float(v[r]) for f, v in model.work.items()},
                    "seconds": float(measured.loc[(name, "total"), "wire_median_s"]) - wire,
                    "wire_s": wire,
                    "synced_local_s": float(measured.loc[(name, "local"), "wire_s"]),
                }
            )
    return pd.DataFrame(out)


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
    ``samples`` (a DataFrame with ``scheme, scanned, bytes, written, seconds``; ``seconds`` what a run takes beyond
    its modelled wire time ``wire_s``, 0 where absent): non-negative least squares on the relative error of the
    whole run (wire + local work), by trying every subset of the three costs (a cost the data cannot resolve stays
    0). On the whole run, not on the residual alone: a small run's residual is noise around zero (negative where
    its calls overlapped better than the synced wire times they were fitted on), and weighting it by itself lets
    one large sample decide the fit, whose per-element cost then prices the small runs too high (the case that
    showed it: the guide's "`auto`: the planner chooses the scheme")."""
    fits = []
    for scheme, g in samples.groupby("scheme"):
        X = g[["scanned", "bytes", "written"]].to_numpy(dtype=float)
        y = g["seconds"].to_numpy(dtype=float)
        total = y + (g["wire_s"].to_numpy(dtype=float) if "wire_s" in g else 0.0)
        keep = total > 0
        X, y, total = X[keep], y[keep], total[keep]
        best, best_loss = np.zeros(3), float(np.sum((y / total) ** 2)) if len(y) else np.inf
        for k in (1, 2, 3):
            for cols in combinations(range(3), k):
                if not len(y):
                    break
                coef = np.linalg.lstsq(X[:, list(cols)] / total[:, None], y / total, rcond=None)[0]
                if (coef < 0).any():
                    continue
                full = np.zeros(3)
                full[list(cols)] = coef
                loss = float(np.sum(((X @ full - y) / total) ** 2))
                if loss < best_loss:
                    best, best_loss = full, loss
        fits.append((str(scheme), *map(float, best)))
    return tuple(fits)


def local(num_ranks: int = 2, *, recalibrate: bool = False) -> Topology:
    """This machine calibrated at ``num_ranks`` gloo ranks (stored; calibrated on first use, and again when the
    stored file predates the local-work costs)."""
    topo = None if recalibrate else load(calibration_path(num_ranks))
    return topo or calibrate(num_ranks)


def netlab(num_ranks: int, bandwidth_gbps: float, *, ranks_per_node: int = 1, recalibrate: bool = False) -> Topology:
    """Ranks behind the emulated network's links (:mod:`zen_analysis.ranks.netlab`), ``bandwidth_gbps`` each way.

    Bandwidth as configured, in TCP payload (:data:`~zen_analysis.ranks.netlab.TCP_PAYLOAD_FRACTION` of the
    rate); per-call costs (alpha per primitive) and local work fitted inside a lab of ``num_ranks`` single-rank
    nodes at 1 Gbit/s (:func:`calibrate`; stored as ``netlab-<n>.json``,
    calibrated on first use) and used at every rate: a token bucket adds no latency, so a call's fixed cost is
    gloo's and the CPU's, not the link's. Where no lab can be built, this machine's loopback
    calibration stands in for the per-call costs (with a warning): calls inside a lab cost less than on
    loopback, so that model runs high for schemes of many small calls.

    A fast link does not make the host fast: inside the lab each primitive moves bytes at most as fast as the ranks'
    host does (gloo, TCP over veth and the bridge, the cores), which a second calibration fits behind links too fast
    to matter (:data:`NETLAB_HOST_GBPS`; ``netlab-host-<n>.json``, calibrated on first use). Where the link's payload
    rate is above the host's fitted bandwidth for a primitive, the host's alpha and bandwidth price it. Without
    that, a fast link prices dense all-reduce below what the host moves, and the planner picks it where AGsparse
    and Zen are faster (the measurement: ``docs/results/bench/netlab.md``; the mechanism: the guide's "`auto`:
    the planner chooses the scheme").

    ``ranks_per_node`` > 1: nodes of that many ranks sharing one shaped link, loopback inside the node; the
    links are then priced per path (intra: loopback all-to-all alpha and bandwidth at ``num_ranks`` ranks;
    inter: the lab's all-to-all alpha, the link's payload rate shared by the node's ranks)."""
    bw = bandwidth_gbps * GBPS * TCP_PAYLOAD_FRACTION
    base = None if recalibrate else load(netlab_calibration_path(num_ranks))
    if base is None and available()[0]:
        base = calibrate(num_ranks, bandwidth_gbps=NETLAB_CALIBRATION_GBPS)
    if base is None:
        warnings.warn(
            f"no network lab here ({available()[1]}): netlab-{bandwidth_gbps:g} takes its per-call costs "
            "from the loopback calibration",
            stacklevel=2,
        )
        base = local(num_ranks)
    host = _lab_host(num_ranks, recalibrate=recalibrate)
    lab = replace(
        base,
        name=f"netlab-{bandwidth_gbps:g}",
        intra_bandwidth=bw,
        inter_bandwidth=bw,
        calibrated=tuple(
            host[prim] if prim in host and host[prim][2] < bw else (prim, alpha, bw)
            for prim, alpha, _ in base.calibrated
        ),
    )
    if ranks_per_node == 1:
        return lab
    loop = dict((p, (a, b)) for p, a, b in local(num_ranks).calibrated).get("all_to_all", (lab.intra_alpha_s, 1e12))
    return replace(
        lab,
        name=f"netlab-{bandwidth_gbps:g}x{ranks_per_node}",
        gpus_per_node=ranks_per_node,
        intra_alpha_s=loop[0],
        intra_bandwidth=loop[1],
        inter_alpha_s=lab.inter_alpha_s,
        inter_bandwidth=bw,
        calibrated=(),
    )


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


def _lab_host(num_ranks: int, *, recalibrate: bool = False) -> dict[str, tuple[str, float, float]]:
    """primitive -> (primitive, alpha, bandwidth) the lab's host allows at ``num_ranks`` ranks (:func:`netlab`);
    empty where no lab can be built."""
    topo = None if recalibrate else load(netlab_host_calibration_path(num_ranks), links_only=True)
    if topo is None and available()[0]:
        # 5 repeats, half the default: it runs on first use, before a lab run's ranks start
        topo = calibrate(num_ranks, bandwidth_gbps=NETLAB_HOST_GBPS, host=True, repeats=5)
    return {prim: (prim, a, b) for prim, a, b in topo.calibrated} if topo is not None else {}


def model_topology(ranks: int, *, bandwidth_gbps: float | None = None, recalibrate: bool = False) -> Topology:
    """What the replay's measurement is set beside: this machine calibrated at ``ranks`` ranks on loopback, or
    inside the emulated network when the ranks run behind ``bandwidth_gbps`` links (re-fitted first with
    ``recalibrate``)."""
    if bandwidth_gbps:
        return netlab(ranks, bandwidth_gbps, recalibrate=recalibrate)
    return local(ranks, recalibrate=recalibrate)


def planner_topology(
    name: str,
    num_ranks: int,
    *,
    network: str = "loopback",
    bandwidth_gbps: float = 1.0,
    ranks_per_node: int = 1,
    calibrate_missing: bool = True,
) -> Topology:
    """The topology the planner (``sync.planner_topology``) prices a run of ``num_ranks`` ranks on: ``auto`` is this
    machine calibrated at that rank count (``local-<n>``), or the lab's ``netlab-<B>`` when the ranks run in it
    (``network="netlab"``); ``local``, ``local-<n>`` and ``netlab-<B>`` are those at ``num_ranks``; anything else a
    preset. Without ``calibrate_missing`` (inside a rank, which must not fork a calibration of its own) a missing
    calibration raises ``FileNotFoundError``; the launcher calibrates before the ranks start."""
    if name == "auto":
        name = f"netlab-{bandwidth_gbps:g}" if network == "netlab" else f"local-{num_ranks}"
    if name == "local" or (name.startswith("local-") and name[6:].isdigit()):
        n = num_ranks if name == "local" else int(name[6:])
        if not calibrate_missing and load(calibration_path(n)) is None:
            raise FileNotFoundError(
                f"no calibration of this machine at {n} ranks ({calibration_path(n)}): launch() calibrates it "
                f"before the ranks start, or call zen_analysis.evaluation.calibrate.local({n})"
            )
        return local(n)
    if name.startswith("netlab-"):
        try:
            gbps = float(name[7:])
        except ValueError:
            raise ValueError(f"unknown topology {name!r}: netlab-<Gbit/s>, e.g. netlab-2.5") from None
        needed = {netlab_calibration_path(num_ranks): False, netlab_host_calibration_path(num_ranks): True}
        missing = [p for p, links_only in needed.items() if load(p, links_only=links_only) is None]
        if not calibrate_missing and missing:
            raise FileNotFoundError(
                f"no lab calibration at {num_ranks} ranks ({', '.join(map(str, missing))}): launch() "
                f"calibrates it before the ranks start, or call "
                f"zen_analysis.evaluation.calibrate.netlab({num_ranks}, {gbps:g})"
            )
        return netlab(num_ranks, gbps, ranks_per_node=ranks_per_node)
    return preset(name)
