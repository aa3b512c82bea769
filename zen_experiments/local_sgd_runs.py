"""Local SGD experiments shared by ``zen-analysis bench stragglers``, the notebook and ``make reproduce``."""

from __future__ import annotations

import copy

import pandas as pd

from zen_analysis import paths
from zen_analysis.config import apply_overrides
from zen_analysis.runs.launch import launch
from zen_analysis.train.perturbations import spike_step

__all__ = ["ABLATION_SPIKES", "ABLATION_SYNC", "EDIT_TUNED", "compare_methods", "method_run", "penalty_ablation"]


def method_run(base, method: str, *, tag: str = "", progress: bool = False, **settings) -> dict:
    """Train ``base`` with ``sync.method = method`` (``dense`` for synchronous DDP) and dotted ``settings``
    (``local_sgd.interval=4``, ``perturb.straggler=consistent``); returns the run summary plus ``metrics`` (rank
    0's per-step rows)."""

    cfg = copy.deepcopy(base)
    cfg.run_id = f"{base.name}-{method}{'-' + tag if tag else ''}"
    cfg.sync.method = method
    cfg.capture.enabled = False
    cfg = apply_overrides(cfg, [f"{k}={v}" for k, v in settings.items()])
    result = launch(
        cfg, echo=False, progress=progress, overwrite=True
    )  # the id names the experiment: a rerun replaces it
    summary = dict(result.summary)
    summary["metrics"] = pd.read_json(paths.run_dir(cfg.run_id) / "metrics.jsonl", lines=True)
    summary["per_rank_steps"] = {int(r): s["steps_done"] for r, s in result.results.items()}
    summary["run_id"] = cfg.run_id
    return summary


def ideal_straggler_speedup(workers: int, factor: float) -> float:
    """A-EDiT / EDiT tokens/s with one ``factor`` x straggler among ``workers`` on independent devices and free
    syncs: EDiT runs at the straggler's pace (workers / factor steps per step time), A-EDiT lets the others run
    ((workers - 1) + 1 / factor)."""
    return (workers - 1 + 1 / factor) / (workers / factor)


def local_tokens_per_s(summary: dict, tokens_per_step: int) -> float:
    """tokens/s after the synchronous warm-up (identical for EDiT and A-EDiT): the local phase's steady state."""
    warmup = int((summary.get("sync") or {}).get("warmup_steps") or 0)
    m = summary["metrics"]
    t_warm = float(m["step_s"].iloc[:warmup].sum())
    steps = summary["total_steps_all_ranks"] - warmup * len(summary["per_rank_steps"])
    return steps * tokens_per_step / max(summary["elapsed_s"] - t_warm, 1e-9)


def straggler_table(base, *, factor: float = 2.0, interval: int = 8, sync_time_s: float | None = None) -> pd.DataFrame:
    """EDiT without a straggler, then EDiT and A-EDiT with one consistent ``factor`` x straggler (the last rank),
    the same step budget: tokens/s of the whole run and of the local phase (after the warm-up), their share of the
    straggler-free EDiT's, final and validation loss, steps per rank. A-EDiT's sync time defaults to the
    straggler-free run's measured time for ``interval`` steps."""
    last = base.dist.num_ranks - 1
    straggle = {
        "perturb.straggler": "consistent",
        "perturb.straggler_rank": last,
        "perturb.straggler_factor": factor,
        "local_sgd.interval": interval,
        "train.eval_every": 0,
    }
    tokens_per_step = base.train.workers_per_rank * base.train.batch_per_worker * base.train.seq_len
    plain = method_run(
        base, "edit", tag=f"plain-{base.dist.num_ranks}", **{"local_sgd.interval": interval, "train.eval_every": 0}
    )
    t_sync = sync_time_s or float(plain["metrics"]["step_s"].median()) * interval
    runs = [("edit", "none", plain)]
    for method, extra in (("edit", {}), ("a_edit", {"local_sgd.sync_time_s": t_sync})):
        runs.append(
            (
                method,
                f"rank {last} x{factor:g}",
                method_run(base, method, tag=f"straggler-{base.dist.num_ranks}", **straggle, **extra),
            )
        )
    rows = []
    for method, straggler, s in runs:
        rows.append(
            {
                "ranks": base.dist.num_ranks,
                "method": method,
                "straggler": straggler,
                "tokens_per_s": s["tokens_per_s"],
                "local_tokens_per_s": local_tokens_per_s(s, tokens_per_step),
                "final_loss_rank0": s["final_loss"],
                "val_loss": s["val_loss"],
                "steps_per_rank": s["per_rank_steps"],
            }
        )
    out = pd.DataFrame(rows)
    free = out["local_tokens_per_s"].iloc[0]
    out["share_of_straggler_free"] = out["local_tokens_per_s"] / free
    out.attrs["sync_time_s"] = t_sync
    out.attrs["ideal"] = ideal_straggler_speedup(base.dist.num_ranks, factor)
    return out


