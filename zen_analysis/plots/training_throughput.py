"""Measured training figures, the analogues of the Zen paper's Fig. 11-14: throughput and the exchange per step
against the link rate and the number of ranks, each median step split into its parts, and top-k against dense
training in wall-clock time to a loss (``bench netlab``'s and ``bench train``'s tables in, a Figure out)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from zen_analysis.plots import style


def training_vs_bandwidth(sweep: pd.DataFrame) -> plt.Figure:
    """The measured analogue of Fig. 11-14: per variant vs link rate, the exchange per step (what the network
    changes; left) and the training throughput (middle), and each median step split into compute, waiting for the
    slowest rank and the exchange (right). ``sweep``: :func:`zen_experiments.lab_sweeps.training_sweep`."""
    style.apply()
    fig, (ax, cx, bx) = plt.subplots(1, 3, figsize=(17, 4.6), gridspec_kw={"width_ratios": [1, 1, 1.3]})
    rates = sorted(sweep["bandwidth_gbps"].unique())
    for axis, col, label, title in (
        (ax, "exchange_s", "seconds per step", "exchange (rank 0, median)"),
        (cx, "tokens_per_s", "tokens / s", "training throughput (median step)"),
    ):
        sns.lineplot(
            data=sweep,
            x="bandwidth_gbps",
            y=col,
            hue="variant",
            marker="o",
            ax=axis,
            legend=axis is ax,
            palette=style.palette(sweep["variant"].unique()),
        )
        if len(rates) >= 3:  # a log axis only where there are enough rates to label it
            axis.set_xscale("log")
        axis.set_xticks(rates, [f"{r:g}" for r in rates])
        axis.minorticks_off()
        axis.set(xlabel="link rate (Gbit/s, each rank)", ylabel=label, title=title)
    sns.move_legend(ax, "upper left", bbox_to_anchor=(0, -0.18), ncol=3, fontsize=8, title=None)
    d = sweep.assign(label=sweep["variant"] + " @ " + sweep["bandwidth_gbps"].map("{:g}".format))
    bx.barh(d["label"], d["compute_s"], color="0.6", label="compute (rank 0)")
    bx.barh(
        d["label"], d["sync_s"] - d["exchange_s"], left=d["compute_s"], color="0.85", label="waiting for slower ranks"
    )
    bx.barh(
        d["label"], d["exchange_s"], left=d["compute_s"] + d["sync_s"] - d["exchange_s"], color="0.2", label="exchange"
    )
    bx.set(xlabel="median seconds per step, rank 0", title="compute + sync (waiting + exchange)")
    bx.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.2), ncol=3)
    ranks = int(sweep["ranks"].iloc[0])
    workers = int(sweep["workers_per_rank"].iloc[0]) if "workers_per_rank" in sweep else None
    per_rank = f" x {workers} micro-batch{'es' if workers > 1 else ''}" if workers else ""
    fig.suptitle(
        f"Training the default model on {ranks} ranks{per_rank} in the emulated network (paper Fig. 11-14, measured)",
        y=1.02,
    )
    fig.tight_layout()
    return fig


STEP_PARTS = (
    ("compute_s", "compute", "0.6"),
    ("wait_s", "waiting for slower ranks", "0.85"),
    ("exchange_s", "exchange", "0.2"),
    ("rest_s", "clip + optimizer + zero_grad + loss mean", "tab:orange"),
)
"""The parts of a median training step :func:`training_vs_ranks` stacks: column, label, colour."""


def training_vs_ranks(bench: pd.DataFrame) -> plt.Figure:
    """The measured analogue of Fig. 11: per workload, training throughput against the number of ranks at each
    link rate (one line per variant), and the median step of each variant at the largest rank count split into
    compute, waiting, exchange and the rest of the step. ``bench``: ``zen-analysis bench train``'s table."""
    style.apply()
    workloads = list(dict.fromkeys(bench["workload"]))
    fig, axes = plt.subplots(
        len(workloads), 2, figsize=(15, 4.4 * len(workloads)), squeeze=False, gridspec_kw={"width_ratios": [1, 1.2]}
    )
    palette = style.palette(bench["variant"].unique())
    for (ax, bx), workload in zip(axes, workloads):
        d = bench[bench["workload"] == workload]
        rate = d["bandwidth_gbps"].min()
        sns.lineplot(
            data=d[d["bandwidth_gbps"] == rate],
            x="ranks",
            y="tokens_per_s",
            hue="variant",
            marker="o",
            ax=ax,
            palette=palette,
        )
        ranks = sorted(d["ranks"].unique())
        ax.set_xticks(ranks, [str(r) for r in ranks])
        ax.set(xlabel="ranks", ylabel="tokens / s (median step)", title=f"{workload} at {rate:g} Gbit/s per rank")
        ax.legend(fontsize=8, title=None)
        last = d[(d["ranks"] == ranks[-1]) & (d["bandwidth_gbps"] == rate)]
        left = pd.Series(0.0, index=last.index)
        for col, label, color in STEP_PARTS:
            bx.barh(last["variant"], last[col], left=left, color=color, label=label)
            left = left + last[col]
        bx.set(xlabel="median seconds per step, rank 0", title=f"{workload}: the step at {ranks[-1]} ranks")
        bx.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle("Training throughput behind shaped links (paper Fig. 11, measured)", y=1.0)
    fig.tight_layout()
    return fig


