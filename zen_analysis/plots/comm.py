"""Figures of the scheme evaluation: Zen paper Fig. 8, 15 and 17a analogues and model vs measured."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from zen_analysis.evaluation.crossover import measured_crossover
from zen_analysis.evaluation.evaluate import relative_to_allreduce
from zen_analysis.evaluation.measure import summarize
from zen_analysis.plots import style
from zen_analysis.plots.sparsity import ratio_axes
from zen_analysis.plots.training_throughput import (  # noqa: F401 - re-exported for callers importing them from here
    STEP_PARTS,
    time_to_loss,
    training_vs_bandwidth,
    training_vs_ranks,
    training_vs_rate,
)

__all__ = [
    "crossover",
    "measured_speedup_vs_bandwidth",
    "model_vs_measured",
    "normalized_time",
    "speedup",
    "training_vs_bandwidth",
    "wire_size",
]


def normalized_time(schemes_df: pd.DataFrame, *, topology: str = "paper-tcp25") -> plt.Figure:
    """Fig. 8: modelled time of each scheme / dense all-reduce vs number of workers, one panel per workload."""
    style.apply()
    df = relative_to_allreduce(schemes_df, topology=topology)
    g = df.groupby(["workload", "scheme", "n"], as_index=False)["normalized"].mean()
    grid = sns.relplot(
        data=g,
        x="n",
        y="normalized",
        hue="scheme",
        col="workload",
        kind="line",
        marker="o",
        col_wrap=min(3, g["workload"].nunique()),
        height=3.4,
        aspect=1.1,
        palette=style.palette(g["scheme"].unique()),
    )
    ratio_axes(grid, sorted(g["n"].unique()), xlabel="workers n", ylabel="time / dense all-reduce")
    grid.set_titles("{col_name}")
    grid.figure.suptitle(f"Modelled synchronization time relative to all-reduce ({topology}; paper Fig. 8)", y=1.03)
    return grid.figure


def speedup(model: pd.DataFrame, measured: pd.DataFrame | None = None, *, topology: str = "paper-tcp25") -> plt.Figure:
    """Fig. 15: communication speedup over dense all-reduce per scheme and workload.

    ``model``: :func:`zen_analysis.evaluation.evaluate.speedups` (modelled on ``topology`` at the largest n <= 128).
    ``measured``: a ``bench_comm`` table (:func:`zen_analysis.evaluation.replay.replay_run`): wire time measured on
    gloo ranks, beside the time modelled for the same ranks on this machine's calibration.
    """
    style.apply()
    panels = 2 if measured is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.2), squeeze=False)
    order = model.groupby("scheme")["speedup"].median().sort_values(ascending=False).index.tolist()
    m = model.assign(workload=model["workload"] + " (n=" + model["n"].astype(str) + ")")
    ax = axes[0, 0]
    sns.barplot(data=m, x="scheme", y="speedup", hue="workload", order=order, ax=ax)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log", base=2)
    style.readable_log_ticks(ax)
    ax.set(xlabel="", ylabel="all-reduce time / scheme time", title=f"modelled, {topology}")
    ax.tick_params(axis="x", rotation=30)
    sns.move_legend(ax, "upper center", bbox_to_anchor=(0.5, -0.25), ncol=2, fontsize=8, title=None)
    if measured is not None:
        s = summarize(measured)
        base = s.loc["allreduce"]
        rows = [
            {"scheme": name, "source": src, "speedup": base[col] / r[col]}
            for name, r in s.iterrows()
            for src, col in (("measured", "wire_measured_s"), ("modelled", "wire_model_s"))
        ]
        ax = axes[0, 1]
        sns.barplot(data=pd.DataFrame(rows), x="scheme", y="speedup", hue="source", order=order, ax=ax)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log", base=2)
        style.readable_log_ticks(ax)
        ranks = int(measured["ranks"].iloc[0])
        ax.set(
            xlabel="",
            ylabel="all-reduce time / scheme time",
            title=f"gloo, {ranks} ranks: {measured['run'].iloc[0]} replayed",
        )
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle("Synchronization speedup over dense all-reduce (paper Fig. 15, communication time)", y=1.02)
    return fig


def wire_size(sizes: pd.DataFrame) -> plt.Figure:
    """Fig. 17a: wire size relative to dense vs density after aggregation, per format.

    ``sizes``: rows of (density, format, relative, source) — a sweep of generated index sets
    (``source`` names the distribution) and optionally points from captured runs.
    """
    style.apply()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    sweep = sizes[~sizes["source"].str.startswith("captured")]
    sns.lineplot(data=sweep, x="density", y="relative", hue="format", style="source", marker="o", ax=ax)
    captured = sizes[sizes["source"].str.startswith("captured")]
    if len(captured):
        sns.scatterplot(data=captured, x="density", y="relative", hue="format", marker="X", s=90, legend=False, ax=ax)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    style.readable_log_ticks(ax, "x")
    style.readable_log_ticks(ax)
    n = int(sizes["num_partitions"].iloc[0])
    ax.set(
        xlabel="density after aggregation",
        ylabel="wire size / dense",
        title=f"Pull wire size by format, {n} servers (paper Fig. 17a; X = captured tensors)",
    )
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    return fig


def model_vs_measured(measured: pd.DataFrame) -> plt.Figure:
    """Modelled vs measured time per scheme and phase (a ``bench_comm`` table; phase ``local`` is the ranks' own
    work), with the +-30% band, and the modelled / measured ratio per scheme (phases summed, median over steps),
    wire alone and wire + local work."""
    style.apply()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.2))
    d = measured.assign(model_ms=1e3 * measured["wire_model_s"], measured_ms=1e3 * measured["wire_measured_s"])
    sns.scatterplot(
        data=d,
        x="measured_ms",
        y="model_ms",
        hue="scheme",
        style="phase",
        s=60,
        ax=ax,
        palette=style.palette(d["scheme"].unique()),
    )
    lo, hi = (
        0.7 * min(d["model_ms"].min(), d["measured_ms"].min()),
        1.4 * max(d["model_ms"].max(), d["measured_ms"].max()),
    )
    xs = [lo, hi]
    ax.plot(xs, xs, color="k", lw=0.8)
    ax.fill_between(xs, [0.7 * x for x in xs], [1.3 * x for x in xs], color="0.85", zorder=0, label="±30%")
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(lo, hi),
        ylim=(lo, hi),
        xlabel="measured time (ms, mean)",
        ylabel="modelled (ms)",
        title="per scheme and phase ('local': own work), every replayed step",
    )
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    style.readable_log_ticks(ax, "x")
    style.readable_log_ticks(ax)
    s = summarize(measured).reset_index()
    s = pd.concat([s.assign(term="wire", r=s["ratio"]), s.assign(term="wire + local work", r=s["total_ratio"])])
    sns.barplot(data=s, x="scheme", y="r", hue="term", ax=bx)
    bx.axhline(1.0, color="k", lw=0.8)
    bx.axhspan(0.7, 1.3, color="0.85", zorder=0)
    bx.set(xlabel="", ylabel="modelled / measured", title="whole scheme (phases summed, median over steps)")
    bx.legend(fontsize=8, title=None)
    bx.tick_params(axis="x", rotation=30)
    ranks = int(measured["ranks"].iloc[0])
    fig.suptitle(f"Alpha-beta + local-work model vs gloo on this machine, {ranks} ranks, calibrated at {ranks}", y=1.02)
    return fig


def measured_speedup_vs_bandwidth(sweep: pd.DataFrame) -> plt.Figure:
    """The measured Fig. 15: speedup over dense all-reduce (end to end, median of the slowest rank) per scheme vs
    the lab's link rate, one panel per (tensor kind, ranks); the model's prediction beside each bar (hatched).
    ``sweep``: :func:`zen_experiments.lab_sweeps.scheme_sweep`."""
    style.apply()
    d = sweep[sweep["scheme"] != "allreduce"]
    panels = d[["kind", "ranks"]].drop_duplicates().sort_values(["kind", "ranks"]).itertuples(index=False)
    panels = list(panels)
    cols = min(2, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 3.9 * rows), squeeze=False, sharey=True)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    order = d.groupby("scheme")["speedup_measured"].median().sort_values(ascending=False).index.tolist()
    rates = sorted(d["bandwidth_gbps"].unique())
    colors = dict(zip(rates, sns.color_palette("viridis", len(rates))))
    width = 0.8 / len(rates)
    for ax, (kind, ranks) in zip(axes.flat, panels):
        p = d[(d["kind"] == kind) & (d["ranks"] == ranks)].set_index(["scheme", "bandwidth_gbps"])
        for j, rate in enumerate(rates):
            for i, scheme in enumerate(order):
                if (scheme, rate) not in p.index:
                    continue
                r = p.loc[(scheme, rate)]
                x = i - 0.4 + (j + 0.5) * width
                ax.bar(
                    x - width / 4,
                    r["speedup_measured"],
                    width / 2,
                    color=colors[rate],
                    label=f"{rate:g} Gbit/s" if i == 0 else None,
                )
                ax.bar(
                    x + width / 4,
                    r["speedup_modelled"],
                    width / 2,
                    color=colors[rate],
                    alpha=0.45,
                    hatch="//",
                    edgecolor="0.3",
                    lw=0,
                )
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log", base=2)
        style.readable_log_ticks(ax)
        ax.set_xticks(range(len(order)), order, rotation=20)
        ax.set(title=f"{kind} tensor, {ranks} ranks", ylabel="all-reduce time / scheme time")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        title="link rate (solid: measured; hatched: the model)",
        loc="lower center",
        bbox_to_anchor=(0.5, -0.06),
        ncol=len(rates),
        fontsize=9,
        title_fontsize=9,
    )
    fig.suptitle("Measured speedup over dense all-reduce on the emulated network (paper Fig. 15, measured)", y=1.01)
    fig.tight_layout()
    return fig


def crossover(sweep: pd.DataFrame, predicted: dict, *, kind: str = "natural", ranks: int = 4) -> plt.Figure:
    """Where dense all-reduce catches up: the fastest sparse scheme's time over dense all-reduce's against the link
    rate, measured (a point per rate of the scheme sweep, and ``auto``'s) and modelled (the line: the model's rate
    curve, :func:`zen_analysis.evaluation.crossover.crossover`), with both crossovers marked.
    ``sweep``: :func:`zen_experiments.lab_sweeps.scheme_sweep`; ``predicted``: ``crossover``'s result."""
    style.apply()
    d = sweep[(sweep["kind"] == kind) & (sweep["ranks"] == ranks)]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    rates = sorted(d["bandwidth_gbps"].unique())
    best, auto = [], []
    for r in rates:
        cell = d[d["bandwidth_gbps"] == r].set_index("scheme")["measured_s_median"]
        dense = cell["allreduce"]
        best.append(cell.drop(["allreduce", "auto"], errors="ignore").min() / dense)
        auto.append(cell["auto"] / dense if "auto" in cell else np.nan)
    curve = predicted["curve"]
    grid = curve.index.to_numpy()
    model = (curve.drop(columns="allreduce").min(axis=1) / curve["allreduce"]).to_numpy()
    shown = (grid >= min(rates) / 4) & (grid <= max(rates) * 4)
    grid, model = grid[shown], model[shown]
    ax.plot(grid, model, color="0.35", lw=1.5, label="fastest sparse scheme, modelled")
    ax.plot(rates, best, "o", color=style.color("zen"), label="fastest sparse scheme, measured")
    if not np.isnan(auto).all():
        ax.plot(rates, auto, "x", color="k", ms=8, label="auto, measured")
    ax.axhline(1.0, color="k", lw=0.8)
    if 0 < predicted["rate_gbps"] < np.inf:
        ax.axvline(predicted["rate_gbps"], color="0.35", ls="--", lw=1)
        ax.text(
            predicted["rate_gbps"],
            0.03,
            f" model {predicted['rate_gbps']:.3g}",
            transform=ax.get_xaxis_transform(),
            fontsize=8,
        )
    measured = measured_crossover(sweep, kind=kind, ranks=ranks)
    if measured is not None:
        ax.axvline(measured, color=style.color("zen"), ls=":", lw=1.2)
        ax.text(measured, 0.1, f" measured {measured:.3g}", transform=ax.get_xaxis_transform(), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    style.readable_log_ticks(ax)
    style.readable_log_ticks(ax, "x")
    ax.set(
        xlabel="link rate (Gbit/s)",
        ylabel="time / dense all-reduce time",
        title=f"Where dense all-reduce catches up: {kind} tensor, {ranks} ranks",
    )
    ax.legend(fontsize=8)
    return fig
