"""Figures of the sparsity characterization (Zen paper Fig. 2 and 3, plus drift and imbalance).

Each function takes the combined tables (``sparsity.workloads.combined_tables``) and returns a Figure; nothing
here computes a metric beyond grouping and averaging what the tables hold.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from zen_analysis.plots import style

__all__ = ["densification", "drift", "imbalance", "overlap_pdf", "partition_heatmap", "skewness", "write_all"]


def _log2_axis(ax: plt.Axes, ticks) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(ticks))
    ax.set_xticklabels([str(t) for t in ticks])


def ratio_axes(grid: sns.FacetGrid, ns, *, xlabel: str, ylabel: str) -> None:
    """Log2 axes with a reference line at 1 on every panel (figures of ratios against a baseline)."""
    for ax in grid.axes.flat:
        _log2_axis(ax, ns)
        ax.set_yscale("log", base=2)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set(xlabel=xlabel, ylabel=ylabel)
        style.readable_log_ticks(ax)


def overlap_pdf(overlap: pd.DataFrame) -> plt.Figure:
    """Fig 2a: probability density of the pairwise overlap ratio, one curve per workload."""
    style.apply()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    df = overlap.dropna(subset=["overlap"])
    sns.histplot(
        data=df,
        x="overlap",
        hue="workload",
        stat="density",
        common_norm=False,
        element="step",
        fill=False,
        bins=np.linspace(0, 1, 41),
        ax=ax,
    )
    ax.set(xlabel="overlap ratio |I1 ∩ I2| / min(|I1|, |I2|)", ylabel="probability density", xlim=(0, 1))
    ax.set_title("Overlap between workers' non-zeros (paper Fig. 2a)")
    return fig


def densification(dens: pd.DataFrame) -> plt.Figure:
    """Fig 2b: densification ratio gamma vs number of workers, with y = n (disjoint sets) for reference."""
    style.apply()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    g = dens.groupby(["workload", "n"], as_index=False)["gamma"].mean()
    sns.lineplot(data=g, x="n", y="gamma", hue="workload", marker="o", ax=ax)
    ns = sorted(g["n"].unique())
    ax.plot(ns, ns, "k--", lw=1, label="y = n (no overlap)")
    _log2_axis(ax, ns)
    ax.set_yscale("log", base=2)
    style.readable_log_ticks(ax)
    ax.set(xlabel="number of workers n", ylabel="densification ratio γⁿ = |union of n sets| / mean |set|")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    ax.set_title("Tensors densify when aggregated (paper Fig. 2b)")
    return fig


def partition_heatmap(skew: pd.DataFrame, *, num_partitions: int = 8) -> plt.Figure:
    """Fig 3a: % of a worker's non-zeros in each of ``num_partitions`` contiguous partitions (mean over workers,
    steps)."""
    style.apply()
    df = skew[(skew["num_partitions"] == num_partitions) & (skew["worker"] >= 0)].dropna(subset=["skewness"])
    rows = {}
    for label, g in df.groupby(df["workload"] + " · " + df["tensor"].str.replace(r"^model\.", "", regex=True)):
        rows[label] = 100 * np.mean(np.stack(g["shares"].to_numpy()), axis=0)
    mat = pd.DataFrame(rows, index=range(num_partitions)).T
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(mat) + 1.5))
    sns.heatmap(
        mat, annot=True, fmt=".0f", cmap="rocket_r", vmin=0, vmax=100, cbar_kws={"label": "% of non-zeros"}, ax=ax
    )
    ax.set(xlabel="contiguous partition", ylabel="")
    ax.set_title(f"Non-zeros per contiguous partition, {num_partitions} partitions (paper Fig. 3a)")
    return fig


def skewness(skew: pd.DataFrame) -> plt.Figure:
    """Fig 3b: skewness ratio vs number of contiguous partitions (mean over workers and steps)."""
    style.apply()
    df = skew[skew["worker"] >= 0].dropna(subset=["skewness"])
    g = df.groupby(["workload", "num_partitions"], as_index=False)["skewness"].mean()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    sns.lineplot(data=g, x="num_partitions", y="skewness", hue="workload", marker="o", ax=ax)
    ps = sorted(g["num_partitions"].unique())
    ax.plot(ps, ps, "k--", lw=1, label="y = n (all in one partition)")
    _log2_axis(ax, ps)
    ax.set_yscale("log", base=2)
    style.readable_log_ticks(ax)
    ax.set(xlabel="number of contiguous partitions n", ylabel="skewness ratio\nn x largest partition's share")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    ax.set_title("Non-zeros are skewed over the index space (paper Fig. 3b)")
    return fig


def drift(drift_df: pd.DataFrame) -> plt.Figure:
    """Jaccard similarity of index sets between consecutive captured steps: per worker (mean) and the union."""
    style.apply()
    df = drift_df.assign(scope=np.where(drift_df["worker"] < 0, "union of workers", "single worker (mean)"))
    g = df.groupby(["workload", "scope", "next_step"], as_index=False)["jaccard"].mean()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    sns.lineplot(data=g, x="next_step", y="jaccard", hue="workload", style="scope", marker="o", ax=ax)
    ax.set(xlabel="step", ylabel="Jaccard(I_t, I_next)", ylim=(0, 1))
    ax.set_title("Iteration drift of the non-zero index sets")
    return fig


def imbalance(imb: pd.DataFrame) -> plt.Figure:
    """Push and pull imbalance (paper Def. 8) of contiguous vs hash owners vs number of workers/partitions."""
    style.apply()
    long = imb.melt(
        id_vars=["workload", "n", "owner"], value_vars=["push", "pull"], var_name="direction", value_name="ratio"
    )
    g = long.groupby(["workload", "n", "owner", "direction"], as_index=False)["ratio"].mean()
    grid = sns.relplot(
        data=g,
        x="n",
        y="ratio",
        hue="workload",
        style="owner",
        col="direction",
        kind="line",
        marker="o",
        height=3.6,
        aspect=1.1,
        facet_kws={"sharey": True},
    )
    ratio_axes(grid, sorted(g["n"].unique()), xlabel="workers = partitions n", ylabel="imbalance ratio")
    grid.figure.suptitle("Contiguous ranges vs Zen's hash (1 = perfect balance)", y=1.03)
    return grid.figure


FIGURES = {
    "fig2a_overlap_pdf": ("overlap", overlap_pdf),
    "fig2b_densification": ("densification", densification),
    "fig3a_partition_heatmap": ("skew", partition_heatmap),
    "fig3b_skewness": ("skew", skewness),
    "drift": ("drift", drift),
    "imbalance_contiguous_vs_hash": ("imbalance", imbalance),
}
"""figure file name -> (table it reads, plotting function)."""


def write_all(tables: dict[str, pd.DataFrame]) -> list[str]:
    """Draw every characterization figure and save it to figures/; returns the names written."""
    written = []
    for name, (table, fn) in FIGURES.items():
        fig = fn(tables[table])
        style.savefig(fig, name)
        plt.close(fig)
        written.append(name)
    return written
