"""Figures of the Zen issue: Fig. 16 (hashing cost), Fig. 17b (COO vs hash-bitmap pull), Fig. 18 (loss parity),
and the Theorem 2 imbalance check."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from zen_analysis.evaluation.measure import summarize
from zen_analysis.plots import style

__all__ = ["hashing_cost", "loss_parity", "pull_format_speedup", "theorem2"]


def hashing_cost(cost: pd.DataFrame) -> plt.Figure:
    """Fig. 16a/16b: seconds to bucket a worker's non-zeros vs density, sweeping r1 (a) and k (b), with the
    argsort reference (and Algorithm 1 in torch rounds, on CPU) on both panels (a
    :func:`zen_experiments.hashing_cost.hashing_cost` table)."""
    style.apply()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6), sharey=True)
    ref = cost[cost["sweep"].isin(["argsort", "torch_rounds"])]
    colors = style.palette(cost["setting"].unique())  # one colour per setting on both panels
    for ax, sweep, title in zip(
        axes, ("r1", "k"), ("(a) parallel region r1 (x non-zeros), k = 3", "(b) second-level hashes k, r1 = 2x")
    ):
        d = pd.concat([cost[cost["sweep"] == sweep], ref])
        for setting, g in d.groupby("setting", sort=False):  # one line and one legend entry per setting
            g = g.sort_values("density")
            dashed = g["sweep"].iloc[0] in ("argsort", "torch_rounds")  # the references, on both panels
            ax.plot(
                g["density"], g["seconds"], marker="o", color=colors[setting], ls="--" if dashed else "-", label=setting
            )
        ax.set(xscale="log", yscale="log", xlabel="density", ylabel="seconds (median)", title=title)
        style.readable_log_ticks(ax, "x")
        style.readable_log_ticks(ax)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3, fontsize=8)
    numel, dev = int(cost["numel"].iloc[0]), cost["device"].iloc[0]
    fig.suptitle(
        f"Hierarchical hashing (Algorithm 1) vs argsort bucketing, {numel / 1e6:.1f}M elements, "
        f"{int(cost['num_partitions'].iloc[0])} partitions, {dev} (paper Fig. 16)",
        y=1.02,
    )
    return fig


def pull_format_speedup(model: pd.DataFrame, measured: pd.DataFrame | None = None) -> plt.Figure:
    """Fig. 17b: speedup over all-reduce of Algorithm 1 + COO (``bp_coo``) vs Algorithm 1 + hash bitmap (``zen``),
    modelled (a :func:`zen_analysis.evaluation.evaluate.speedups` table) and, when given, measured on gloo (a
    ``bench_comm`` table)."""
    style.apply()
    rows = [
        {
            "workload": f"{r['workload']} (n={r['n']})",
            "variant": r["scheme"],
            "speedup": r["speedup"],
            "source": "modelled",
        }
        for _, r in model[model["scheme"].isin(["bp_coo", "zen"])].iterrows()
    ]
    if measured is not None:
        s = summarize(measured)
        for name in ("bp_coo", "zen"):
            rows.append(
                {
                    "workload": f"gloo {int(measured['ranks'].iloc[0])} ranks, {measured['run'].iloc[0]}",
                    "variant": name,
                    "speedup": s.loc["allreduce", "wire_measured_s"] / s.loc[name, "wire_measured_s"],
                    "source": "measured",
                }
            )
    names = {"bp_coo": "Algorithm 1 + COO", "zen": "Algorithm 1 + hash bitmap"}
    d = pd.DataFrame(rows).replace({"variant": names})
    fig, ax = plt.subplots(figsize=(9, 4))
    sns.barplot(
        data=d,
        y="workload",
        x="speedup",
        hue="variant",
        ax=ax,
        orient="h",
        palette={label: style.color(scheme) for scheme, label in names.items()},
    )
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set(
        xlabel="all-reduce time / scheme time",
        ylabel="",
        title="COO pull vs hash-bitmap pull (paper Fig. 17b; modelled on paper-tcp25, measured on gloo)",
    )
    return fig


def loss_parity(metrics: pd.DataFrame) -> plt.Figure:
    """Fig. 18: per-step training loss of Zen vs dense all-reduce (natural sparsity) and Zen vs AGsparse under
    the same top-k masks (a :func:`zen_experiments.zen_runs.parity_runs` table); the curves must coincide."""
    style.apply()
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
    for ax, (pair, title) in zip(
        axes,
        (
            (("allreduce", "zen"), "natural sparsity: embedding via Zen"),
            (("topk-agsparse", "topk-zen"), "DGC top-5%: AGsparse vs Zen, same masks"),
        ),
    ):
        d = metrics[metrics["variant"].isin(pair)]
        for name, style_ in zip(pair, ("-", "--")):
            g = d[d["variant"] == name]
            ax.plot(g["step"], g["loss"], style_, lw=2 if style_ == "-" else 1.5, label=name)
        wide = d.pivot(index="step", columns="variant", values="loss")
        if set(pair) <= set(wide.columns):
            diff = (wide[pair[0]] - wide[pair[1]]).abs().max()
            title += f"\nmax |loss difference| {diff:.1e}"
        ax.set(xlabel="step", ylabel="training loss", title=title)
        ax.legend()
    fig.suptitle("Zen changes the communication, not the training (paper Fig. 18)", y=1.09)
    return fig


def theorem2(table: pd.DataFrame) -> plt.Figure:
    """Push and pull imbalance of h0 at element granularity vs n (a ``theorem2_table``), the paper's 1.1 line
    (dotted) and Theorem 2's scale 1 + sqrt(n ln n / |I|) per workload (thin, same colour), with |I| the mean
    non-zeros per worker (push) or the union's size (pull)."""
    style.apply()
    long = table.melt(
        id_vars=["workload", "n", "mean_nnz", "union_nnz"],
        value_vars=["push", "pull"],
        var_name="direction",
        value_name="imbalance",
    )
    workloads = list(long["workload"].unique())  # one colour each: the default palette has 10, reproduce makes 11
    colors = dict(zip(workloads, sns.color_palette("tab20" if len(workloads) > 10 else None, n_colors=len(workloads))))
    grid = sns.relplot(
        data=long,
        x="n",
        y="imbalance",
        hue="workload",
        col="direction",
        kind="line",
        marker="o",
        height=3.6,
        aspect=1.2,
        errorbar=None,
        palette=colors,
    )
    ns = sorted(table["n"].unique())
    for direction, ax in zip(("push", "pull"), grid.axes.flat):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.axhline(1.1, color="k", lw=0.8, ls=":")
        size = "mean_nnz" if direction == "push" else "union_nnz"
        for workload, g in table.groupby("workload"):
            g = g.groupby("n")[size].mean()
            ax.plot(
                g.index,
                [1 + math.sqrt(n * math.log(n) / k) if k else float("nan") for n, k in g.items()],
                color=colors[workload],
                lw=0.7,
                alpha=0.7,
            )
    grid.set_titles("{col_name} imbalance")
    grid.figure.suptitle(
        "Theorem 2 check: Zen's h0 on our gradients (dotted: the paper's 1.1; thin: 1 + sqrt(n ln n / |I|))", y=1.04
    )
    return grid.figure
