"""Rank side of the scheme evaluation: replay index sets through every scheme on real gloo ranks and set the
measurement beside the model.

``compare(index_sets, numel)`` forks one rank per set, fills each rank's tensor with integer values on its
set (or replays given values), runs every scheme (2 warm-up runs, then repeats), checks the result against
``all_reduce``, and returns one row per (scheme, phase): bytes modelled / bytes sent (summed over ranks,
payload and control) and whether they are equal, wire seconds modelled (alpha-beta on this machine calibrated
at the same rank count) / measured (slowest rank of each repeat, sync before each collective; mean over
repeats, the median beside it) and their ratio, plus the whole phase's wall time (local encode/decode
included, median).

Why the mean: on a shared CPU a gloo call takes either ~0.3 ms or a 4 ms scheduler tick longer; the mean is
what adds up over a scheme's calls the way the model's calls x alpha does (the calibration uses it too).

``replay_run`` feeds it a run's captured per-worker tensors (``zen-analysis bench-comm <run> --ranks 4``);
``replay_synthetic`` generated sets with a chosen density, skew and overlap (``--synthetic``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

if TYPE_CHECKING:
    from zen_analysis.comm.topology import Topology


def model_topology(ranks: int, *, bandwidth_gbps: float | None = None, recalibrate: bool = False) -> Topology:
    """What the replay's measurement is set beside: this machine calibrated at ``ranks`` ranks on loopback, or
    inside the emulated network when the ranks run behind ``bandwidth_gbps`` links (re-fitted first with
    ``recalibrate``)."""
    from zen_analysis.comm.topology import local, netlab

    if bandwidth_gbps:
        return netlab(ranks, bandwidth_gbps, recalibrate=recalibrate)
    return local(ranks, recalibrate=recalibrate)


def _replay(rank: int, world: int, sets: list, values: list | None, numel: int, repeats: int, names: list[str],
            end_to_end: bool = True) -> list:  # fmt: skip
    import torch.distributed as dist

    from zen_analysis.comm import build_scheme

    gen = torch.Generator().manual_seed(rank)
    x = torch.zeros(numel)
    idx = torch.as_tensor(sets[rank], dtype=torch.long)
    if values is None:  # integer-valued: every scheme must match all_reduce bit for bit
        x[idx] = torch.randint(1, 5, (idx.numel(),), generator=gen).float()
    else:
        x[idx] = torch.as_tensor(values[rank], dtype=torch.float32)
    ref = x.clone()
    dist.all_reduce(ref)
    tol = 1e-5 * float(ref.abs().max()) if ref.numel() else 0.0  # summation order differs between schemes
    rows = []
    for name in names:
        scheme = build_scheme(name)
        scheme.sync_collectives = True
        for rep in range(repeats + 2):  # 2 warm-up runs
            out = scheme.run(x.clone())  # in place: the copy (made before the timed phases) holds the sum
            if rep < 2:
                continue
            m = scheme.last_measured()
            lossless = bool(torch.equal(out, ref)) if values is None else bool(((out - ref).abs() <= tol).all())
            for phase, g in m.groupby("phase"):
                rows.append({
                    "scheme": name, "rep": rep, "phase": phase, "rank": rank,
                    "bytes_sent": int(g["bytes_sent"].sum()), "phase_s": float(g["seconds"].sum()),
                    "wire_s": float(g["wire_seconds"].sum()), "lossless": lossless,
                })  # fmt: skip
            if scheme.scans_dense:  # the rank's own work: run time outside collectives and barriers
                local = scheme.last_times()["local"]
                rows.append({"scheme": name, "rep": rep, "phase": "local", "rank": rank, "bytes_sent": 0,
                             "phase_s": local, "wire_s": local, "lossless": lossless})  # fmt: skip
        # end to end, as training runs it: no sync before each collective, ranks aligned by a barrier only
        scheme.sync_collectives = False
        for rep in range(repeats if end_to_end else 0):
            y = x.clone()
            dist.barrier()
            t0 = time.perf_counter()
            out = scheme.run(y)
            seconds = time.perf_counter() - t0
            lossless = bool(torch.equal(out, ref)) if values is None else bool(((out - ref).abs() <= tol).all())
            rows.append({"scheme": name, "rep": rep, "phase": "total", "rank": rank, "bytes_sent": 0,
                         "phase_s": seconds, "wire_s": seconds, "lossless": lossless})  # fmt: skip
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
) -> pd.DataFrame:
    """Measured side only: one row per (scheme, phase) with bytes sent (summed over ranks; per rank in
    ``bytes_by_rank``), wire seconds (mean and median over repeats of the slowest rank), whole-phase seconds and
    the lossless check, one rank per index set. Phase ``local`` is each scheme's own work (run time outside
    collective calls and barriers; no bytes), phase ``total`` a whole run end to end as training runs it (no
    sync before each collective; ranks aligned by a barrier before each repeat), their seconds in the wire
    columns (``end_to_end=False`` skips those repeats). ``bandwidth_gbps``: the ranks run in the emulated
    network (:class:`~zen_analysis.dist.netlab.NetLab`), each behind a link of that rate."""
    from zen_analysis.comm import SCHEMES
    from zen_analysis.dist.launch import fork_launch

    world = len(index_sets)
    names = list(schemes or SCHEMES)
    sets = [torch.as_tensor(s, dtype=torch.long) for s in index_sets]
    vals = None if values is None else [torch.as_tensor(v, dtype=torch.float32) for v in values]
    if bandwidth_gbps:  # every rank behind its own shaped link (the emulated network)
        from zen_analysis.dist.netlab import NetLab

        with NetLab(world, bandwidth_gbps) as lab:
            results = fork_launch(_replay, world, sets, vals, numel, repeats, names, end_to_end, lab=lab, timeout_s=600)
    else:
        results = fork_launch(_replay, world, sets, vals, numel, repeats, names, end_to_end)
    raw = pd.DataFrame([r for rows in results for r in rows])
    per_rep = raw.groupby(["scheme", "phase", "rep"]).agg(
        bytes_sent=("bytes_sent", "sum"), wire_s=("wire_s", "max"), phase_s=("phase_s", "max"), lossless=("lossless", "all")
    )
    out = per_rep.groupby(["scheme", "phase"]).agg(
        bytes_sent=("bytes_sent", "first"), wire_s=("wire_s", "mean"), wire_median_s=("wire_s", "median"),
        phase_s=("phase_s", "median"), lossless=("lossless", "all"),
    )  # fmt: skip
    first = raw[raw["rep"] == raw.groupby(["scheme", "phase"])["rep"].transform("min")].sort_values("rank")
    out["bytes_by_rank"] = first.groupby(["scheme", "phase"])["bytes_sent"].agg(list)
    return out


def compare(
    index_sets: Sequence[torch.Tensor],
    numel: int,
    *,
    values: Sequence[torch.Tensor] | None = None,
    repeats: int = 5,
    topology=None,
    schemes: Sequence[str] | None = None,
    bandwidth_gbps: float | None = None,
) -> pd.DataFrame:
    """Measured vs modelled bytes and time per (scheme, phase) for one rank per index set; phase ``local`` is
    the ranks' own work (no bytes), modelled by the topology's fitted local costs.

    ``values`` (one tensor per set, aligned with its sorted indices) replays real gradient values, checked
    against ``all_reduce`` up to summation order; without them each rank holds integers, checked bit for bit.
    The model runs on ``topology``, by default this machine calibrated at the same number of ranks (behind
    ``bandwidth_gbps`` links when the ranks run in the emulated network: :func:`~zen_analysis.comm.topology.netlab`).
    """
    from zen_analysis.comm import build_scheme

    topo = topology or model_topology(len(index_sets), bandwidth_gbps=bandwidth_gbps)
    measured = measure(index_sets, numel, values=values, repeats=repeats, schemes=schemes, bandwidth_gbps=bandwidth_gbps)
    out = []
    for (name, phase), m in measured.iterrows():
        scheme = build_scheme(name)
        traffic = scheme.traffic(index_sets, numel)
        times = scheme.time(index_sets, numel, topo).set_index("phase")["seconds"]
        if phase == "total":  # the whole run: every phase and the local work (its bytes are counted per phase)
            model_bytes, model_s = 0, float(times.sum())
        else:
            model_bytes = int(traffic.query("phase == @phase")["bytes_sent"].sum())
            model_s = float(times.get(phase, 0.0))  # "local" is 0 on a topology without local-work costs
        out.append({
            "scheme": name, "phase": phase, "bytes_model": model_bytes, "bytes_sent": int(m["bytes_sent"]),
            "bytes_equal": model_bytes == int(m["bytes_sent"]), "lossless": bool(m["lossless"]),
            "wire_model_s": model_s, "wire_measured_s": float(m["wire_s"]), "ratio": model_s / float(m["wire_s"]),
            "wire_measured_median_s": float(m["wire_median_s"]), "phase_measured_s": float(m["phase_s"]),
            "bytes_by_rank": [int(b) for b in m["bytes_by_rank"]],
        })  # fmt: skip
    return pd.DataFrame(out)


def calibrate_from_schemes(
    num_ranks: int = 4,
    *,
    numel: int | Sequence[int] = (1_000_000, 4_000_000),
    densities: Sequence[float] = (0.004, 0.015, 0.06),
    repeats: int = 10,
    seed: int = 1000,
    bandwidth_gbps: float | None = None,
) -> Topology:
    """Fit each primitive's alpha and bandwidth from the schemes themselves, run on synthetic index sets
    (skew 1, overlap 0.3, three densities) — so per-call costs that only show inside a scheme's call sequence
    (waking ranks that idled through local work, scheduler ticks on a shared CPU) are in alpha. For every
    measured (scheme, phase) the model's slowest-rank calls and bytes (:func:`~zen_analysis.comm.cost.phase_features`)
    are regressed on its mean wire time, per primitive, on relative error. The fit never sees the workload
    it is later checked on (captured traces). The same runs fit each scheme's local-work costs
    (:func:`~zen_analysis.comm.topology.fit_local_work`: per dense element scanned, byte moved, non-zero
    written) on what a whole run takes end to end (median of the slowest rank, no sync between collectives)
    beyond its modelled wire time — not on the local time of the synced runs, which on a shared CPU counts the
    ranks' contention after every barrier (4 ranks woken together on 2 cores) and priced SparCML's local work
    1.6x too high end to end; two tensor sizes (``numel``) separate the per-element scan from the per-non-zero
    work. Saved as ``local-<n>.json`` with ``method: schemes``.

    ``bandwidth_gbps``: the same inside the emulated network, each rank behind a link of that rate; the
    bandwidth is then the link's (TCP payload of the configured rate), only alpha is fitted; saved as
    ``netlab-<n>.json``, named ``netlab-<B>``."""
    from zen_analysis.atomic import atomic_write_json
    from zen_analysis.comm import SCHEMES, build_scheme
    from zen_analysis.comm.cost import phase_features
    from zen_analysis.comm.topology import GBPS, calibration_path, fit_links, fit_local_work, netlab_calibration_path
    from zen_analysis.dist.netlab import TCP_PAYLOAD_FRACTION
    from zen_analysis.sparsity.synthetic import synthetic_index_sets

    rows, local_rows, cases = [], [], []
    sizes = [numel] if isinstance(numel, int) else list(numel)
    for j, size in enumerate(sizes):
        for i, d in enumerate(densities):
            sets = synthetic_index_sets(size, num_ranks, d, skew=1.0, overlap=0.3, seed=seed + i + 100 * j)
            measured = measure(sets, size, repeats=repeats, bandwidth_gbps=bandwidth_gbps)
            cases.append((size, d, sets, measured))
            for name in SCHEMES:
                feats = phase_features(build_scheme(name).model(sets, size)).set_index("phase")
                for phase, f in feats.iterrows():
                    rows.append({"numel": size, "density": d, "scheme": name, "phase": phase, **f.to_dict(),
                                 "seconds": float(measured.loc[(name, phase), "wire_s"])})  # fmt: skip
    df = pd.DataFrame(rows)
    fits = fit_links(df, bandwidth=bandwidth_gbps * GBPS * TCP_PAYLOAD_FRACTION if bandwidth_gbps else None)
    from zen_analysis.comm.topology import Topology

    a2a = {p: (a, b) for p, a, b in fits}.get("all_to_all", (0.0, 1e9))
    name = f"netlab-{bandwidth_gbps:g}" if bandwidth_gbps else f"local-{num_ranks}"
    path = netlab_calibration_path(num_ranks) if bandwidth_gbps else calibration_path(num_ranks)
    topo = Topology(name=name, gpus_per_node=1 << 20, intra_alpha_s=a2a[0], intra_bandwidth=a2a[1],
                    inter_alpha_s=a2a[0], inter_bandwidth=a2a[1], num_ranks=num_ranks, calibrated=tuple(fits))  # fmt: skip
    for size, d, sets, measured in cases:  # local work: what a whole run takes beyond its modelled wire time
        for name_ in SCHEMES:
            scheme = build_scheme(name_)
            model = scheme.model(sets, size)
            if not model.work:
                continue
            wire = float(scheme.time(sets, size, topo)["seconds"].sum())
            r = int(model.work["bytes"].argmax())  # the rank with the most bytes stands for the slowest one
            local_rows.append({"numel": size, "density": d, "scheme": name_, **{f: float(v[r]) for f, v in model.work.items()},
                               "seconds": float(measured.loc[(name_, "total"), "wire_median_s"]) - wire,
                               "synced_local_s": float(measured.loc[(name_, "local"), "wire_s"])})  # fmt: skip
    local_df = pd.DataFrame(local_rows)
    topo = replace(topo, local_work=fit_local_work(local_df) if len(local_df) else ())
    atomic_write_json(path, {**topo.to_dict(), "method": "schemes", "samples": df.to_dict(orient="records"),
                                                     "local_samples": local_df.to_dict(orient="records")})  # fmt: skip
    return topo


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per scheme (phases summed, then the median over steps): bytes modelled / sent (over ranks) / equal, the
    most one rank sent (``bytes_sent_max_rank``), lossless, wire seconds modelled / measured (mean and median
    over repeats) and modelled / measured (``ratio``); the local work modelled / measured (``local_*``, 0 where
    none was measured) and wire plus local modelled / measured (``total_ratio``); and the whole run end to end
    (``measured_s_median``: median over repeats of the slowest rank, no sync between collectives; ``modelled_s``:
    every phase and the local work), where measured."""
    keys = ["scheme"] + (["step"] if "step" in df.columns else [])
    is_local, is_total = df["phase"] == "local", df["phase"] == "total"
    local = df[is_local].groupby(keys).agg(local_model_s=("wire_model_s", "sum"), local_measured_s=("wire_measured_s", "sum"))
    total = df[is_total].groupby(keys).agg(modelled_s=("wire_model_s", "sum"), measured_s_median=("wire_measured_median_s", "sum"))
    df = df[~is_local & ~is_total]
    per_step = df.groupby(keys).agg(
        bytes_model=("bytes_model", "sum"), bytes_sent=("bytes_sent", "sum"), bytes_equal=("bytes_equal", "all"),
        lossless=("lossless", "all"), wire_model_s=("wire_model_s", "sum"), wire_measured_s=("wire_measured_s", "sum"),
        wire_measured_median_s=("wire_measured_median_s", "sum"), phase_measured_s=("phase_measured_s", "sum"),
    )  # fmt: skip
    if "bytes_by_rank" in df.columns:
        per_rank = df.groupby(keys)["bytes_by_rank"].agg(lambda col: int(np.sum(np.stack([np.asarray(b) for b in col]), axis=0).max()))
        per_step["bytes_sent_max_rank"] = per_rank
    per_step = per_step.join(local).fillna({"local_model_s": 0.0, "local_measured_s": 0.0}).join(total)
    per_step["ratio"] = per_step["wire_model_s"] / per_step["wire_measured_s"]
    per_step["total_ratio"] = (per_step["wire_model_s"] + per_step["local_model_s"]) / (
        per_step["wire_measured_s"] + per_step["local_measured_s"]
    )
    cols = [c for c in per_step.columns if c not in ("bytes_equal", "lossless")]
    out = per_step.groupby("scheme")[cols].median()
    out[["bytes_equal", "lossless"]] = per_step.groupby("scheme")[["bytes_equal", "lossless"]].all()
    end_to_end = "measured_s_median" in out and out["measured_s_median"].notna().all()
    return out.sort_values("measured_s_median" if end_to_end else "wire_measured_s")


