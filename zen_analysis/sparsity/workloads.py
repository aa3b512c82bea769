"""Workloads: the characterization tables of several runs, labelled the way the paper's figures are.

A workload is what a figure line stands for: a run's natural (embedding) tensor, e.g. "default: llama embedding"
("minilm: pretrained embedding" for a run from a pretrained checkpoint),
or its top-k records pooled: "default: llama top-5% of buckets" when DGC ran per DDP-style bucket as the paper
does (``capture.topk_scope=bucket``), "default: llama top-5%" for chosen matrices (``tensor``). The prefix is the
recipe name, so two runs of one architecture stay apart.

Shape suffixes: K non-zeros of one captured record.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from zen_analysis.capture.buckets import describe
from zen_analysis.capture.reader import TraceReader
from zen_analysis.sparsity.characterize import load_tables

__all__ = ["bucket_parameter_shares", "bucket_partition_shares", "combined_tables", "workload_labels"]


def workload_labels(reader: TraceReader) -> dict[str, str]:
    """tensor name -> workload label for one run. Pseudo-gradients (:mod:`zen_analysis.capture.pseudo`): the
    selections pooled over sync groups ("default: llama top-2% pseudo-gradient"); before selection, the group holding
    the input embedding apart from the others, since only it has natural sparsity ("... pseudo-gradient, embedding's
    group" / "..., other groups")."""
    cfg = reader.manifest.get("config", {})
    model = cfg.get("model", {})
    arch = "pretrained" if model.get("pretrained") else model.get("arch", reader.run_id)  # a checkpoint: its recipe
    name = cfg.get("name", reader.run_id)
    ratio = cfg.get("capture", {}).get("topk_ratio", 0.05)
    out = {}
    for tensor, info in reader.manifest["tensors"].items():
        kind = info["kind"]
        if kind == "natural":
            what = f"{arch} embedding"
        elif kind == "pseudo_topk":
            what = f"{arch} top-{100 * info['topk_ratio']:g}% pseudo-gradient"
        elif kind == "pseudo":
            where = "embedding's group" if info.get("embedding") else "other groups"
            what = f"{arch} pseudo-gradient, {where}"
        else:
            what = f"{arch} top-{100 * ratio:g}%" + (" of buckets" if "params" in info else "")
        out[tensor] = f"{name}: {what}"
    return out


def combined_tables(runs: list[str | Path]) -> dict[str, pd.DataFrame]:
    """Each table of every run, concatenated, with ``run`` and ``workload`` columns."""
    parts: dict[str, list[pd.DataFrame]] = {}
    for run in runs:
        reader = TraceReader(run)
        labels = workload_labels(reader)
        for name, df in load_tables(run).items():
            parts.setdefault(name, []).append(df.assign(run=reader.run_id, workload=df["tensor"].map(labels)))
    return {name: pd.concat(dfs, ignore_index=True) for name, dfs in parts.items()}


def bucket_partition_shares(runs: list[str | Path], *, num_partitions: int = 8) -> pd.DataFrame:
    """Per DGC bucket of each run (``capture.topk_scope=bucket``): the mean per-worker share of its non-zeros in
    each of ``num_partitions`` contiguous partitions (columns ``p0``..), with what the bucket holds (``holds``:
    its first and last parameter) and its size; Fig. 3a bucket by bucket, to see where a bucket's skew comes from."""
    rows = []
    for run in runs:
        reader = TraceReader(run)
        buckets = {t: i for t, i in reader.manifest["tensors"].items() if i["kind"] == "topk" and "params" in i}
        if not buckets:
            continue
        labels = workload_labels(reader)
        skew = load_tables(run)["skew"]
        skew = skew[(skew["worker"] >= 0) & (skew["num_partitions"] == num_partitions) & skew["tensor"].isin(buckets)]
        for tensor, g in skew.groupby("tensor", sort=True):
            shares = np.nanmean(np.stack(g["shares"].to_numpy()), axis=0)
            rows.append(
                {
                    "workload": labels[tensor],
                    "bucket": tensor,
                    "holds": describe(buckets[tensor]["params"]),
                    "numel": buckets[tensor]["numel"],
                    **{f"p{i}": float(s) for i, s in enumerate(shares)},
                }
            )
    return pd.DataFrame(rows)


def bucket_parameter_shares(run: str | Path) -> pd.DataFrame:
    """Per DGC bucket and parameter of ``run``: the parameter's share of the bucket's elements (``size_share``)
    and of its top-k non-zeros (``nnz_share``, pooled over workers and captured steps). Where they differ, one
    threshold across parameters of different gradient scale is what places the non-zeros (the paper's buckets)."""
    reader = TraceReader(run)
    buckets = {t: i for t, i in reader.manifest["tensors"].items() if i["kind"] == "topk" and "params" in i}
    ends = {t: np.array([e for _, _, e in i["params"]]) for t, i in buckets.items()}
    counts = {t: np.zeros(e.size, dtype=np.int64) for t, e in ends.items()}
    for rec in reader.records(kind="topk", with_values=False):
        if rec.tensor in buckets:
            part = np.searchsorted(ends[rec.tensor], rec.indices_K.numpy(), side="right")
            counts[rec.tensor] += np.bincount(part, minlength=ends[rec.tensor].size)
    rows = []
    for tensor, info in buckets.items():
        total = max(int(counts[tensor].sum()), 1)
        for (name, start, end), c in zip(info["params"], counts[tensor]):
            rows.append(
                {
                    "bucket": tensor,
                    "parameter": name,
                    "size_share": (end - start) / info["numel"],
                    "nnz_share": int(c) / total,
                }
            )
    return pd.DataFrame(rows)
