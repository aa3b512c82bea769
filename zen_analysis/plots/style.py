"""Shared figure style and the one place figures are written (``figures/<name>.png`` and ``.pdf``)."""

from __future__ import annotations

import io
import math
from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns
from matplotlib.colors import to_hex, to_rgb
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from zen_analysis import paths

__all__ = [
    "METHOD_COLORS",
    "SCHEME_COLORS",
    "apply",
    "as_image",
    "color",
    "notebook_savefig",
    "palette",
    "readable_log_ticks",
    "savefig",
]


def apply() -> None:
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight"})


NOTEBOOKS = "notebooks"
"""The folder of ``figures/`` the notebooks write to (:func:`notebook_savefig`), so running them leaves the figures
``make reproduce`` wrote as it left them."""


def notebook_savefig(fig: plt.Figure, name: str) -> None:
    """A notebook's figure: written as PNG and PDF under ``figures/notebooks/`` (never over ``make reproduce``'s
    figures), returning nothing, so the cell shows the figure and no list of paths."""
    savefig(fig, name, folder=NOTEBOOKS)


def savefig(fig: plt.Figure, name: str, *, folder: str | None = None) -> list[Path]:
    """Write ``fig`` as PNG and PDF under figures/ (or its ``folder``); returns the paths."""
    out = paths.figures_dir() / folder if folder else paths.figures_dir()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for ext in ("png", "pdf"):
        path = out / f"{name}.{ext}"
        fig.savefig(path)
        written.append(path)
    return written


# One colour per scheme in every figure (Okabe-Ito, colour-blind safe): Zen the most salient, dense all-reduce a
# neutral grey, the other sparse schemes distinct hues, the planner (auto) black. Top-k variants ("top-k + zen",
# "topk") are the lighter shade of their scheme.
SCHEME_COLORS = {
    "zen": "#D55E00",
    "allreduce": "#7F7F7F",
    "agsparse": "#0072B2",
    "sparcml": "#009E73",
    "omnireduce": "#E69F00",
    "sparse_ps": "#56B4E9",
    "bp_coo": "#CC79A7",
    "auto": "#000000",
}
METHOD_COLORS = {
    "sync": "#7F7F7F",
    "post_local_sgd": "#0072B2",
    "diloco": "#009E73",
    "edit": "#D55E00",
    "a_edit": "#CC79A7",
}
"""Local SGD methods (synchronous training the grey reference, EDiT the salient one)."""
_ALIASES = {
    "dense": "allreduce",
    "dense all-reduce": "allreduce",
    "stock": "allreduce",
    "stock ddp": "allreduce",
    "natural": "zen",
    "natural (zen)": "zen",
    "post-local sgd": "post_local_sgd",
    "a-edit": "a_edit",
}
_SPARE = ("#8C564B", "#9467BD", "#BCBD22", "#17BECF", "#F0E442", "#1F3A93", "#A0522D")
"""Colours of names outside the fixed palettes, none close to a scheme's."""
_TOPK = ("top-k + ", "top-k+", "topk+", "topk-", "topk ")


def color(name: str) -> str:
    """The colour of a scheme, local SGD method or training variant named like one (see :data:`SCHEME_COLORS`)."""

    key = str(name).lower().strip()
    topk = key.startswith(_TOPK) or key == "topk"
    for prefix in _TOPK:
        key = key.removeprefix(prefix)
    key = {"topk": "zen", "overlap": "zen", "zen, overlapped": "zen"}.get(key, _ALIASES.get(key, key))
    base = SCHEME_COLORS.get(key) or METHOD_COLORS.get(key)
    if base is None:
        raise KeyError(name)
    if not topk:
        return base
    return to_hex(tuple(c + (1 - c) * 0.45 for c in to_rgb(base)))


def palette(names) -> dict:
    """``{name: colour}`` for seaborn's ``palette=``: the fixed colour of every known name, the colour-blind palette's
    unused colours for the rest, so a name keeps its colour across panels and figures."""
    out, spare = {}, iter(_SPARE)
    for n in dict.fromkeys(names):
        try:
            out[n] = color(n)
        except KeyError:
            out[n] = next(spare, "#333333")
    return out


def readable_log_ticks(ax: plt.Axes, which: str = "y") -> None:
    """At least three labelled ticks on a log axis, whatever its range: 1-2-5 steps, finer where the range is
    narrow, labelled as plain numbers (call after the data and limits are set)."""

    axis = ax.yaxis if which == "y" else ax.xaxis
    lo, hi = sorted(ax.get_ylim() if which == "y" else ax.get_xlim())
    if lo <= 0 or hi <= 0:
        return
    ticks: list[float] = []
    for mantissas in ((1,), (1, 2, 5), (1, 1.5, 2, 3, 5, 7), (1, 1.2, 1.4, 1.6, 1.8, 2, 2.5, 3, 4, 5, 6, 8)):
        ticks = [
            m * 10.0**e
            for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
            for m in mantissas
            if lo <= m * 10.0**e <= hi
        ]
        if len(ticks) >= 3:
            break
    if len(ticks) < 3:  # a very narrow range: three points spread over it, two significant digits
        for digits in range(2, 8):
            ticks = sorted({float(f"{lo * (hi / lo) ** f:.{digits}g}") for f in (0.1, 0.5, 0.9)})
            if len(ticks) == 3:
                break
    if len(ticks) > 9:
        ticks = ticks[:: math.ceil(len(ticks) / 9)]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def as_image(fig: plt.Figure):
    """``fig`` as a PNG ``IPython.display.Image``: what live views display, so they show whatever matplotlib's
    backend is (under ``MPLBACKEND=Agg`` a displayed Figure is only its text repr)."""

    from IPython.display import Image  # deferred: the notebooks extra

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=plt.rcParams["figure.dpi"], bbox_inches="tight")
    return Image(data=buf.getvalue(), format="png")