SUMMARY_COLUMNS = ["scheme", "ranks", "bandwidth_gbps", "numel", "bytes_sent_max_rank", "measured_s_median", "modelled_s", "lossless"]
"""What ``bench-comm --out`` writes first (the rest of :func:`summarize`'s columns follow)."""


def write_summary(df: pd.DataFrame, path, **attrs) -> pd.DataFrame:
    """The per-scheme summary of a replay (:func:`summarize` of ``df``, the ranks, bandwidth and numel of its
    rows) written to ``path`` as Parquet, :data:`SUMMARY_COLUMNS` first; returns the table. ``attrs`` are
    stored in the file's metadata."""
    from zen_analysis.derived import write_table

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


def replay_run(
    run,
    *,
    ranks: int = 4,
    steps: int = 3,
    tensor: str | None = None,
    repeats: int = 25,
    schemes: Sequence[str] | None = None,
    recalibrate: bool = False,
    progress: bool = True,
    bandwidth_gbps: float | None = None,
) -> pd.DataFrame:
    """``compare`` on a run's captured tensors: rank r holds worker r's captured gradient (indices and real
    values) of ``tensor`` (default: the natural one) at each of the first ``steps`` captured steps. Writes
    ``data/derived/<run>/bench_comm.parquet`` (``bench_comm-<hash>.parquet`` for other ranks, steps, tensor,
    schemes or repeats than the defaults) and returns it (one row per step, scheme and phase)."""
    from tqdm.auto import tqdm

    from zen_analysis.capture.traces import TraceReader
    from zen_analysis.comm import SCHEMES
    from zen_analysis.derived import variant, write_table

    reader = TraceReader(run)
    tensors = reader.manifest["tensors"]
    if not tensors:
        raise ValueError(f"run {reader.run_id} captured no tensor")
    default_tensor = next((t for t, i in tensors.items() if i["kind"] == "natural"), next(iter(tensors)))
    unknown = sorted(set(schemes or ()) - set(SCHEMES))
    if unknown:
        raise ValueError(f"unknown schemes {unknown}; choose from {sorted(SCHEMES)}")
    if ranks < 2 or steps < 1 or repeats < 1:
        raise ValueError(f"need ranks >= 2, steps >= 1 and repeats >= 1, got {ranks}, {steps}, {repeats}")
    options = {"ranks": ranks, "steps": steps, "tensor": tensor or default_tensor, "schemes": sorted(schemes or SCHEMES),
               "repeats": repeats, "bandwidth_gbps": bandwidth_gbps}  # fmt: skip
    defaults = {"ranks": 4, "steps": 3, "tensor": default_tensor, "schemes": sorted(SCHEMES), "repeats": 25,
                "bandwidth_gbps": None}  # fmt: skip
    tensor = options["tensor"]
    if tensor not in tensors:
        raise ValueError(f"run {reader.run_id} has no captured tensor {tensor!r}; it has {sorted(tensors)}")
    numel = int(tensors[tensor]["numel"])
    if reader.manifest.get("num_workers", ranks) < ranks:
        raise ValueError(f"run {reader.run_id} has {reader.manifest['num_workers']} workers; cannot replay on {ranks} ranks")
    topo = model_topology(ranks, bandwidth_gbps=bandwidth_gbps, recalibrate=recalibrate)
    frames = []
    for step in tqdm(reader.steps()[:steps], desc=f"bench-comm {reader.run_id}", unit="step", disable=not progress):
        recs = sorted(reader.records(tensor=tensor, step=step), key=lambda r: r.worker)[:ranks]
        df = compare([r.indices_K.long() for r in recs], numel, values=[r.values_K for r in recs],
                     repeats=repeats, topology=topo, schemes=schemes, bandwidth_gbps=bandwidth_gbps)  # fmt: skip
        frames.append(df.assign(run=reader.run_id, tensor=tensor, step=step, numel=numel, ranks=ranks,
                                bandwidth_gbps=bandwidth_gbps or float("nan")))  # fmt: skip
    out = pd.concat(frames, ignore_index=True)
    path = reader.derived_dir / f"{variant('bench_comm', options, defaults)}.parquet"
    write_table(path, out, {**options, "files": reader.fingerprint()})
    out.attrs["path"] = path
    return out


