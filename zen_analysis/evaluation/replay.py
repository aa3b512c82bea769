"""The measurement set beside the model: replay index sets (a run's captured tensors, or synthetic ones) through
every scheme on real gloo ranks (:func:`zen_analysis.evaluation.measure.measure`) and price the same sets with the
alpha-beta model on this machine's calibration (:mod:`zen_analysis.evaluation.calibrate`).

``compare(index_sets, numel)`` returns one row per (scheme, phase): bytes modelled / bytes sent (summed over
ranks, payload and control) and whether they are equal, the lossless check, wire seconds modelled / measured
(slowest rank of each repeat, mean over repeats, the median beside it) and their ratio. ``replay_run`` feeds it a
run's captured per-worker tensors (``zen-analysis replay <run> --ranks 4``), ``replay_synthetic`` generated
sets with a chosen density, skew and overlap (``--synthetic``).

Shape suffixes: K non-zeros of one captured record.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch
from tqdm.auto import tqdm

from zen_analysis.capture.reader import TraceReader
from zen_analysis.comm import SCHEMES
from zen_analysis.comm.planner import make_scheme
from zen_analysis.derived import read_stamp, read_table, variant, write_table
from zen_analysis.evaluation.calibrate import model_topology
from zen_analysis.evaluation.measure import measure
from zen_analysis.sparsity.synthetic import describe, synthetic_index_sets

__all__ = ["load_replay", "replay_run"]


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
    ``bandwidth_gbps`` links when the ranks run in the emulated network:
    :func:`~zen_analysis.evaluation.calibrate.netlab`).
    """
    topo = topology or model_topology(len(index_sets), bandwidth_gbps=bandwidth_gbps)
    measured = measure(
        index_sets,
        numel,
        values=values,
        repeats=repeats,
        schemes=schemes,
        bandwidth_gbps=bandwidth_gbps,
        planner_topology=topo,
    )
    out, models = [], {}
    for (name, phase), m in measured.iterrows():
        if name not in models:  # each scheme modelled once (auto prices the candidates once: its choice)
            scheme = make_scheme(name, topology=topo)
            choice = scheme.choice_for(index_sets, numel) if name == "auto" else name
            model = make_scheme(choice)
            times = model.time(index_sets, numel, topo).set_index("phase")["seconds"]
            models[name] = (model.traffic(index_sets, numel), times, choice)
        traffic, times, choice = models[name]
        if phase == "total":  # the whole run: every phase and the local work (its bytes are counted per phase)
            model_bytes, model_s = 0, float(times.sum())
        else:
            model_bytes = int(traffic.query("phase == @phase")["bytes_sent"].sum())
            model_s = float(times.get(phase, 0.0))  # "local" is 0 on a topology without local-work costs
        out.append(
            {
                "scheme": name,
                "phase": phase,
                "bytes_model": model_bytes,
                "bytes_sent": int(m["bytes_sent"]),
                "bytes_equal": model_bytes == int(m["bytes_sent"]),
                "lossless": bool(m["lossless"]),
                "wire_model_s": model_s,
                "wire_measured_s": float(m["wire_s"]),
                "ratio": model_s / float(m["wire_s"]),
                "wire_measured_median_s": float(m["wire_median_s"]),
                "phase_measured_s": float(m["phase_s"]),
                "bytes_by_rank": [int(b) for b in m["bytes_by_rank"]],
                "choice": choice,
            }
        )
    return pd.DataFrame(out)


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
    reader = TraceReader(run)
    tensors = reader.manifest["tensors"]
    if not tensors:
        raise ValueError(f"run {reader.run_id} captured no tensor")
    default_tensor = next((t for t, i in tensors.items() if i["kind"] == "natural"), next(iter(tensors)))
    unknown = sorted(set(schemes or ()) - {*SCHEMES, "auto"})
    if unknown:
        raise ValueError(f"unknown schemes {unknown}; choose from {sorted(SCHEMES)} or auto")
    if ranks < 2 or steps < 1 or repeats < 1:
        raise ValueError(f"need ranks >= 2, steps >= 1 and repeats >= 1, got {ranks}, {steps}, {repeats}")
    options = {
        "ranks": ranks,
        "steps": steps,
        "tensor": tensor or default_tensor,
        "schemes": sorted(schemes or SCHEMES),
        "repeats": repeats,
        "bandwidth_gbps": bandwidth_gbps,
    }
    defaults = {
        "ranks": 4,
        "steps": 3,
        "tensor": default_tensor,
        "schemes": sorted(SCHEMES),
        "repeats": 25,
        "bandwidth_gbps": None,
    }
    tensor = options["tensor"]
    if tensor not in tensors:
        raise ValueError(f"run {reader.run_id} has no captured tensor {tensor!r}; it has {sorted(tensors)}")
    numel = int(tensors[tensor]["numel"])
    if reader.manifest.get("num_workers", ranks) < ranks:
        raise ValueError(
            f"run {reader.run_id} has {reader.manifest['num_workers']} workers; cannot replay on {ranks} ranks"
        )
    topo = model_topology(ranks, bandwidth_gbps=bandwidth_gbps, recalibrate=recalibrate)
    frames = []
    for step in tqdm(reader.steps(tensor)[:steps], desc=f"measure {reader.run_id}", unit="step", disable=not progress):
        frames.append(
            _replay_step(
                reader,
                tensor,
                step,
                numel,
                ranks=ranks,
                repeats=repeats,
                topo=topo,
                schemes=schemes,
                bandwidth_gbps=bandwidth_gbps,
            )
        )
    out = pd.concat(frames, ignore_index=True)
    path = reader.derived_dir / f"{variant('bench_comm', options, defaults)}.parquet"
    write_table(path, out, {**options, "files": reader.fingerprint()})
    out.attrs["path"] = path
    return out


