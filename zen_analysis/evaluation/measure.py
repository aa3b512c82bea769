"""The instrument of the scheme evaluation: run every scheme on real gloo ranks, one rank per index set, and
measure what it does.

``measure(index_sets, numel)`` forks one rank per set, fills each rank's tensor with integer values on its set (or
replays given values), runs every scheme (2 warm-up runs, then repeats), checks the result against ``all_reduce``,
and returns one row per (scheme, phase): bytes sent (summed over ranks, payload and control), wire seconds (slowest
rank of each repeat, sync before each collective; mean over repeats, the median beside it), the whole phase's wall
time (local encode/decode included, median) and the lossless check. :mod:`zen_analysis.evaluation.replay` sets it beside
the model, :mod:`zen_analysis.evaluation.calibrate` fits the model to it.

Why the mean: on a shared CPU a gloo call sometimes waits a whole scheduler tick longer (the numbers:
``docs/results/bench/comm.md``); the mean is what adds up over a scheme's calls the way the
model's calls x alpha does (the calibration uses it too).

Shape suffixes: U rows of the sum (the union of the ranks' rows), D values per row (the table's width).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from zen_analysis.comm import SCHEMES
from zen_analysis.comm.planner import make_scheme
from zen_analysis.derived import write_table
from zen_analysis.ranks.netlab import NetLab
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.wire.inflight import hold

__all__ = ["measure", "report", "summarize"]


def _measure_on_rank(
    rank: int,
    world: int,
    sets: list,
    values: list | None,
    numel: int,
    repeats: int,
    names: list[str],
    end_to_end: bool = True,
    planner_topology=None,
    width: int = 0,
) -> list:
    gen = torch.Generator().manual_seed(rank)
    x = torch.zeros(numel, width) if width else torch.zeros(numel)
    idx = torch.as_tensor(sets[rank], dtype=torch.long)
    if values is None:  # integer-valued: every scheme must match all_reduce bit for bit
        x[idx] = torch.randint(1, 5, (idx.numel(), *x.shape[1:]), generator=gen).float()
    else:
        x[idx] = torch.as_tensor(values[rank], dtype=torch.float32)
    ref = x.clone()
    hold(ref)
    dist.all_reduce(ref)
    tol = 1e-5 * float(ref.abs().max()) if ref.numel() else 0.0  # summation order differs between schemes
    held = x[idx].clone()

    def run(scheme):  # the sum as training runs it: in place by elements, by rows the (rows, values) of the union
        if not width:
            return scheme.run(x.clone())  # in place: the copy (made before the timed phases) holds the sum
        rows_U, values_UD = scheme.sum_rows(idx, held, numel)
        out = torch.zeros_like(x)
        out[rows_U] = values_UD
        return out

    rows = []
    schemes = {}
    for name in names:
        scheme = schemes[name] = make_scheme(name, topology=planner_topology)
        scheme.sync_collectives = True
        for rep in range(repeats + 2):  # 2 warm-up runs
            out = run(scheme)
            if rep < 2:
                continue
            m = scheme.last_measured()
            lossless = bool(torch.equal(out, ref)) if values is None else bool(((out - ref).abs() <= tol).all())
            rows.extend(_phase_rows(scheme, m, name=name, rep=rep, rank=rank, lossless=lossless))
        scheme.sync_collectives = False
    # end to end, as training runs it: no sync before each collective, ranks aligned by a barrier only; the
    # schemes take turns within each repeat, so a drift of the machine's speed (it moves within minutes on a
    # shared CPU) falls on all of them alike instead of on whichever ran last
    for rep in range(repeats if end_to_end else 0):
        for name, scheme in schemes.items():
            y = x.clone()
            dist.barrier()
            t0 = time.perf_counter()
            out = scheme.run(y) if not width else scheme.sum_rows(idx, held, numel)
            seconds = time.perf_counter() - t0
            if width:
                out = torch.zeros_like(x).index_put_((out[0],), out[1])
            lossless = bool(torch.equal(out, ref)) if values is None else bool(((out - ref).abs() <= tol).all())
            rows.append(
                {
                    "scheme": name,
                    "rep": rep,
                    "phase": "total",
                    "rank": rank,
                    "bytes_sent": 0,
                    "phase_s": seconds,
                    "wire_s": seconds,
                    "lossless": lossless,
                }
            )
    return rows


def _phase_rows(scheme, m: pd.DataFrame, *, name: str, rep: int, rank: int, lossless: bool) -> list[dict]:
    """One synced repeat's rows: per phase of ``m`` (the scheme's ``last_measured()``) its bytes, seconds and wire
    seconds, and for a scheme that scans the dense tensor a ``local`` row (run time outside collectives and
    barriers: the rank's own work)."""
    rows = []
    for phase, g in m.groupby("phase"):
        rows.append(
            {
                "scheme": name,
                "rep": rep,
                "phase": phase,
                "rank": rank,
                "bytes_sent": int(g["bytes_sent"].sum()),
                "phase_s": float(g["seconds"].sum()),
                "wire_s": float(g["wire_seconds"].sum()),
                "lossless": lossless,
            }
        )
    if scheme.scans_dense:
        local = scheme.last_times()["local"]
        rows.append(
            {
                "scheme": name,
                "rep": rep,
                "phase": "local",
                "rank": rank,
                "bytes_sent": 0,
                "phase_s": local,
                "wire_s": local,
                "lossless": lossless,
            }
        )
    return rows


def measure(
    index_sets: Sequence[torch.Tensor],
    numel: int,
    *,
    values: Sequence[torch.Tensor] | None = None,
    repeats: int = 5,
    schemes: Sequence[str] | None = None,
    bandwidth_gbps: float | None = None,
    end_to_end: bool = True,
    planner_topology=None,
    width: int = 0,
) -> pd.DataFrame:
    """Measured side only: one row per (scheme, phase) with bytes sent (summed over ranks; per rank in
    ``bytes_by_rank``), wire seconds (mean and median over repeats of the slowest rank), whole-phase seconds and
    the lossless check, one rank per index set. Phase ``local`` is each scheme's own work (run time outside
    collective calls and barriers; no bytes), phase ``total`` a whole run end to end as training runs it (no
    sync before each collective; ranks aligned by a barrier before each repeat; the schemes take turns within
    each repeat, so drift of the machine's speed falls on all of them alike), their seconds in the wire
    columns (``end_to_end=False`` skips those repeats). ``bandwidth_gbps``: the ranks run in the emulated
    network (:class:`~zen_analysis.ranks.netlab.NetLab`), each behind a link of that rate. ``schemes`` may name
    ``auto`` (:class:`~zen_analysis.comm.planner.AutoScheme`: the planner, pricing on ``planner_topology``, decides
    in the first warm-up run and every timed run sums with its choice). ``width`` > 0: row-granular sums
    (:meth:`~zen_analysis.comm.schemes.base.CommScheme.sum_rows`) of a ``numel`` x ``width`` table, the index sets
    its rows, each rank passing its rows and their values (checked against ``all_reduce`` of the dense tables)."""
    if width and values is not None:
        raise ValueError("measure by rows fills integer values itself: pass values=None with width")
    world = len(index_sets)
    names = list(schemes or SCHEMES)
    sets = [torch.as_tensor(s, dtype=torch.long) for s in index_sets]
    vals = None if values is None else [torch.as_tensor(v, dtype=torch.float32) for v in values]
    if bandwidth_gbps:  # every rank behind its own shaped link (the emulated network)
        with NetLab(world, bandwidth_gbps) as lab:
            results = fork_launch(
                _measure_on_rank,
                world,
                sets,
                vals,
                numel,
                repeats,
                names,
                end_to_end,
                planner_topology,
                width,
                lab=lab,
                timeout_s=600,
            )
    else:
        results = fork_launch(
            _measure_on_rank, world, sets, vals, numel, repeats, names, end_to_end, planner_topology, width
        )
    raw = pd.DataFrame([r for rows in results for r in rows])
    per_rep = raw.groupby(["scheme", "phase", "rep"]).agg(
        bytes_sent=("bytes_sent", "sum"),
        wire_s=("wire_s", "max"),
        phase_s=("phase_s", "max"),
        lossless=("lossless", "all"),
    )
    out = per_rep.groupby(["scheme", "phase"]).agg(
        bytes_sent=("bytes_sent", "first"),
        wire_s=("wire_s", "mean"),
        wire_median_s=("wire_s", "median"),
        phase_s=("phase_s", "median"),
        lossless=("lossless", "all"),
    )
    first = raw[raw["rep"] == raw.groupby(["scheme", "phase"])["rep"].transform("min")].sort_values("rank")
    out["bytes_by_rank"] = first.groupby(["scheme", "phase"])["bytes_sent"].agg(list)
    return out


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per scheme (phases summed, then the median over steps): bytes modelled / sent (over ranks) / equal, the
    most one rank sent (``bytes_sent_max_rank``), lossless, wire seconds modelled / measured (mean and median
    over repeats) and modelled / measured (``ratio``); the local work modelled / measured (``local_*``, 0 where
    none was measured) and wire plus local modelled / measured (``total_ratio``); and the whole run end to end
    (``measured_s_median``: median over repeats of the slowest rank, no sync between collectives; ``modelled_s``:
    every phase and the local work), where measured."""
    keys = ["scheme"] + (["step"] if "step" in df.columns else [])
    is_local, is_total = df["phase"] == "local", df["phase"] == "total"
    local = (
        df[is_local]
        .groupby(keys)
        .agg(local_model_s=("wire_model_s", "sum"), local_measured_s=("wire_measured_s", "sum"))
    )
    total = (
        df[is_total]
        .groupby(keys)
        .agg(modelled_s=("wire_model_s", "sum"), measured_s_median=("wire_measured_median_s", "sum"))
    )
    df = df[~is_local & ~is_total]
    per_step = df.groupby(keys).agg(
        bytes_model=("bytes_model", "sum"),
        bytes_sent=("bytes_sent", "sum"),
        bytes_equal=("bytes_equal", "all"),
        lossless=("lossless", "all"),
        wire_model_s=("wire_model_s", "sum"),
        wire_measured_s=("wire_measured_s", "sum"),
        wire_measured_median_s=("wire_measured_median_s", "sum"),
        phase_measured_s=("phase_measured_s", "sum"),
    )
    if "bytes_by_rank" in df.columns:
        per_rank = df.groupby(keys)["bytes_by_rank"].agg(
            lambda col: int(np.sum(np.stack([np.asarray(b) for b in col]), axis=0).max())
        )
        per_step["bytes_sent_max_rank"] = per_rank
    per_step = per_step.join(local).fillna({"local_model_s": 0.0, "local_measured_s": 0.0}).join(total)
    per_step["ratio"] = per_step["wire_model_s"] / per_step["wire_measured_s"]
    per_step["total_ratio"] = (per_step["wire_model_s"] + per_step["local_model_s"]) / (
        per_step["wire_measured_s"] + per_step["local_measured_s"]
    )
    cols = [c for c in per_step.columns if c not in ("bytes_equal", "lossless")]
    out = per_step.groupby("scheme")[cols].median()
    out[["bytes_equal", "lossless"]] = per_step.groupby("scheme")[["bytes_equal", "lossless"]].all()
    if "choice" in df.columns:  # auto: what the planner picked (the most frequent over steps)
        out["choice"] = df.groupby("scheme")["choice"].agg(lambda c: c.mode().iloc[0])
    end_to_end = "measured_s_median" in out and out["measured_s_median"].notna().all()
    return out.sort_values("measured_s_median" if end_to_end else "wire_measured_s")


SUMMARY_COLUMNS = [
    "scheme",
    "ranks",
    "bandwidth_gbps",
    "numel",
    "bytes_sent_max_rank",
    "measured_s_median",
    "modelled_s",
    "lossless",
]
"""What ``measure --out`` writes first (the rest of :func:`summarize`'s columns follow)."""


def write_summary(df: pd.DataFrame, path, **attrs) -> pd.DataFrame:
    """The per-scheme summary of a replay (:func:`summarize` of ``df``, the ranks, bandwidth and numel of its
    rows) written to ``path`` as Parquet, :data:`SUMMARY_COLUMNS` first; returns the table. ``attrs`` are
    stored in the file's metadata."""
    out = summarize(df).reset_index()
    for col in ("ranks", "bandwidth_gbps", "numel"):
        out[col] = df[col].iloc[0] if col in df.columns else float("nan")
    for col in ("measured_s_median", "modelled_s", "bytes_sent_max_rank"):
        if col not in out:
            out[col] = float("nan")
    for col in ("bytes_model", "bytes_sent", "bytes_sent_max_rank"):
        out[col] = out[col].round().astype("int64") if out[col].notna().all() else out[col]
    out = out[SUMMARY_COLUMNS + [c for c in out.columns if c not in SUMMARY_COLUMNS]]
    write_table(Path(path), out, attrs)
    return out


def report(summary: pd.DataFrame) -> str:
    """The two lines per scheme the notebook and the CLI print."""
    lines = []
    for name, r in summary.iterrows():
        lines.append(
            f"{name:>10}: bytes modelled {int(r['bytes_model']):>10,} / sent {int(r['bytes_sent']):>10,} / "
            f"equal {bool(r['bytes_equal'])!s:>5}; lossless {bool(r['lossless'])}\n"
            f"{'':>10}  time modelled {1e3 * r['wire_model_s']:7.2f} ms / measured "
            f"{1e3 * r['wire_measured_s']:7.2f} ms "
            f"(median {1e3 * r['wire_measured_median_s']:.2f}) / ratio {r['ratio']:.2f}; whole phases "
            f"{1e3 * r['phase_measured_s']:.2f} ms\n"
            f"{'':>10}  local work modelled {1e3 * r['local_model_s']:7.2f} ms / measured "
            f"{1e3 * r['local_measured_s']:7.2f} ms; "
            f"wire + local modelled / measured {r['total_ratio']:.2f}"
            + (
                f"\n{'':>10}  end to end modelled {1e3 * r['modelled_s']:7.2f} ms / measured "
                f"{1e3 * r['measured_s_median']:7.2f} ms "
                f"(median, slowest rank) / ratio {r['modelled_s'] / r['measured_s_median']:.2f}"
                if pd.notna(r.get("measured_s_median", float("nan")))
                else ""
            )
        )
    return "\n".join(lines)