def load_replay(run) -> pd.DataFrame | None:
    """The measured replay of ``run`` a figure should show: the default options' ``bench_comm.parquet`` if it
    exists, else the newest ``bench_comm-<hash>.parquet`` (its options in ``df.attrs["stamp"]``); None if the run
    was never replayed."""
    from zen_analysis.capture.traces import TraceReader
    from zen_analysis.derived import read_stamp, read_table

    folder = TraceReader(run).derived_dir
    default = folder / "bench_comm.parquet"
    found = [default] if default.exists() else sorted(folder.glob("bench_comm-*.parquet"), key=lambda p: p.stat().st_mtime)[-1:]
    if not found:
        return None
    df = read_table(found[0])
    df.attrs.update(path=found[0], stamp=read_stamp(found[0]))
    return df


def replay_synthetic(
    *,
    numel: int = 2_000_000,
    density: float = 0.025,
    skew: float = 1.0,
    overlap: float = 0.3,
    ranks: int = 4,
    repeats: int = 25,
    seed: int = 0,
    schemes: Sequence[str] | None = None,
    recalibrate: bool = False,
    bandwidth_gbps: float | None = None,
) -> tuple[pd.DataFrame, dict]:
    """``compare`` on synthetic index sets (:func:`zen_analysis.sparsity.synthetic.synthetic_index_sets`) with
    integer values (bit-for-bit check); returns the table and the sets' measured characteristics."""
    from zen_analysis.sparsity.synthetic import describe, synthetic_index_sets

    sets = synthetic_index_sets(numel, ranks, density, skew=skew, overlap=overlap, seed=seed)
    stats = describe(sets, numel)
    topo = model_topology(ranks, bandwidth_gbps=bandwidth_gbps, recalibrate=recalibrate)
    df = compare(sets, numel, repeats=repeats, topology=topo, schemes=schemes, bandwidth_gbps=bandwidth_gbps)
    return df.assign(numel=numel, ranks=ranks, skew=skew, overlap=overlap, bandwidth_gbps=bandwidth_gbps or float("nan")), stats