def compare_methods(
    base,
    methods=("sync", "post_local_sgd", "diloco", "edit", "a_edit"),
    *,
    progress: bool = False,
    per_method: dict[str, dict] | None = None,
    **settings,
) -> pd.DataFrame:
    """Each method trained on ``base`` with the same step budget; rank 0's per-step metrics with ``method``,
    and ``attrs["summary"]``: validation loss (and its gap to ``sync``), tokens/s, bytes sent per rank, syncs.
    ``settings`` apply to every run (``local_sgd.*`` ones only matter to local methods), ``per_method[method]``
    on top. ``sync`` is dense all-reduce;
    A-EDiT's sync time is EDiT's interval x the synchronous run's median step time."""
    frames, rows, t_step = [], [], None
    for method in methods:
        extra = {**settings, **(per_method or {}).get(method, {})}
        if method == "a_edit":
            interval = int(extra.get("local_sgd.interval", 8))
            extra.setdefault("local_sgd.sync_time_s", round(interval * (t_step or 0.5), 3))
            extra["train.eval_every"] = 0
        s = method_run(base, "dense" if method == "sync" else method, tag=method, progress=progress, **extra)
        if method == "sync":
            t_step = float(s["metrics"]["step_s"].median())
        m = s["metrics"].assign(method=method)
        m["elapsed_s"] = m["step_s"].cumsum()
        frames.append(m)
        rows.append(
            {
                "method": method,
                "val_loss": s["val_loss"],
                "final_loss_rank0": s["final_loss"],
                "tokens_per_s": s["tokens_per_s"],
                "sync_bytes_per_rank": s.get("sync_bytes_rank"),
                "steps": s["total_steps_all_ranks"],
                "syncs": (s.get("sync") or {}).get("syncs"),
            }
        )
    out = pd.concat(frames, ignore_index=True)
    summary = pd.DataFrame(rows)
    if "sync" in set(summary["method"]):
        ref = float(summary.loc[summary["method"] == "sync", "val_loss"].iloc[0])
        summary["val_gap_vs_sync"] = summary["val_loss"] / ref - 1
    out.attrs["summary"] = summary
    return out


EDIT_TUNED = {"local_sgd.outer_lr": 1.0, "local_sgd.outer_momentum": 0.0}
"""EDiT's outer optimizer for short runs (``make reproduce``): plain averaging of the pseudo-gradients. DiLoCo's
lr 0.7 / Nesterov momentum 0.9 are tuned for hundreds of inner steps per sync; over tens of syncs of a few steps
the momentum overshoots (the guide's "EDiT and A-EDiT")."""

ABLATION_SPIKES = {
    "perturb.spikes": "repeat",
    "perturb.spike_rank": 3,
    "perturb.spike_every": 48,
    "perturb.spike_len": 16,
    "perturb.spike_start": 74,
}
"""The ablation's injected spikes: rank 3 trains on degenerate one-token sequences for a whole sync interval,
starting once the anomaly detector is armed (warm-up 10 steps, then 3 syncs of 16 steps)."""
ABLATION_SYNC = {"local_sgd.warmup_steps": 10, "local_sgd.interval": 16, "local_sgd.ewma_warmup": 3}
"""The ablation's sync cadence: 10 warm-up steps, a sync every 16, the anomaly detector armed after 3 syncs."""

ABLATIONS = {
    "full penalty": "default",
    "no anomaly elimination": "weighting,clip",
    "no weighting": "anomaly,clip",
    "no clipping": "anomaly,weighting",
    "no penalty": "none",
}
"""EDiT's penalty variants (label -> ``local_sgd.penalty``) of the ablation."""


def spike_heights(loss: pd.Series, *, window: int = 8, start: int = 0) -> pd.Series:
    """How far each step's loss rises above the median of the ``window`` steps before it (0 before ``start``):
    a loss spike is a jump over the recent trend, whatever the curve's level."""
    trend = loss.shift(1).rolling(window, min_periods=window).median()
    height = (loss - trend).fillna(0.0)
    height.iloc[:start] = 0.0
    return height


