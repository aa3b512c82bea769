"""The ``--set key=value`` options of ``zen-analysis bench <name>``, parsed the same way for every benchmark and with
every command's grammar (:mod:`zen_analysis.config.options`): a benchmark's own options are plain names
(``--set ranks=4,8``); a dotted key is a field of the config the benchmark trains (``--set train.num_steps=20``),
passed on to :func:`~zen_analysis.config.apply_overrides` where the benchmark trains one and refused elsewhere."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib import pyplot as plt

from zen_analysis.atomic import atomic_write_text
from zen_analysis.config.options import parse_options
from zen_analysis.derived import write_table
from zen_analysis.plots import style


def parse_sets(
    bench: str,
    items: Iterable[str],
    defaults: Mapping[str, Any],
    types: Mapping[str, Callable[[str], Any]] | None = None,
    *,
    config: bool = False,
) -> dict[str, Any]:
    """``bench <bench>``'s options: :func:`~zen_analysis.config.options.parse_options` under that command's name."""
    return parse_options(f"bench {bench}", items, defaults, types, config=config)


def publish(table: pd.DataFrame, stem: Path, shown: pd.DataFrame, opts: dict, draw=None, figure: str = "") -> None:
    """A benchmark's results: ``table`` as ``<stem>.parquet`` (stamped with the options), ``shown`` as
    ``<stem>.txt`` and on stdout, and ``draw(table)`` (if given) as figure ``figure``."""

    write_table(stem.with_suffix(".parquet"), table, {"options": opts})
    text = shown.to_string(index=False)
    atomic_write_text(stem.with_suffix(".txt"), text + "\n")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(text)
    if draw is not None:
        draw_figure(draw(table), figure)


def draw_figure(fig, figure: str) -> None:
    """Save ``fig`` as ``figures/<figure>.png`` / ``.pdf`` and close it."""

    style.savefig(fig, figure)
    plt.close(fig)
