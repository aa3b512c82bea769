"""Training-side figures: the loss curve (live while ranks run, or from ``metrics.jsonl``) and capture densities."""

from __future__ import annotations

import time

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from zen_analysis.plots import style
from zen_analysis.runs.observe import forward as forwarder
from zen_analysis.runs.observe import tokens_per_s

__all__ = ["LiveLoss", "capture_densities", "live_view", "loss_curve"]


def loss_curve(
    metrics: pd.DataFrame, *, ax: plt.Axes | None = None, label: str | None = None, final: dict | None = None
) -> plt.Figure:
    """Training loss (mean over ranks) per step, with validation points where logged and the run's final
    validation loss (``final``: rank 0's summary) at its last step."""
    style.apply()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(metrics["step"], metrics["loss"], ".-" if len(metrics) < 30 else "-", label=label or "train loss")
    v = metrics.dropna(subset=["val_loss"]) if "val_loss" in metrics else metrics.iloc[:0]
    if final is not None and final.get("val_loss") is not None and len(metrics):
        v = pd.concat([v, pd.DataFrame({"step": [metrics["step"].iloc[-1]], "val_loss": [final["val_loss"]]})])
    if len(v):
        ax.plot(v["step"], v["val_loss"], "o", label="validation loss")
    ax.set(xlabel="step", ylabel="loss (cross-entropy)")
    if len(metrics) == 1:  # one point: give the axis a width
        ax.set_xlim(metrics["step"].iloc[0] - 1, metrics["step"].iloc[0] + 1)
    ax.legend()
    return ax.figure


def live_view(rows: list[dict], *, title: str = "", final: dict | None = None) -> plt.Figure:
    """What :class:`LiveLoss` draws: the loss curve and each step's throughput (tokens/s over all ranks)."""

    style.apply()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5), width_ratios=(3, 2))
    metrics = pd.DataFrame(rows)
    if len(metrics):
        loss_curve(metrics, ax=left, final=final)
        right.plot(metrics["step"], tokens_per_s(rows), ".-" if len(metrics) < 30 else "-", color="C2")
        if len(metrics) == 1:
            right.set_xlim(metrics["step"].iloc[0] - 1, metrics["step"].iloc[0] + 1)
    else:
        left.text(0.5, 0.5, "waiting for the first step", ha="center", va="center", transform=left.transAxes)
    right.set(xlabel="step", ylabel="tokens/s (all ranks)", ylim=(0, None))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


class LiveLoss:
    """``launch(cfg, on_metrics=LiveLoss())``: the loss curve (train, validation) and throughput in the notebook,
    redrawn at most every ``every_s`` seconds as steps complete and once more when the run ends (the launcher
    calls :meth:`finish`: the final validation loss, or what stopped the run). ``forward`` also sends every
    number on to ``fn(name, value, step)``, e.g. TensorBoard's ``SummaryWriter.add_scalar``
    (:func:`zen_analysis.runs.observe.forward`)."""

    def __init__(self, *, every_s: float = 1.0, forward=None) -> None:

        self.rows: list[dict] = []
        self.every_s = every_s
        self.forward = forwarder(forward) if forward is not None else None
        self.draws = 0
        self.title = ""
        self._handle = None
        self._last = 0.0

    def __call__(self, rows: list[dict]) -> None:

        self.rows.extend(rows)
        if self.forward is not None:
            self.forward(rows)
        now = time.monotonic()
        if now - self._last < self.every_s and len(self.rows) > len(rows):
            return
        self._last = now
        last = self.rows[-1]
        self._draw(f"step {last['step'] + 1}: loss {last['loss']:.3f} (running)")

    def finish(self, summary: dict | None, error: BaseException | None) -> None:
        """The last redraw: every step the run logged, its final validation loss, or why it stopped."""
        if self.forward is not None:
            self.forward.finish(summary, error)
        if error is not None:
            why = "interrupted" if isinstance(error, KeyboardInterrupt) else f"failed ({type(error).__name__})"
            self._draw(f"{why} after {len(self.rows)} steps")
        elif summary and summary.get("val_loss") is not None:
            self._draw(
                f"finished: {len(self.rows)} steps, final loss {summary.get('final_loss', float('nan')):.3f}, "
                f"validation loss {summary['val_loss']:.3f}, {summary.get('tokens_per_s', 0):.0f} tokens/s",
                final=summary,
            )
        else:
            self._draw(f"finished: {len(self.rows)} steps", final=summary)

    def _draw(self, title: str, final: dict | None = None) -> None:
        from IPython.display import display  # deferred: the notebooks extra

        self.title = title
        fig = live_view(self.rows, title=title, final=final)
        image = style.as_image(fig)
        plt.close(fig)
        if self._handle is None:
            self._handle = display(image, display_id=True)
        else:
            self._handle.update(image)
        self.draws += 1


def capture_densities(summary: pd.DataFrame) -> plt.Figure:
    """Density of each captured tensor, one point per (worker, step): natural vs top-k at a glance."""
    style.apply()
    df = summary.assign(tensor=summary["tensor"].str.replace(r"^model\.", "", regex=True))
    fig, ax = plt.subplots(figsize=(7, 0.6 * df["tensor"].nunique() + 1.5))
    sns.stripplot(data=df, x="density", y="tensor", hue="kind", ax=ax, size=3, alpha=0.6, jitter=0.25)
    ax.set(xlabel="density (non-zeros / elements) per worker and step", ylabel="")
    ax.set_xlim(left=0)
    return fig
