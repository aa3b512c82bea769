"""The Zen issue's experiments, as library functions the notebook and ``make reproduce`` share.

* :func:`parity_runs` — Fig. 18: the same recipe trained with dense all-reduce and with Zen (natural
  sparsity: the embedding through Zen), and with AGsparse and Zen under DGC top-k; per-step losses, step times
  and bytes, and the final parameters' digests.
* :func:`theorem2_table` — Theorem 2 check: push and pull imbalance of h0 on captured gradients at element
  granularity (what Zen hashes), against the paper's "always < 1.1".
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence

import pandas as pd

from zen_analysis import paths, recipes
from zen_analysis.capture.reader import TraceReader
from zen_analysis.runs.launch import launch
from zen_analysis.sparsity.characterize import worker_counts
from zen_analysis.sparsity.metrics import imbalance_ratios, union_of
from zen_analysis.sparsity.workloads import workload_labels
from zen_analysis.zen.hashing import hash_owner

__all__ = ["parity_config", "parity_runs", "parity_summary", "theorem2_table"]

VARIANTS = {
    "allreduce": {"method": "dense", "scheme": "allreduce"},
    "zen": {"method": "natural", "scheme": "zen"},
    "topk-agsparse": {"method": "topk", "scheme": "agsparse"},
    "topk-zen": {"method": "topk", "scheme": "zen"},
}
"""Fig. 18's four trainings: name -> ``sync`` settings."""


def parity_config(recipe: str = "default", *, steps: int = 30, ranks: int = 4):
    """``recipe`` on ``ranks`` ranks with one worker each for ``steps`` steps, named ``<recipe>-parity``."""

    cfg = recipes.get(recipe)
    cfg.name = f"{recipe}-parity"
    cfg.dist.num_ranks = ranks
    cfg.train.workers_per_rank = 1
    cfg.train.num_steps = steps
    cfg.train.eval_every = 0
    return cfg


def parity_runs(
    cfg, *, variants: Sequence[str] = tuple(VARIANTS), reuse: bool = True, progress: bool = False
) -> pd.DataFrame:
    """Train ``cfg`` once per variant (capture off; run ids ``<cfg.name>-<variant>``) and return the per-step
    metrics of all of them with a ``variant`` column (summaries in ``attrs["summaries"]``). ``reuse`` skips
    variants whose run already finished with the same config."""

    frames, summaries = [], {}
    for name in variants:
        run = copy.deepcopy(cfg)
        run.run_id = f"{cfg.name}-{name}"
        run.capture.enabled = False
        for key, value in VARIANTS[name].items():
            setattr(run.sync, key, value)
        run_dir = paths.run_dir(run.run_id)
        done = run_dir / "summary.json"
        if not (
            reuse and done.exists() and json.loads((run_dir / "config.json").read_text()) == json.loads(run.to_json())
        ):
            launch(run, echo=False, progress=progress, overwrite=True)  # the id names the experiment
        elif progress:
            print(f"{run.run_id}: reusing its finished run (the same config; reuse=False trains it again)")
        summaries[name] = json.loads(done.read_text())
        frames.append(pd.read_json(run_dir / "metrics.jsonl", lines=True).assign(variant=name))
    out = pd.concat(frames, ignore_index=True)
    out.attrs["summaries"] = summaries
    return out


def parity_summary(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per variant: final loss, largest per-step loss difference to its reference (allreduce for natural,
    topk-agsparse for top-k), median step time, median sparse bytes per step (rank 0)."""
    rows = []
    loss = metrics.pivot(index="step", columns="variant", values="loss")
    for name, g in metrics.groupby("variant", sort=False):
        ref = "topk-agsparse" if name.startswith("topk") else "allreduce"
        diff = (loss[name] - loss[ref]).abs().max() if ref in loss else float("nan")
        rows.append(
            {
                "variant": name,
                "final_loss": float(g["loss"].iloc[-1]),
                "reference": ref,
                "max_abs_loss_diff": float(diff),
                "median_step_s": float(g["step_s"].median()),
                "median_sparse_bytes_rank0": float(g.get("sparse_bytes_sent_rank0", pd.Series([0])).median()),
            }
        )
    return pd.DataFrame(rows)


def theorem2_table(runs: Sequence[str], *, seed: int = 0, max_workers: int = 128) -> pd.DataFrame:
    """Push and pull imbalance of Zen's h0 (element granularity) for n = 2..W on the first captured step of
    every tensor of ``runs``; one row per (workload, tensor kind, n)."""

    rows = []
    for run in runs:
        reader = TraceReader(run)
        labels = workload_labels(reader)
        step = reader.steps()[0]
        for tensor, ordered in reader.index_sets(step).items():
            numel = int(reader.manifest["tensors"][tensor]["numel"])
            for n in (k for k in worker_counts(len(ordered)) if k <= max_workers):
                sub = ordered[:n]
                push, pull = imbalance_ratios(sub, numel, hash_owner(n, seed, numel=numel), n)
                rows.append(
                    {
                        "workload": labels.get(tensor, tensor),
                        "tensor": tensor,
                        "n": n,
                        "push": push,
                        "pull": pull,
                        "mean_nnz": sum(s.numel() for s in sub) / n,
                        "union_nnz": union_of(sub, numel).numel(),
                    }
                )
    return pd.DataFrame(rows)
