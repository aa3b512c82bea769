"""Where dense all-reduce catches up with the sparse schemes, and where Zen's row sum catches up with stock DDP's
sparse all-gather: the modelled crossover rate (:func:`crossover`, from a rate curve of every scheme), the measured
one (:func:`measured_crossover`, from a lab sweep), the report ``zen-analysis evaluate`` prints
(:func:`crossover_report`), and stock DDP's modelled seconds and its crossover against Zen (:func:`stock_seconds`,
:func:`stock_crossover`).

Shape suffixes: W ranks (one count of distinct rows each)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from zen_analysis.capture.reader import TraceReader
from zen_analysis.comm.schemes import SCHEMES, build_scheme
from zen_analysis.evaluation.calibrate import netlab, netlab_calibration_path, netlab_host_calibration_path
from zen_analysis.pricing.cost import phase_times, total_seconds
from zen_analysis.pricing.topology import Topology, load
from zen_analysis.pricing.traffic import ddp_sparse
from zen_analysis.sparsity.characterize import worker_counts

__all__ = ["crossover", "measured_crossover"]


def rate_curve(
    index_sets: Sequence[torch.Tensor],
    numel: int,
    topology_at,
    *,
    schemes: Sequence[str] | None = None,
    rates: Sequence[float] | None = None,
) -> pd.DataFrame:
    """Every scheme's modelled seconds for these index sets at each link rate (Gbit/s; default 0.1-1000, 121 rates
    evenly on a log scale) on ``topology_at(rate)``: one row per rate, one column per scheme. Each scheme's traffic is
    modelled once and priced at every rate (:func:`~zen_analysis.pricing.cost.phase_times` and the local work); a
    rate where the host, not the link, is the bottleneck prices as the host (:func:`~zen_analysis.evaluation.calibrate.
    netlab`)."""
    grid = list(rates) if rates is not None else list(np.geomspace(0.1, 1000.0, 121))
    topologies = [topology_at(r) for r in grid]
    cols = {}
    for name in schemes or SCHEMES:
        try:
            traffic = build_scheme(name).model(index_sets, numel)
        except ValueError:  # not supported at this world size
            continue
        cols[name] = [total_seconds(traffic, topo, name) for topo in topologies]
    return pd.DataFrame(cols, index=pd.Index(grid, name="rate_gbps"))


def crossover(
    index_sets: Sequence[torch.Tensor],
    numel: int,
    topology_at,
    *,
    schemes: Sequence[str] | None = None,
    rates: Sequence[float] | None = None,
) -> dict:
    """The link rate (Gbit/s) from which dense all-reduce is modelled faster than every sparse scheme, for ranks
    holding ``index_sets`` on ``topology_at(rate)``: the lowest rate of :func:`rate_curve` from which dense stays the
    fastest, interpolated log-log between the two rates around it. Dense pays more bytes and fewer fixed costs (one
    call, no local work) than a sparse scheme, so it catches up as the link gets faster, unless the host caps both
    first. Returns ``rate_gbps`` (``inf``: a sparse scheme is faster at every rate of the curve; 0: dense at every
    one), ``best_below`` (the fastest scheme just below it) and ``curve`` (the rate curve)."""
    curve = rate_curve(index_sets, numel, topology_at, schemes=schemes, rates=rates)
    if "allreduce" not in curve:
        raise ValueError("the crossover is against dense all-reduce: keep 'allreduce' among the schemes")
    sparse = curve.drop(columns="allreduce")
    ratio = (sparse.min(axis=1) / curve["allreduce"]).to_numpy()  # best sparse / dense: < 1 where sparse wins
    grid = curve.index.to_numpy()
    wins = ratio < 1
    if not wins.any():
        rate = 0.0
    elif wins[-1]:
        rate = float("inf")
    else:
        k = int(np.nonzero(wins)[0][-1])  # the last rate where a sparse scheme still wins
        lr0, lr1, q0, q1 = np.log(grid[k]), np.log(grid[k + 1]), np.log(ratio[k]), np.log(ratio[k + 1])
        rate = float(np.exp(lr0 + (lr1 - lr0) * (0 - q0) / (q1 - q0))) if q1 != q0 else float(grid[k + 1])
    below = grid[wins][-1] if wins.any() else grid[0]
    best = str(sparse.loc[below].idxmin()) if wins.any() else "allreduce"
    return {"rate_gbps": rate, "best_below": best, "curve": curve}


def measured_crossover(sweep: pd.DataFrame, *, kind: str = "natural", ranks: int = 4) -> float | None:
    """Where a scheme sweep (:func:`zen_experiments.lab_sweeps.scheme_sweep`) puts the crossover: the link rate
    at which the fastest sparse scheme's measured time equals dense all-reduce's, interpolated on log-log axes
    between the two measured rates around it; None when no crossing lies inside the measured rates."""
    d = sweep[(sweep["kind"] == kind) & (sweep["ranks"] == ranks)]
    rates = sorted(d["bandwidth_gbps"].unique())
    ratio = []  # best sparse / dense, per rate
    for r in rates:
        cell = d[d["bandwidth_gbps"] == r].set_index("scheme")["measured_s_median"]
        sparse = cell.drop(["allreduce", "auto"], errors="ignore")
        ratio.append(float(sparse.min() / cell["allreduce"]))
    for (r0, q0), (r1, q1) in zip(zip(rates, ratio), zip(rates[1:], ratio[1:])):
        if q0 < 1 <= q1:
            lr0, lr1 = np.log(r0), np.log(r1)
            return float(np.exp(lr0 + (lr1 - lr0) * (0 - np.log(q0)) / (np.log(q1) - np.log(q0))))
    return None


def crossover_report(run: str | Path, *, tensor: str | None = None, allow_missing: bool = False) -> list[str]:
    """Lines for a person: per rank count n the run's tensor (default its natural one, first captured step) can be
    replayed on and the lab is calibrated at (``data/calibration/netlab-<n>.json`` and ``netlab-host-<n>.json``: it
    calibrates nothing), the link rate from which dense all-reduce is modelled faster than every sparse scheme
    (:func:`crossover`, on ``netlab-<B>``). ``allow_missing``: of an incomplete store, what is left, its last line
    naming what is missing."""
    reader = TraceReader(run, allow_missing=allow_missing)
    tensors = reader.manifest["tensors"]
    tensor = tensor or next((t for t, i in tensors.items() if i["kind"] == "natural"), next(iter(tensors)))
    step = reader.steps(tensor)[0]
    ordered = reader.index_sets(step)[tensor]
    numel = int(tensors[tensor]["numel"])
    lines = []
    for n in worker_counts(len(ordered)):
        if load(netlab_calibration_path(n)) is None or load(netlab_host_calibration_path(n), links_only=True) is None:
            continue
        c = crossover(ordered[:n], numel, lambda gbps, n=n: netlab(n, gbps))
        rate = c["rate_gbps"]
        top = float(c["curve"].index.max())
        if rate == float("inf"):
            where = f"at no rate up to {top:g} Gbit/s ({c['best_below']} stays faster)"
        elif rate == 0:
            where = "at every rate"
        else:
            where = f"from {rate:.3g} Gbit/s ({c['best_below']} is the fastest below it)"
        lines.append(
            f"{tensor}, step {step}, {n} ranks: dense all-reduce is modelled faster than every sparse scheme {where}; "
            f"model netlab-<B> at {n} ranks, local work included"
        )
    if not lines:
        lines.append("no lab calibration to model the crossover on: `zen-analysis bench netlab` (root) makes one")
    if reader.missing:
        lines.append(reader.missing_note())
    return lines


def stock_seconds(rows_W, width: int, topology: Topology, *, value_bytes: int = 4) -> float:
    """Modelled seconds of stock DDP's sparse all-gather (:func:`~zen_analysis.pricing.traffic.ddp_sparse`) for ranks
    holding ``rows_W[i]`` distinct rows of ``width`` values, on ``topology`` placed for them: its three ring
    all-gathers alone. Its local sum (W sparse tensors added, then coalesced) is not priced: no calibration fits it,
    and another scheme's fitted costs do not stand in (AGsparse's row costs price it far above what a run takes:
    ``zen-analysis bench exchange`` measures stock's sum beside the model), so on a calibrated topology, where Zen's
    local work is priced, this flatters stock DDP."""
    t = ddp_sparse(rows_W, width, value_bytes=value_bytes)
    return float(phase_times(t, topology.for_ranks(len(t.sent())))["seconds"].sum())


def stock_crossover(
    row_sets: Sequence[torch.Tensor],
    num_rows: int,
    width: int,
    topology_at,
    *,
    ranks: Sequence[int] = (2, 4, 8, 16, 32, 64, 128),
    rates: Sequence[float] = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 100.0),
    dtype: torch.dtype = torch.float32,
) -> dict:
    """Where Zen's row sum (:meth:`~zen_analysis.comm.schemes.base.CommScheme.sum_rows`, what its drop-in sums a
    sparse embedding with) starts to lead stock DDP's sparse all-gather, for ranks holding the first n of
    ``row_sets`` (each a rank's distinct rows of a ``num_rows`` x ``width`` table), n in ``ranks`` (those up to
    ``len(row_sets)``), on ``topology_at(rate_gbps, n)`` at each of ``rates``.

    Returns ``grid`` (one row per (n, rate): ``zen_s`` with Zen's local work where the topology prices it,
    ``ddp_sparse_s`` from :func:`stock_seconds`, ``lead`` = ddp_sparse_s / zen_s, above 1 where Zen leads),
    ``by_ranks`` (per n: ``crossover_gbps``, the first rate where ``lead`` crosses 1, interpolated log-log between
    the two grid rates around it, NaN where it never does, and ``zen_leads``: "below" / "above" that rate, "always"
    or "never" on the grid) and ``by_rate`` (per rate: ``min_ranks``, the smallest n from which Zen leads at every
    larger n of the grid, NaN where it does not lead at the largest). Both directions happen: more ranks and slower
    links raise stock's bytes (a rank receives every other rank's rows), faster links leave its 3 (n - 1) ring steps'
    latencies."""
    vb = torch.empty(0, dtype=dtype).element_size()
    ns = [n for n in sorted(set(ranks)) if 2 <= n <= len(row_sets)]
    if not ns:
        raise ValueError(f"no rank count of {list(ranks)} fits {len(row_sets)} row sets: give n >= 2 sets")
    grid_rates = sorted(set(float(r) for r in rates))
    if not grid_rates or grid_rates[0] <= 0:
        raise ValueError(f"rates must be positive Gbit/s, got {list(rates)}")
    rows = []
    for n in ns:
        sets = row_sets[:n]
        zen = build_scheme("zen").model(sets, num_rows, dtype=dtype, width=width)
        counts = [torch.unique(torch.as_tensor(s)).numel() for s in sets]
        for rate in grid_rates:
            topo = topology_at(rate, n).for_ranks(n)
            z = total_seconds(zen, topo, "zen")
            s = stock_seconds(counts, width, topo, value_bytes=vb)
            rows.append({"n": n, "rate_gbps": rate, "zen_s": z, "ddp_sparse_s": s, "lead": s / z})
    grid = pd.DataFrame(rows)
    by_ranks = []
    for n, d in grid.groupby("n"):
        lead = d["lead"].to_numpy()
        wins = lead > 1
        where = "always" if wins.all() else "never" if not wins.any() else ("below" if wins[0] else "above")
        rate = float("nan")
        if where in ("below", "above"):
            k = int(np.nonzero(wins != wins[0])[0][0]) - 1
            lr0, lr1 = np.log(grid_rates[k]), np.log(grid_rates[k + 1])
            q0, q1 = np.log(lead[k]), np.log(lead[k + 1])
            rate = float(np.exp(lr0 + (lr1 - lr0) * (0 - q0) / (q1 - q0)))
        by_ranks.append({"n": n, "crossover_gbps": rate, "zen_leads": where})
    by_rate = []
    for rate, d in grid.groupby("rate_gbps"):
        wins = (d.sort_values("n")["lead"] > 1).to_numpy()
        losing = np.nonzero(~wins)[0]
        first = 0 if not len(losing) else int(losing[-1]) + 1
        by_rate.append({"rate_gbps": rate, "min_ranks": float(ns[first]) if first < len(ns) else float("nan")})
    return {"grid": grid, "by_ranks": pd.DataFrame(by_ranks), "by_rate": pd.DataFrame(by_rate)}
