"""Figures of the EDiT issue: loss vs step and vs wall-clock per method, throughput per scenario, the penalty
ablation under injected spikes, and the sync-interval sweep."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from zen_analysis.plots import style

__all__ = ["loss_curves", "penalty_ablation", "pseudo_gradients", "tau_sweep", "throughput"]


def loss_curves(metrics: pd.DataFrame, *, title: str = "Local SGD methods at equal tokens") -> plt.Figure:
    """Rank 0's training loss vs step and vs wall-clock, one line per ``method`` (a ``compare_methods`` table)."""
    style.apply()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
    colors = style.palette(metrics["method"].unique())
    sns.lineplot(data=metrics, x="step", y="loss", hue="method", ax=a, palette=colors)
    sns.lineplot(data=metrics, x="elapsed_s", y="loss", hue="method", ax=b, legend=False, palette=colors)
    a.set(ylabel="training loss (rank 0's worker)", title="vs step")
    b.set(xlabel="wall-clock (s)", title="vs time")
    fig.suptitle(title, y=1.03)
    return fig


def throughput(table: pd.DataFrame) -> plt.Figure:
    """Tokens/s per method under each scenario (rows of method, scenario, tokens_per_s)."""
    style.apply()
    fig, ax = plt.subplots(figsize=(9, 3.8))
    sns.barplot(
        data=table,
        x="scenario",
        y="tokens_per_s",
        hue="method",
        ax=ax,
        palette=style.palette(table["method"].unique()),
        saturation=1,  # seaborn greys bars by default: a method's bars then differ from its colour elsewhere
    )
    ax.set(xlabel="", ylabel="tokens / s (all workers)", title="Throughput under perturbations")
    return fig


def tau_sweep(table: pd.DataFrame) -> plt.Figure:
    """Validation loss and bytes per rank vs the sync interval tau (rows of tau, val_loss, sync_bytes_per_rank)."""
    style.apply()
    fig, a = plt.subplots(figsize=(6.5, 3.8))
    a.plot(table["tau"], table["val_loss"], "o-", color="C0")
    a.set(xlabel="sync interval tau (steps)", ylabel="validation loss", xscale="log", title="EDiT: sync interval sweep")
    style.readable_log_ticks(a, "x")
    b = a.twinx()
    b.plot(table["tau"], table["sync_bytes_per_rank"] / 1e6, "s--", color="C1")
    b.set_ylabel("MB sent per rank", color="C1")
    return fig


def penalty_ablation(runs: pd.DataFrame, *, spike_steps: list[int] | None = None) -> plt.Figure:
    """EDiT penalty ablation (a :func:`zen_experiments.local_sgd_runs.penalty_ablation` table): rank 0's loss
    per variant (corrupted steps of the spiking rank shaded), and each variant's largest spike against the
    spike-free run's largest (dashed)."""
    style.apply()
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 3.8), gridspec_kw={"width_ratios": [2.2, 1]})
    sns.lineplot(data=runs, x="step", y="loss", hue="method", ax=a, lw=1)
    for s in spike_steps or []:
        a.axvspan(s - 0.5, s + 0.5, color="0.85", lw=0, zorder=0)
    a.set(
        ylabel="training loss (rank 0, a clean worker)",
        title="loss; grey: steps the spiking rank trains on corrupted batches",
    )
    summary = runs.attrs["summary"]
    sns.barplot(data=summary, y="variant", x="max_spike", ax=b, color="C0", orient="h")
    b.axvline(float(summary["max_spike"].iloc[0]), color="k", ls="--", lw=1)
    b.set(xlabel="largest spike (loss above its 8-step median)", ylabel="", title="dashed: spike-free run")
    fig.suptitle(
        "EDiT's pseudo-gradient penalty under injected loss spikes (EDiT paper's ablation): \"full penalty\" = "
        "anomaly elimination + weighting + clipping",
        y=1.03,
    )
    return fig


def pseudo_gradients(metrics: pd.DataFrame) -> plt.Figure:
    """Training loss (rank 0's worker) against wall-clock time, one panel per (ranks, link rate) and one line per
    variant of the sparse pseudo-gradient sweep (``experiments.pseudo_gradients.pseudo_gradient_sweep``'s
    ``attrs["metrics"]``): who reaches a loss first on a slow link."""
    style.apply()
    cells = metrics[["ranks", "bandwidth_gbps"]].drop_duplicates().sort_values(["ranks", "bandwidth_gbps"])
    fig, axes = plt.subplots(1, len(cells), figsize=(6 * len(cells), 3.8), sharey=True, squeeze=False)
    colors = style.palette(metrics["variant"].unique())
    for i, (ax, (ranks, gbps)) in enumerate(zip(axes[0], cells.itertuples(index=False))):
        part = metrics[(metrics["ranks"] == ranks) & (metrics["bandwidth_gbps"] == gbps)].copy()
        # one micro-batch per worker: a step's loss is noisy, the mean of the last 5 steps shows the trend
        part["loss"] = part.groupby("variant")["loss"].transform(lambda x: x.rolling(5, min_periods=1).mean())
        sns.lineplot(data=part, x="elapsed_s", y="loss", hue="variant", ax=ax, palette=colors, legend=i == 0, lw=1.2)
        ax.set(
            xlabel="wall-clock (s)",
            ylabel="training loss, rank 0 (mean of 5 steps)",
            title=f"{int(ranks)} ranks x {gbps:g} Gbit/s",
        )
    fig.suptitle("Sparse pseudo-gradients on slow links: loss against time", y=1.03)
    return fig
