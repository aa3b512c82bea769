"""Figures of the EDiT issue: loss vs step and vs wall-clock per method, throughput per scenario, the penalty
ablation under injected spikes, and the sync-interval sweep."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from zen_analysis.plots import style


def loss_curves(metrics: pd.DataFrame, *, title: str = "Local SGD methods at equal tokens") -> plt.Figure:
    """Rank 0's training loss vs step and vs wall-clock, one line per ``method`` (a ``compare_methods`` table)."""
    style.apply()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
    sns.lineplot(data=metrics, x="step", y="loss", hue="method", ax=a)
    sns.lineplot(data=metrics, x="elapsed_s", y="loss", hue="method", ax=b, legend=False)
    a.set(ylabel="training loss (rank 0's worker)", title="vs step")
    b.set(xlabel="wall-clock (s)", title="vs time")
    fig.suptitle(title, y=1.03)
    return fig


def throughput(table: pd.DataFrame) -> plt.Figure:
    """Tokens/s per method under each scenario (rows of method, scenario, tokens_per_s)."""
    style.apply()
    fig, ax = plt.subplots(figsize=(9, 3.8))
    sns.barplot(data=table, x="scenario", y="tokens_per_s", hue="method", ax=ax)
    ax.set(xlabel="", ylabel="tokens / s (all workers)", title="Throughput under perturbations")
    return fig


def tau_sweep(table: pd.DataFrame) -> plt.Figure:
    """Validation loss and bytes per rank vs the sync interval tau (rows of tau, val_loss, sync_bytes_per_rank)."""
    style.apply()
    fig, a = plt.subplots(figsize=(6.5, 3.8))
    a.plot(table["tau"], table["val_loss"], "o-", color="C0")
    a.set(xlabel="sync interval tau (steps)", ylabel="validation loss", xscale="log", title="EDiT: sync interval sweep")
    b = a.twinx()
    b.plot(table["tau"], table["sync_bytes_per_rank"] / 1e6, "s--", color="C1")
    b.set_ylabel("MB sent per rank", color="C1")
    return fig