def report(summary: pd.DataFrame) -> str:
    """The two lines per scheme the notebook and the CLI print."""
    lines = []
    for name, r in summary.iterrows():
        lines.append(
            f"{name:>10}: bytes modelled {int(r['bytes_model']):>10,} / sent {int(r['bytes_sent']):>10,} / "
            f"equal {bool(r['bytes_equal'])!s:>5}; lossless {bool(r['lossless'])}\n"
            f"{'':>10}  time modelled {1e3 * r['wire_model_s']:7.2f} ms / measured {1e3 * r['wire_measured_s']:7.2f} ms "
            f"(median {1e3 * r['wire_measured_median_s']:.2f}) / ratio {r['ratio']:.2f}; whole phases {1e3 * r['phase_measured_s']:.2f} ms\n"
            f"{'':>10}  local work modelled {1e3 * r['local_model_s']:7.2f} ms / measured {1e3 * r['local_measured_s']:7.2f} ms; "
            f"wire + local modelled / measured {r['total_ratio']:.2f}"
            + (f"\n{'':>10}  end to end modelled {1e3 * r['modelled_s']:7.2f} ms / measured {1e3 * r['measured_s_median']:7.2f} ms "
               f"(median, slowest rank) / ratio {r['modelled_s'] / r['measured_s_median']:.2f}"
               if pd.notna(r.get("measured_s_median", float("nan"))) else "")
        )
    return "\n".join(lines)
