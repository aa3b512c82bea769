"""Figures of the scheme evaluation (Zen paper Fig. 8 analogue)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from zen_analysis.plots import style
from zen_analysis.plots.sparsity import ratio_axes


def normalized_time(schemes_df: pd.DataFrame, *, topology: str = "paper-tcp25") -> plt.Figure:
    """Fig. 8: modelled time of each scheme / dense all-reduce vs number of workers, one panel per workload."""
    from zen_analysis.comm.evaluate import relative_to_allreduce

    style.apply()
    df = relative_to_allreduce(schemes_df, topology=topology)
    g = df.groupby(["workload", "scheme", "n"], as_index=False)["normalized"].mean()
    grid = sns.relplot(data=g, x="n", y="normalized", hue="scheme", col="workload", kind="line", marker="o",
                       col_wrap=min(3, g["workload"].nunique()), height=3.4, aspect=1.1)  # fmt: skip
    ratio_axes(grid, sorted(g["n"].unique()), xlabel="workers n", ylabel="time / dense all-reduce")
    grid.figure.suptitle(f"Modelled synchronization time relative to all-reduce ({topology}; paper Fig. 8)", y=1.03)
    return grid.figure
