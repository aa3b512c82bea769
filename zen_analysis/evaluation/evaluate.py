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

Shape suffixes: K non-zeros of one captured record.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import torch
from tqdm.auto import tqdm

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
from zen_analysis.evaluation.crossover import (  # noqa: F401 - re-exported for callers importing them from here
    crossover,
    measured_crossover,
    stock_seconds,
)
from zen_analysis.pricing.cost import phase_times
from zen_analysis.pricing.formats import wire_sizes
from zen_analysis.pricing.topology import Topology
from zen_analysis.pricing.traffic import DDP_SPARSE, ddp_sparse
from zen_analysis.sparsity.characterize import worker_counts
from zen_analysis.sparsity.metrics import union_of
from zen_analysis.sparsity.synthetic import synthetic_index_sets
from zen_analysis.sparsity.workloads import workload_labels

__all__ = [
    "evaluate",
    "evaluate_runs",
    "normalized",
    "relative_to_allreduce",
    "speedups",
    "step_index_sets",
    "wire_size_table",
]

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
