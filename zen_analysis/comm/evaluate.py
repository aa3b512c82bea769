"""Trace-driven evaluation of the schemes, model side: ``zen-analysis evaluate <run>``.

For every captured tensor and step, every scheme and n = 2, 4, ..., W workers (the first n workers, as in the
characterization), the traffic model and the alpha-beta time on each topology preset are computed from the
workers' index sets and written to ``data/derived/<run_id>/schemes.parquet``, one row per
(tensor, step, n, scheme, topology). Schemes a configuration does not support (SparCML at a non-power-of-two n)
are skipped. ``best_scheme`` picks the cheapest scheme by modelled time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch

from zen_analysis.atomic import atomic_path, atomic_write_json
from zen_analysis.capture.traces import TraceReader
from zen_analysis.comm.cost import phase_times
from zen_analysis.comm.schemes import SCHEMES, build_scheme
from zen_analysis.comm.topology import Topology, preset
from zen_analysis.sparsity.characterize import derived_dir, worker_counts

VERSION = 1
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


def _rows(tensor: str, kind: str, step: int, numel: int, sets: list[torch.Tensor], topologies, schemes) -> list[dict]:
    rows = []
    union = torch.unique(torch.cat(sets))
    mean_nnz = sum(s.numel() for s in sets) / len(sets)
    for name in schemes:
        try:
            traffic = build_scheme(name).model(sets, numel)
        except ValueError:
            continue
        frame = traffic.frame()
        per_rank = frame.groupby("rank")[["bytes_sent", "bytes_received"]].sum()
        for topo_name, topo in topologies.items():
            pt = phase_times(traffic, topo)
            rows.append({
                "tensor": tensor, "kind": kind, "step": step, "n": len(sets), "numel": numel,
                "density": mean_nnz / numel, "gamma": union.numel() / mean_nnz if mean_nnz else float("nan"),
                "scheme": name, "topology": topo_name, "seconds": float(pt["seconds"].sum()),
                "bytes_sent_total": int(per_rank["bytes_sent"].sum()),
                "bytes_max_rank": int(per_rank.max(axis=1).max()),
            })  # fmt: skip
    return rows


def evaluate(
    run: str | Path,
    *,
    topologies: Sequence[str] = DEFAULT_TOPOLOGIES,
    schemes: Sequence[str] | None = None,
    max_workers: int = 128,
    force: bool = False,
    progress: bool = True,
) -> pd.DataFrame:
    """Modelled bytes and time of every scheme on every captured (tensor, step) for n = 2..W; cached."""
    from tqdm.auto import tqdm

    reader = TraceReader(run)
    out = derived_dir(reader.run_id) / "schemes.parquet"
    names = list(schemes or SCHEMES)
    stamp = {
        "version": VERSION, "topologies": list(topologies), "schemes": names, "max_workers": max_workers,
        "files": reader.fingerprint(),
    }  # fmt: skip
    stamp_path = out.with_suffix(".stamp.json")
    if not force and out.exists() and stamp_path.exists() and json.loads(stamp_path.read_text()) == stamp:
        df = pd.read_parquet(out)
        df.attrs["run_id"] = reader.run_id
        return df
    topos = {name: preset(name) for name in topologies}
    tensors = reader.manifest["tensors"]
    rows: list[dict] = []
    for step in tqdm(reader.steps(), desc=f"evaluate {reader.run_id}", unit="step", disable=not progress):
        sets: dict[str, dict[int, torch.Tensor]] = {}
        for rec in reader.records(step=step, with_values=False):
            sets.setdefault(rec.tensor, {})[rec.worker] = rec.indices_K.long()
        for tensor, by_worker in sets.items():
            ordered = [by_worker[w] for w in sorted(by_worker)]
            for n in (k for k in worker_counts(len(ordered)) if k <= max_workers):
                info = tensors[tensor]
                rows += _rows(tensor, info["kind"], step, int(info["numel"]), ordered[:n], topos, names)
    df = pd.DataFrame(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        df.to_parquet(tmp)
    atomic_write_json(stamp_path, stamp)
    df.attrs["run_id"] = reader.run_id
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
    step = reader.steps()[0] if step is None else step
    recs = sorted(reader.records(tensor=tensor, step=step, with_values=False), key=lambda r: r.worker)[:num_workers]
    return [r.indices_K.long() for r in recs], int(tensors[tensor]["numel"])
