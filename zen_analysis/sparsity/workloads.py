"""Workloads: the characterization tables of several runs, labelled the way the paper's figures are.

A workload is what a figure line stands for: a run's natural (embedding) tensor, e.g. "default: llama embedding",
or its top-k records pooled: "default: llama top-5% of buckets" when DGC ran per DDP-style bucket as the paper
does (``capture.topk_scope=bucket``), "default: llama top-5%" for chosen matrices (``tensor``). The prefix is the recipe name, so two runs of one architecture stay apart.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from zen_analysis.capture.traces import TraceReader
from zen_analysis.sparsity.characterize import load_tables


def workload_labels(reader: TraceReader) -> dict[str, str]:
    """tensor name -> workload label for one run."""
    cfg = reader.manifest.get("config", {})
    arch = cfg.get("model", {}).get("arch", reader.run_id)
    name = cfg.get("name", reader.run_id)
    ratio = cfg.get("capture", {}).get("topk_ratio", 0.05)
    out = {}
    for tensor, info in reader.manifest["tensors"].items():
        what = f"{arch} embedding" if info["kind"] == "natural" else f"{arch} top-{100 * ratio:g}%"
        if "params" in info:
            what += " of buckets"
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
