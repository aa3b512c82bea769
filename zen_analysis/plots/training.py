"""Training-side figures: the loss curve (live while ranks run, or from ``metrics.jsonl``) and capture densities."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from zen_analysis.plots import style


def loss_curve(metrics: pd.DataFrame, *, ax: plt.Axes | None = None, label: str | None = None) -> plt.Figure:
    """Training loss (mean over ranks) per step, with validation points where logged."""
    style.apply()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(metrics["step"], metrics["loss"], label=label or "train loss")
    if "val_loss" in metrics:
        v = metrics.dropna(subset=["val_loss"])
        ax.plot(v["step"], v["val_loss"], "o", label="val loss")
    ax.set(xlabel="step", ylabel="loss")
    ax.legend()
    return ax.figure


class LiveLoss:
    """``launch(cfg, on_metrics=LiveLoss())``: redraws the loss curve in the notebook as steps complete."""

    def __init__(self, *, every_s: float = 1.0) -> None:
        self.rows: list[dict] = []
        self.every_s = every_s
        self._handle = None
        self._last = 0.0

    def __call__(self, rows: list[dict]) -> None:
        import time

        from IPython.display import display

        self.rows.extend(rows)
        now = time.monotonic()
        if now - self._last < self.every_s and len(self.rows) > len(rows):
            return
        self._last = now
        fig = loss_curve(pd.DataFrame(self.rows))
        if self._handle is None:
            self._handle = display(fig, display_id=True)
        else:
            self._handle.update(fig)
        plt.close(fig)


def capture_densities(summary: pd.DataFrame) -> plt.Figure:
    """Density of each captured tensor, one point per (worker, step): natural vs top-k at a glance."""
    style.apply()
    df = summary.assign(tensor=summary["tensor"].str.replace(r"^model\.", "", regex=True))
    fig, ax = plt.subplots(figsize=(7, 0.6 * df["tensor"].nunique() + 1.5))
    sns.stripplot(data=df, x="density", y="tensor", hue="kind", ax=ax, size=3, alpha=0.6, jitter=0.25)
    ax.set(xlabel="density (non-zeros / elements) per worker and step", ylabel="")
    ax.set_xlim(left=0)
    return fig