def _replay_step(
    reader: TraceReader,
    tensor: str,
    step: int,
    numel: int,
    *,
    ranks: int,
    repeats: int,
    topo,
    schemes: Sequence[str] | None,
    bandwidth_gbps: float | None,
) -> pd.DataFrame:
    """One captured step of :func:`replay_run`: ``compare`` on the first ``ranks`` workers' records (indices and
    values), labelled with the run, tensor, step, numel, ranks and link rate (NaN: loopback)."""
    recs = sorted(reader.records(tensor=tensor, step=step), key=lambda r: r.worker)[:ranks]
    if len(recs) < ranks:
        raise ValueError(
            f"run {reader.run_id} holds {len(recs)} workers' records of {tensor} at step {step}; "
            f"cannot replay on {ranks} ranks"
        )
    df = compare(
        [r.indices_K.long() for r in recs],
        numel,
        values=[r.values_K for r in recs],
        repeats=repeats,
        topology=topo,
        schemes=schemes,
        bandwidth_gbps=bandwidth_gbps,
    )
    return df.assign(
        run=reader.run_id,
        tensor=tensor,
        step=step,
        numel=numel,
        ranks=ranks,
        bandwidth_gbps=bandwidth_gbps or float("nan"),
    )


def load_replay(run) -> pd.DataFrame | None:
    """The measured replay of ``run`` a figure should show: the default options' ``bench_comm.parquet`` if it
    exists, else the newest ``bench_comm-<hash>.parquet`` (its options in ``df.attrs["stamp"]``); None if the run
    was never replayed."""
    folder = TraceReader(run).derived_dir
    default = folder / "bench_comm.parquet"
    found = (
        [default]
        if default.exists()
        else sorted(folder.glob("bench_comm-*.parquet"), key=lambda p: p.stat().st_mtime)[-1:]
    )
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
    sets = synthetic_index_sets(numel, ranks, density, skew=skew, overlap=overlap, seed=seed)
    stats = describe(sets, numel)
    topo = model_topology(ranks, bandwidth_gbps=bandwidth_gbps, recalibrate=recalibrate)
    df = compare(sets, numel, repeats=repeats, topology=topo, schemes=schemes, bandwidth_gbps=bandwidth_gbps)
    return df.assign(
        numel=numel, ranks=ranks, skew=skew, overlap=overlap, bandwidth_gbps=bandwidth_gbps or float("nan")
    ), stats