def training_vs_rate(bench: pd.DataFrame) -> plt.Figure:
    """The measured analogue of Fig. 11 against Fig. 12 (25 vs 100 Gbit/s): per workload, training throughput
    against the link rate at the largest rank count, one line per variant. ``bench``: ``bench train``'s table."""
    style.apply()
    workloads = list(dict.fromkeys(bench["workload"]))
    fig, axes = plt.subplots(1, len(workloads), figsize=(7 * len(workloads), 4.4), squeeze=False)
    palette = style.palette(bench["variant"].unique())
    for ax, workload in zip(axes[0], workloads):
        d = bench[bench["workload"] == workload]
        d = d[d["ranks"] == d["ranks"].max()]
        sns.lineplot(data=d, x="bandwidth_gbps", y="tokens_per_s", hue="variant", marker="o", ax=ax, palette=palette)
        rates = sorted(d["bandwidth_gbps"].unique())
        ax.set_xscale("log")
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.minorticks_off()
        ax.set(
            xlabel="link rate (Gbit/s, each rank)",
            ylabel="tokens / s (median step)",
            title=f"{workload} on {int(d['ranks'].iloc[0])} ranks",
        )
        ax.legend(fontsize=8, title=None)
    fig.suptitle("Training throughput against the link rate (paper Fig. 11-12, measured)", y=1.02)
    fig.tight_layout()
    return fig


def time_to_loss(bench: pd.DataFrame) -> plt.Figure:
    """Top-k against dense training in wall-clock time: each variant's loss (trailing mean of 5 steps) against the
    seconds it has trained, with the dense run's final loss as the target line (left), and the time each variant
    took to reach it (right; a missing bar: not reached). ``bench``: ``bench train``'s ``topk`` table."""
    style.apply()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(15, 4.6), gridspec_kw={"width_ratios": [1.4, 1]})
    palette = style.palette(bench["variant"].unique())
    for _, r in bench.iterrows():
        loss = pd.Series(r["losses"]).rolling(5).mean()
        ax.plot(pd.Series(r["step_times"]).cumsum(), loss, label=r["variant"], color=palette.get(r["variant"]))
    target = float(bench["target_loss"].iloc[0])
    ax.axhline(target, color="k", ls="--", lw=1, label=f"dense final loss {target:.3f}")
    ax.set(
        xlabel="wall-clock seconds (sum of rank 0's steps)",
        ylabel="training loss (mean of the last 5 steps)",
        title=f"{int(bench['ranks'].iloc[0])} ranks at {bench['bandwidth_gbps'].iloc[0]:g} Gbit/s",
    )
    ax.legend(fontsize=8)
    bx.barh(bench["variant"], bench["time_to_loss_s"].fillna(0), color=[palette.get(v) for v in bench["variant"]])
    for y, (_, r) in enumerate(bench.iterrows()):
        if pd.isna(r["time_to_loss_s"]):
            bx.text(
                0,
                y,
                f"  not reached in {len(r['losses'])} steps ({sum(r['step_times']):.0f} s): {r['final_loss']:.3f}",
                va="center",
                fontsize=8,
            )
    bx.set(xlabel="seconds to the dense run's final loss", title="time to loss")
    fig.suptitle("Top-k of every bucket + a sparse scheme against dense all-reduce, to the same loss", y=1.02)
    fig.tight_layout()
    return fig
