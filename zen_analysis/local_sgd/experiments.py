"""Local SGD experiments shared by ``zen-analysis bench stragglers``, the notebook and ``make reproduce``."""

from __future__ import annotations

import copy

import pandas as pd


def method_run(base, method: str, *, tag: str = "", progress: bool = False, **settings) -> dict:
    """Train ``base`` with ``sync.scheme = method`` and dotted ``settings`` (``local_sgd.interval=4``,
    ``perturb.straggler=consistent``); returns the run summary plus ``metrics`` (rank 0's per-step rows)."""
    from zen_analysis import paths
    from zen_analysis.config import apply_overrides
    from zen_analysis.dist.launch import launch

    cfg = copy.deepcopy(base)
    cfg.run_id = f"{base.name}-{method}{'-' + tag if tag else ''}"
    cfg.sync.scheme = method
    cfg.capture.enabled = False
    cfg = apply_overrides(cfg, [f"{k}={v}" for k, v in settings.items()])
    result = launch(cfg, echo=False, progress=progress)
    summary = dict(result.summary)
    summary["metrics"] = pd.read_json(paths.run_dir(cfg.run_id) / "metrics.jsonl", lines=True)
    summary["per_rank_steps"] = {int(r): s["steps_done"] for r, s in result.results.items()}
    summary["run_id"] = cfg.run_id
    return summary


def straggler_table(base, *, factor: float = 2.0, interval: int = 8, sync_time_s: float | None = None) -> pd.DataFrame:
    """EDiT and A-EDiT with one consistent ``factor`` x straggler (the last rank), the same step budget:
    tokens/s, final loss and validation loss, steps per rank. A-EDiT's sync time defaults to EDiT's measured
    time for ``interval`` steps without the straggler."""
    last = base.dist.num_ranks - 1
    straggle = {"perturb.straggler": "consistent", "perturb.straggler_rank": last, "perturb.straggler_factor": factor,
                "local_sgd.interval": interval, "train.eval_every": 0}  # fmt: skip
    plain = method_run(base, "edit", tag="plain", **{"local_sgd.interval": interval, "train.eval_every": 0})
    t_sync = sync_time_s or float(plain["metrics"]["step_s"].median()) * interval
    rows = []
    for method, tag, extra in (("edit", "straggler", {}), ("a_edit", "straggler", {"local_sgd.sync_time_s": t_sync})):
        s = method_run(base, method, tag=tag, **straggle, **extra)
        rows.append({"method": method, "straggler": f"rank {last} x{factor:g}", "tokens_per_s": s["tokens_per_s"],
                     "final_loss_rank0": s["final_loss"], "val_loss": s["val_loss"], "steps_per_rank": s["per_rank_steps"]})  # fmt: skip
    rows.append({"method": "edit", "straggler": "none", "tokens_per_s": plain["tokens_per_s"], "final_loss_rank0": plain["final_loss"],
                 "val_loss": plain["val_loss"], "steps_per_rank": plain["per_rank_steps"]})  # fmt: skip
    out = pd.DataFrame(rows)
    out.attrs["sync_time_s"] = t_sync
    return out


def compare_methods(base, methods=("sync", "post_local_sgd", "diloco", "edit", "a_edit"), *, progress: bool = False, **settings) -> pd.DataFrame:
    """Each method trained on ``base`` with the same step budget; rank 0's per-step metrics with ``method``,
    and ``attrs["summary"]``: validation loss, tokens/s, bytes sent per rank, syncs. ``sync`` is dense
    all-reduce; A-EDiT's sync time is EDiT's interval x the synchronous run's median step time."""
    frames, rows, t_step = [], [], None
    for method in methods:
        extra = dict(settings)
        if method == "a_edit":
            interval = int(extra.get("local_sgd.interval", 8))
            extra.setdefault("local_sgd.sync_time_s", round(interval * (t_step or 0.5), 3))
            extra["train.eval_every"] = 0
        s = method_run(base, "allreduce" if method == "sync" else method, tag=method, progress=progress, **extra)
        if method == "sync":
            t_step = float(s["metrics"]["step_s"].median())
        m = s["metrics"].assign(method=method)
        m["elapsed_s"] = m["step_s"].cumsum()
        frames.append(m)
        rows.append({"method": method, "val_loss": s["val_loss"], "final_loss_rank0": s["final_loss"],
                     "tokens_per_s": s["tokens_per_s"], "sync_bytes_per_rank": s.get("sync_bytes_rank"),
                     "steps": s["total_steps_all_ranks"], "syncs": (s.get("sync") or {}).get("syncs")})  # fmt: skip
    out = pd.concat(frames, ignore_index=True)
    out.attrs["summary"] = pd.DataFrame(rows)
    return out