def penalty_ablation(
    base, *, spikes: dict, variants: dict[str, str] | None = None, progress: bool = False, **settings
) -> pd.DataFrame:
    """EDiT without spikes, then each penalty variant (``ABLATIONS`` by default) with the ``spikes`` knobs
    (``perturb.spikes``, ``perturb.spike_rank``, ...). Returns rank 0's per-step rows with ``method`` and
    ``spike`` (:func:`spike_heights` after the warm-up); ``attrs["summary"]``: per variant the largest spike,
    whether it exceeds the spike-free run's largest, validation loss, and the syncs at which the spiking rank
    was flagged anomalous; ``attrs["spike_steps"]``: the corrupted steps (:func:`corrupted_steps`). Put the spiking
    rank off rank 0, so rank 0's loss shows what the syncs carried over."""

    spike_rank = int(spikes.get("perturb.spike_rank", 0))
    if spike_rank == 0:
        raise ValueError("penalty_ablation: choose perturb.spike_rank != 0 (rank 0's loss is the one plotted)")
    warmup = int(settings.get("local_sgd.warmup_steps", 10))
    runs = [("spike-free", "default", {})] + [(label, pen, spikes) for label, pen in (variants or ABLATIONS).items()]
    frames, rows = [], []
    for label, penalty, knobs in runs:
        tag = "abl-" + label.replace(" ", "-")
        s = method_run(base, "edit", tag=tag, progress=progress, **settings, **knobs, **{"local_sgd.penalty": penalty})
        m = s["metrics"].assign(method=label)
        m["spike"] = spike_heights(m["loss"], start=warmup)
        m["elapsed_s"] = m["step_s"].cumsum()
        frames.append(m)
        log = pd.read_json(paths.run_dir(s["run_id"]) / "local_sgd" / f"rank{spike_rank}.jsonl", lines=True)
        flagged = sorted(
            log.loc[log.get("anomalous", pd.Series(False, index=log.index)).fillna(False).astype(bool), "step"]
            .unique()
            .tolist()
        )
        rows.append(
            {
                "variant": label,
                "max_spike": float(m["spike"].max()),
                "val_loss": s["val_loss"],
                "final_loss_rank0": s["final_loss"],
                "flagged_syncs": flagged,
            }
        )
    out = pd.concat(frames, ignore_index=True)
    summary = pd.DataFrame(rows)
    summary["above_spike_free"] = summary["max_spike"] > summary["max_spike"].iloc[0]
    out.attrs["summary"] = summary
    out.attrs["spike_steps"] = corrupted_steps(base, spikes)
    return out


def corrupted_steps(base, spikes: dict) -> list[int]:
    """The steps of ``base`` on which the ``spikes`` knobs feed the spiking rank corrupted batches."""

    knobs = apply_overrides(base, [f"{k}={v}" for k, v in spikes.items()]).perturb
    if knobs.spikes == "none":  # the schedule knobs alone corrupt nothing (train.perturbations.spiked)
        return []
    return [t for t in range(base.train.num_steps) if spike_step(knobs, t)]


def slow_network_check(
    base, *, bandwidth_gbps: float = 0.5, methods=("dense", "edit", "a_edit"), progress: bool = False, **settings
) -> pd.DataFrame:
    """The ``perturb.bandwidth_gbps`` emulation (each all-reduce of the sync sleeps ring bytes / bandwidth on top of
    the real loopback one) against the emulated network (``dist.network=netlab``: the ranks really behind links
    of that rate), per method, the same steps: tokens/s of both, their ratio and whether they agree within 20%.
    ``settings`` apply to every run; A-EDiT's sync time is EDiT's interval x the synchronous loopback run's median
    step time (measured first, with no slow link)."""
    interval = int(settings.get("local_sgd.interval", 8))
    fast = method_run(base, "dense", tag="net-loopback", progress=progress, **settings)
    t_sync = round(interval * float(fast["metrics"]["step_s"].median()), 3)
    rows = []
    for method in methods:
        extra = {**settings, **({"local_sgd.sync_time_s": t_sync, "train.eval_every": 0} if method == "a_edit" else {})}
        emulated = method_run(
            base, method, tag="net-emulated", progress=progress, **extra, **{"perturb.bandwidth_gbps": bandwidth_gbps}
        )
        lab = method_run(
            base,
            method,
            tag="net-lab",
            progress=progress,
            **extra,
            **{"dist.network": "netlab", "dist.bandwidth_gbps": bandwidth_gbps},
        )
        rows.append(
            {
                "method": method,
                "bandwidth_gbps": bandwidth_gbps,
                "emulated_tokens_per_s": emulated["tokens_per_s"],
                "lab_tokens_per_s": lab["tokens_per_s"],
                "emulated_val_loss": emulated["val_loss"],
                "lab_val_loss": lab["val_loss"],
            }
        )
    out = pd.DataFrame(rows)
    out["emulated_over_lab"] = out["emulated_tokens_per_s"] / out["lab_tokens_per_s"]
    out["agrees_within_20pct"] = (out["emulated_over_lab"] - 1).abs() <= 0.2
    out.attrs["loopback_tokens_per_s"] = fast["tokens_per_s"]
    return out
