"""Trace-driven evaluation of the schemes, model side: ``zen-analysis evaluate <run>``.

For every captured tensor and step, every scheme and n = 2, 4, ..., W workers (the first n workers, as in the
characterization), the traffic model and the alpha-beta time on each topology preset are computed from the
workers' index sets and written to ``data/derived/<run_id>/schemes.parquet``, one row per
(tensor, step, n, scheme, topology). Other options (topologies, schemes, ``max_workers``, ``steps``) give a table
of their own, ``schemes-<hash>.parquet``, never a silent replacement of the default one that ``make reproduce``'s
figures read; each table is written atomically and stamped with its options (``zen_analysis.derived``).
Schemes a configuration does not support (``check`` raises ValueError) are skipped. ``best_scheme`` picks the
cheapest scheme by modelled time. A store missing some of its shards is evaluated only when asked for
(``allow_missing=True``, ``--allow-missing``): "the first n workers" are then the n smallest present, and the
table's stamp and ``attrs["missing"]`` name the missing workers and steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from zen_analysis.capture.reader import TraceReader
from zen_analysis.comm.schemes import SCHEMES, build_scheme
from zen_analysis.derived import (
    read_stamp,
    read_table,
    same_stamp,
    variant,
    write_table,
)
from zen_analysis.evaluation.calibrate import preset
from zen_analysis.pricing.cost import phase_times, total_seconds
from zen_analysis.pricing.topology import Topology
from zen_analysis.pricing.traffic import DDP_SPARSE, ddp_sparse
from zen_analysis.sparsity.characterize import worker_counts
from zen_analysis.sparsity.metrics import union_of

VERSION = 3  # 2: sparcml on any n (fold), matrix traffic; 3: alpha per message of an all_to_all
DEFAULT_TOPOLOGIES = ("paper-tcp25", "paper-efa100", "h200-node")


def best_scheme(index_sets: Sequence[torch.Tensor], numel: int, topology: Topology, *, schemes=None) -> str:
    """The scheme with the smallest modelled time for these index sets on ``topology``."""
    times = {}
    for name in schemes or SCHEMES:
        try:
            times[name] = build_scheme(name).time(index_sets, numel, topology)["seconds"].sum()
        except ValueError:  # not supported at this world size
            continue
    return min(times, key=times.get)


def evaluate_step(
    tensor: str, kind: str, step: int, numel: int, sets: list[torch.Tensor], topologies, schemes, *, width: int = 0
) -> list[dict]:
    """One captured step of one tensor (``sets``: each worker's index set) modelled by every scheme on every
    topology: the rows :func:`evaluate` writes for it. ``ddp_sparse`` (stock DDP's sparse all-gather,
    :func:`~zen_analysis.pricing.traffic.ddp_sparse`) is priced where the tensor is a table of rows of ``width``
    values (a natural 2-D tensor): by the workers' distinct rows, its wire alone (:func:`stock_seconds`)."""
    rows = []
    union = union_of(sets, numel)
    mean_nnz = sum(s.numel() for s in sets) / len(sets)
    for name in schemes:
        try:
            if name == DDP_SPARSE:
                if width < 1:
                    continue  # stock DDP sums an embedding's rows; a flat or top-k tensor has no such path
                traffic = ddp_sparse([torch.unique(s // width).numel() for s in sets], width)
            else:
                traffic = build_scheme(name).model(sets, numel)
        except ValueError:
            continue
        frame = traffic.frame()
        per_rank = frame.groupby("rank")[["bytes_sent", "bytes_received"]].sum()
        for topo_name, topo in topologies.items():
            pt = phase_times(traffic, topo)
            rows.append(
                {
                    "tensor": tensor,
                    "kind": kind,
                    "step": step,
                    "n": len(sets),
                    "numel": numel,
                    "density": mean_nnz / numel,
                    "gamma": union.numel() / mean_nnz if mean_nnz else float("nan"),
                    "scheme": name,
                    "topology": topo_name,
                    "seconds": float(pt["seconds"].sum()),
                    "bytes_sent_total": int(per_rank["bytes_sent"].sum()),
                    "bytes_max_rank": int(per_rank.max(axis=1).max()),
                }
            )
    return rows


def evaluate(
    run: str | Path,
    *,
    topologies: Sequence[str] = DEFAULT_TOPOLOGIES,
    schemes: Sequence[str] | None = None,
    max_workers: int = 128,
    steps: int | None = None,
    force: bool = False,
    progress: bool = True,
    allow_missing: bool = False,
) -> pd.DataFrame:
    """Modelled bytes and time of every scheme on every captured (tensor, step) for n = 2..W; cached.

    ``schemes`` may name ``ddp_sparse`` too, stock DDP's sparse all-gather, priced on natural 2-D tensors only (not
    in the default table, whose figures plot the seven schemes);
    ``max_workers`` caps n (raise it to 1024 for a capture with that many virtual workers: the scale mode);
    ``steps`` keeps the first captured steps only. The table's path is in ``df.attrs["path"]``; ``allow_missing``
    evaluates what is left of an incomplete store, ``df.attrs["missing"]`` naming what it lacks ("" if nothing)."""
    from tqdm.auto import tqdm

    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 2:
        raise ValueError(
            f"max_workers must be an integer >= 2 (n = 2, 4, ... workers are modelled), got {max_workers!r}"
        )
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be None (all captured steps) or an integer >= 1, got {steps!r}")
    names = list(schemes or SCHEMES)
    unknown = sorted(set(names) - set(SCHEMES) - {DDP_SPARSE})
    if unknown or not names:
        raise ValueError(
            f"unknown schemes {unknown or '(none given)'}; choose from {sorted(SCHEMES)} or {DDP_SPARSE!r} (stock DDP)"
        )
    if not topologies:
        raise ValueError("give at least one topology")
    topos = {name: preset(name) for name in topologies}  # an unknown preset fails here, before any work
    reader = TraceReader(run, allow_missing=allow_missing)
    options = {"topologies": list(topologies), "schemes": names, "max_workers": max_workers, "steps": steps}
    defaults = {"topologies": list(DEFAULT_TOPOLOGIES), "schemes": list(SCHEMES), "max_workers": 128, "steps": None}
    out = reader.derived_dir / f"{variant('schemes', options, defaults)}.parquet"
    stamp = {"version": VERSION, **options, "files": reader.fingerprint()}
    if reader.missing:  # only then: a complete store's table keeps its stamp
        stamp["missing"] = reader.missing_note()
    if not force and same_stamp(stamp, read_stamp(out)):
        try:
            df = read_table(out)
            df.attrs.update(run_id=reader.run_id, path=out, missing=reader.missing_note())
            return df
        except (OSError, pa.ArrowException):  # a damaged cache is a miss: recomputed below and replaced
            pass
    tensors = reader.manifest["tensors"]
    rows: list[dict] = []
    for step in tqdm(reader.steps()[:steps], desc=f"evaluate {reader.run_id}", unit="step", disable=not progress):
        for tensor, ordered in reader.index_sets(step).items():
            for n in (k for k in worker_counts(len(ordered)) if k <= max_workers):
                info = tensors[tensor]
                shape = info["shape"]
                width = shape[1] if info["kind"] == "natural" and len(shape) == 2 else 0
                rows += evaluate_step(
                    tensor, info["kind"], step, int(info["numel"]), ordered[:n], topos, names, width=width
                )
    if not rows:
        raise ValueError(f"run {reader.run_id}: nothing to evaluate (no captured step with 2 or more workers)")
    df = pd.DataFrame(rows)
    write_table(out, df, stamp)
    df.attrs.update(run_id=reader.run_id, path=out, missing=reader.missing_note())
    return df


def relative_to_allreduce(df: pd.DataFrame, *, topology: str = "paper-tcp25") -> pd.DataFrame:
    """Rows of one topology with ``normalized`` = seconds / dense all-reduce seconds of the same configuration.

    A configuration is (run, tensor, step, n) when several runs are concatenated (``evaluate_runs``), so two
    runs with the same tensor names never match each other's baseline.
    """
    d = df[df["topology"] == topology]
    keys = [k for k in ("run", "tensor", "step", "n") if k in d.columns]
    base = d[d["scheme"] == "allreduce"].set_index(keys)["seconds"].rename("allreduce_s")
    d = d.join(base, on=keys)
    return d.assign(normalized=d["seconds"] / d["allreduce_s"])


def normalized(df: pd.DataFrame, *, topology: str = "paper-tcp25") -> pd.DataFrame:
    """Mean modelled time / dense all-reduce per (kind, n) x scheme on one topology (the Fig. 8 numbers)."""
    d = relative_to_allreduce(df, topology=topology)
    return d.groupby(["kind", "n", "scheme"])["normalized"].mean().unstack("scheme")


def speedups(df: pd.DataFrame, *, topology: str = "paper-tcp25", n: int = 128) -> pd.DataFrame:
    """Fig. 15 numbers: modelled all-reduce time / scheme time per (workload, scheme), at n workers (or each
    workload's largest n below it), median over captured steps and tensors of the workload."""
    d = relative_to_allreduce(df, topology=topology)
    label = "workload" if "workload" in d.columns else "tensor"
    d = d[d["n"] <= n]
    d = d[d["n"] == d.groupby(label)["n"].transform("max")]
    out = (
        d.assign(speedup=d["allreduce_s"] / d["seconds"])
        .groupby([label, "n", "scheme"], as_index=False)["speedup"]
        .median()
    )
    return out.rename(columns={label: "workload"})


def evaluate_runs(runs: Sequence[str | Path], **kwargs) -> pd.DataFrame:
    """``evaluate`` of several runs, concatenated, with ``run`` and ``workload`` columns (figure labels)."""
    from zen_analysis.sparsity.workloads import workload_labels

    frames = []
    for run in runs:
        reader = TraceReader(run)
        df = evaluate(run, **kwargs)
        frames.append(df.assign(run=reader.run_id, workload=df["tensor"].map(workload_labels(reader))))
    return pd.concat(frames, ignore_index=True)


def step_index_sets(run: str | Path, *, tensor: str | None = None, step: int | None = None, num_workers: int = 4):
    """(index sets of the first ``num_workers`` workers, numel) of one captured tensor and step (default: the
    run's natural tensor at its first captured step) — what a measured replay feeds to ``compare``."""
    reader = TraceReader(run)
    tensors = reader.manifest["tensors"]
    tensor = tensor or next((t for t, i in tensors.items() if i["kind"] == "natural"), next(iter(tensors)))
    step = reader.steps(tensor)[0] if step is None else step
    recs = sorted(reader.records(tensor=tensor, step=step, with_values=False), key=lambda r: r.worker)[:num_workers]
    return [r.indices_K.long() for r in recs], int(tensors[tensor]["numel"])


def wire_size_table(
    *,
    numel: int = 1 << 20,
    num_partitions: int = 16,
    densities: Sequence[float] = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 0.5, 0.7, 0.95),
    skews: dict[str, float] | None = None,
    runs: Sequence[str | Path] = (),
) -> pd.DataFrame:
    """Fig. 17a numbers: :func:`~zen_analysis.pricing.formats.wire_sizes` / dense for aggregated index sets of
    each density (generated, one curve per skew), plus one point per captured tensor of ``runs`` (the union
    of its first ``num_partitions`` workers at the first captured step, ``source`` "captured: <workload>")."""
    from zen_analysis.pricing.formats import wire_sizes
    from zen_analysis.sparsity.synthetic import synthetic_index_sets
    from zen_analysis.sparsity.workloads import workload_labels

    rows = []

    def add(idx: torch.Tensor, n_el: int, source: str) -> None:
        for fmt, nbytes in wire_sizes(idx, n_el, num_partitions=num_partitions).items():
            rows.append(
                {
                    "density": idx.numel() / n_el,
                    "format": fmt,
                    "relative": nbytes / (4 * n_el),
                    "source": source,
                    "num_partitions": num_partitions,
                }
            )

    for label, skew in (skews or {"uniform": 0.0, "skewed (skew 2)": 2.0}).items():
        for d in densities:
            add(synthetic_index_sets(numel, 1, d, skew=skew, seed=17)[0], numel, label)
    for run in runs:
        reader = TraceReader(run)
        labels = workload_labels(reader)
        step = reader.steps()[0]
        for tensor, ordered in reader.index_sets(step).items():
            sets = ordered[:num_partitions]
            n_el = int(reader.manifest["tensors"][tensor]["numel"])
            add(union_of(sets, n_el), n_el, f"captured: {labels.get(tensor, tensor)}")
    return pd.DataFrame(rows)


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
    """Where a scheme sweep (:func:`zen_analysis.experiments.lab_sweeps.scheme_sweep`) puts the crossover: the link rate
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
    from zen_analysis.evaluation.calibrate import netlab, netlab_calibration_path, netlab_host_calibration_path
    from zen_analysis.pricing.topology import load

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
    and another scheme's fitted costs do not stand in (AGsparse's row costs priced it 4-8x over a measured loopback
    run), so on a calibrated topology, where Zen's local work is priced, this flatters stock DDP."""
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
    from zen_analysis.comm.schemes import build_scheme

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
