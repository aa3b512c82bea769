"""The Zen paper's Fig. 11-15 modelled at its scale (:func:`~zen_analysis.paper.figures.paper_figures`):
throughput (Fig. 11-14) and communication speedup (Fig. 15) against machines per scheme, with the paper's points
where it gives them; and the speedups modelled from captured traces at one scale beside the paper's
(:func:`speedup_beside_paper`)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from zen_analysis.plots import style

CURVES = ("allreduce", "agsparse", "sparcml", "omnireduce", "zen")
"""The series of Fig. 11-14."""


def paper_points(table: pd.DataFrame) -> pd.DataFrame:
    """The paper's throughput points implied by its ratios: for every row carrying a throughput ratio
    (``paper_metric``), the paper's ``paper_of`` at ``paper`` x the model's ``paper_over`` throughput there (the
    paper states ratios, not samples/s). Columns ``workload, testbed, machines, scheme, samples_per_s, ratio``."""
    have = table[(table["paper_metric"] == "throughput") & table["paper"].notna()]
    key = ["workload", "testbed", "machines", "scheme"]
    model = table.set_index(key)["samples_per_s"]
    rows = []
    for r in have.itertuples():
        base = model.get((r.workload, r.testbed, r.machines, r.paper_over))
        if base is not None:
            rows.append((r.workload, r.testbed, r.machines, r.paper_of, r.paper * base, r.paper_ratio))
    return pd.DataFrame(rows, columns=[*key, "samples_per_s", "ratio"])


def throughput_vs_machines(table: pd.DataFrame, *, schemes=CURVES) -> plt.Figure:
    """Fig. 11-14 modelled: samples/s (log) against machines (log 2) per scheme of ``schemes``, one panel per testbed
    (rows) and workload (columns); stars are the paper's points (:func:`paper_points`), in the colour of the scheme
    they are the paper's throughput of. ``table``: :func:`~zen_analysis.paper.figures.paper_figures`."""
    style.apply()
    testbeds = list(dict.fromkeys(table["testbed"]))
    workloads = list(dict.fromkeys(table["workload"]))
    fig, axes = plt.subplots(
        len(testbeds), len(workloads), figsize=(3.3 * len(workloads), 3.1 * len(testbeds)), squeeze=False
    )
    points = paper_points(table)
    for i, testbed in enumerate(testbeds):
        for j, workload in enumerate(workloads):
            ax = axes[i, j]
            d = table[(table["testbed"] == testbed) & (table["workload"] == workload)]
            for scheme in schemes:
                s = d[d["scheme"] == scheme].sort_values("machines")
                ax.plot(s["machines"], s["samples_per_s"], marker="o", ms=3, color=style.color(scheme), label=scheme)
            p = points[(points["testbed"] == testbed) & (points["workload"] == workload)]
            for r in p.itertuples():
                star = {"marker": "*", "s": 110, "edgecolors": "black", "linewidths": 0.6, "zorder": 5}
                ax.scatter(r.machines, r.samples_per_s, color=style.color(r.scheme), **star)
            _panel(
                ax, d, f"{workload}, {testbed}", bottom=i == len(testbeds) - 1, ylabel="samples / s" if j == 0 else ""
            )
    _legend(fig, axes, "paper (its ratio x the model's baseline)", -0.04)
    fig.suptitle("Throughput against machines, modelled (paper Fig. 11-14)", y=1.0)
    fig.tight_layout()
    return fig


def _panel(ax: plt.Axes, d: pd.DataFrame, title: str, *, bottom: bool, ylabel: str, ybase: float = 10) -> None:
    """One panel's axes: machines on a log-2 axis ticked at the machine counts, the y axis log ``ybase``."""
    machines = sorted(d["machines"].unique())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=ybase)
    ax.set_xticks(machines, [str(m) for m in machines])
    style.readable_log_ticks(ax)
    ax.set_title(title, fontsize=9)
    ax.set(xlabel="machines (8 GPUs each)" if bottom else "", ylabel=ylabel)


def _legend(fig: plt.Figure, axes, paper: str, y: float) -> None:
    """The schemes' lines and a star for the paper's points, in one row under the panels."""
    handles, labels = axes[0, 0].get_legend_handles_labels()
    star = plt.Line2D([], [], marker="*", ls="", color="0.4", markeredgecolor="black", ms=10)
    labels = [*labels, paper]
    fig.legend([*handles, star], labels, loc="lower center", ncol=len(labels), bbox_to_anchor=(0.5, y), fontsize=8)


