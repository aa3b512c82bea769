"""Figures of the scheme evaluation (Zen paper Fig. 8 analogue)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from zen_analysis.plots import style
from zen_analysis.plots.sparsity import _log2_axis


def normalized_time(schemes_df: pd.DataFrame, *, topology: str = "paper-tcp25") -> plt.Figure:
    """Fig. 8: modelled time of each scheme / dense all-reduce vs number of workers, one panel per workload."""
    style.apply()
    df = schemes_df[schemes_df["topology"] == topology]
    base = df[df["scheme"] == "allreduce"].set_index(["workload", "step", "tensor", "n"])["seconds"]
    df = df.join(base.rename("allreduce_s"), on=["workload", "step", "tensor", "n"])
    df = df.assign(normalized=df["seconds"] / df["allreduce_s"])
    g = df.groupby(["workload", "scheme", "n"], as_index=False)["normalized"].mean()
    grid = sns.relplot(data=g, x="n", y="normalized", hue="scheme", col="workload", kind="line", marker="o",
                       col_wrap=min(3, g["workload"].nunique()), height=3.4, aspect=1.1)  # fmt: skip
    ns = sorted(g["n"].unique())
    for ax in grid.axes.flat:
        _log2_axis(ax, ns)
        ax.set_yscale("log", base=2)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set(xlabel="workers n", ylabel="time / dense all-reduce")
    grid.figure.suptitle(f"Modelled synchronization time relative to all-reduce ({topology}; paper Fig. 8)", y=1.03)
    return grid.figure
