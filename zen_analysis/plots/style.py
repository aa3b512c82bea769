"""Shared figure style and the one place figures are written (``figures/<name>.png`` and ``.pdf``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns

from zen_analysis import paths


def apply() -> None:
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight"})


def savefig(fig: plt.Figure, name: str) -> list[Path]:
    """Write ``fig`` as PNG and PDF under figures/; returns the paths."""
    out = paths.figures_dir()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for ext in ("png", "pdf"):
        path = out / f"{name}.{ext}"
        fig.savefig(path)
        written.append(path)
    return written