def comm_speedup_vs_machines(table: pd.DataFrame, *, schemes=CURVES) -> plt.Figure:
    """Fig. 15 modelled: AllReduce's communication time over each scheme's (log 2) against machines, one panel per
    testbed (rows) and workload (columns) that the paper gives a communication speedup for; stars are the paper's
    (its ratio x the model's speedup of the scheme it is over). ``table``: :func:`~zen_analysis.paper.figures.
    paper_figures`."""
    style.apply()
    have = table[(table["paper_metric"] == "comm") & table["paper"].notna()]
    testbeds = list(dict.fromkeys(have["testbed"])) or list(dict.fromkeys(table["testbed"]))
    workloads = list(dict.fromkeys(have["workload"])) or list(dict.fromkeys(table["workload"]))
    fig, axes = plt.subplots(
        len(testbeds), len(workloads), figsize=(3.3 * len(workloads), 3.1 * len(testbeds)), squeeze=False
    )
    model = table.set_index(["workload", "testbed", "machines", "scheme"])["comm_speedup"]
    for i, testbed in enumerate(testbeds):
        for j, workload in enumerate(workloads):
            ax = axes[i, j]
            d = table[(table["testbed"] == testbed) & (table["workload"] == workload)]
            for scheme in schemes:
                s = d[d["scheme"] == scheme].sort_values("machines")
                ax.plot(s["machines"], s["comm_speedup"], marker="o", ms=3, color=style.color(scheme), label=scheme)
            for r in have[(have["testbed"] == testbed) & (have["workload"] == workload)].itertuples():
                base = model.get((r.workload, r.testbed, r.machines, r.paper_over), 1.0)
                star = {"marker": "*", "s": 110, "edgecolors": "black", "linewidths": 0.6, "zorder": 5}
                ax.scatter(r.machines, r.paper * base, color=style.color(r.paper_of), **star)
            ylabel = "AllReduce comm time / scheme's" if j == 0 else ""
            _panel(ax, d, f"{workload}, {testbed}", bottom=i == len(testbeds) - 1, ylabel=ylabel, ybase=2)
    _legend(fig, axes, "paper", -0.06)
    fig.suptitle("Communication time speedup over AllReduce against machines, modelled (paper Fig. 15)", y=1.0)
    fig.tight_layout()
    return fig


def speedup_beside_paper(table: pd.DataFrame) -> plt.Figure:
    """Throughput over AllReduce per scheme at one scale, modelled from captured traces, beside the paper's: one
    panel per model size (``size``: the captured model's, the paper's), a group of bars per workload, a star where
    the paper gives the ratio. ``table``: what ``zen-analysis bench paper`` returns (``workload, scheme, size,
    speedup, paper``)."""
    style.apply()
    sizes = list(dict.fromkeys(table["size"]))
    workloads = list(dict.fromkeys(table["workload"]))
    schemes = [s for s in dict.fromkeys(table["scheme"]) if s != "allreduce"]
    fig, axes = plt.subplots(1, len(sizes), figsize=(1.6 + 2.2 * len(workloads) * len(sizes), 3.8), squeeze=False)
    colors = style.palette(schemes)  # ddp_sparse (stock DDP's sparse path) has no fixed colour
    width = 0.8 / max(len(schemes), 1)
    for ax, size in zip(axes[0], sizes, strict=True):
        d = table[table["size"] == size].groupby(["workload", "scheme"], sort=False)[["speedup", "paper"]].first()
        for k, scheme in enumerate(schemes):
            xs = [w + (k - (len(schemes) - 1) / 2) * width for w in range(len(workloads))]
            ys = [d["speedup"].get((w, scheme), float("nan")) for w in workloads]
            ax.bar(xs, ys, width, color=colors[scheme], label=scheme)
            paper = [d["paper"].get((w, scheme), float("nan")) for w in workloads]
            star = {"marker": "*", "s": 110, "edgecolors": "black", "linewidths": 0.6, "zorder": 5}
            ax.scatter(xs, paper, color=colors[scheme], **star)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log", base=2)
        style.readable_log_ticks(ax)
        ax.set_xticks(range(len(workloads)), workloads)
        ax.set(title=f"{size} model size", ylabel="throughput / AllReduce's" if ax is axes[0, 0] else "")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    star = plt.Line2D([], [], marker="*", ls="", color="0.4", markeredgecolor="black", ms=10)
    fig.legend(
        [*handles, star], [*labels, "paper"], loc="lower center", ncol=len(labels) + 1, bbox_to_anchor=(0.5, -0.08)
    )
    fig.suptitle("Throughput over AllReduce at 16 machines, modelled from captured traces (paper Fig. 11-14)", y=1.0)
    fig.tight_layout()
    return fig


def lab_check_steps(table: pd.DataFrame) -> plt.Figure:
    """The lab check's Fig. 11 in the lab: per rank count (panels), every scheme's step measured (bars, split into
    the compute slept and the sum) beside the model's (a black tick), fastest measured first.
    ``table``: :func:`~zen_experiments.lab_check.lab_check` (``ranks, scheme, measured_s, modelled_s,
    compute_s``)."""
    style.apply()
    counts = sorted(table["ranks"].unique())
    fig, axes = plt.subplots(1, len(counts), figsize=(4.6 * len(counts), 3.4), squeeze=False)
    for ax, n in zip(axes[0], counts):
        g = table[table["ranks"] == n].sort_values("measured_s")
        x = range(len(g))
        ax.bar(x, g["compute_s"], color="#c8c8c8", label="compute (slept)")
        ax.bar(x, g["measured_s"] - g["compute_s"], bottom=g["compute_s"], label="sum, measured")
        ax.scatter(x, g["modelled_s"], marker="_", s=400, color="black", zorder=3, label="modelled step")
        ax.set_xticks(list(x), g["scheme"], rotation=40, ha="right")
        ax.set_title(f"{n} ranks")
        ax.set_ylabel("lab step (s)")
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig
