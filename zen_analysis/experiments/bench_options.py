"""The ``--set key=value`` options of ``zen-analysis bench <name>``, parsed the same way for every benchmark and with
the configs' grammar (:func:`zen_analysis.config.overrides.split_set`): a benchmark's own options are plain names
(``--set ranks=4,8``); a dotted key is a field of the config the benchmark trains (``--set train.num_steps=20``),
passed on to :func:`~zen_analysis.config.apply_overrides` where the benchmark trains one and refused elsewhere."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib import pyplot as plt

from zen_analysis.atomic import atomic_write_text
from zen_analysis.config.overrides import split_list, split_set
from zen_analysis.derived import write_table
from zen_analysis.plots import style

CONFIG = "config"
"""The key of :func:`parse_sets`'s result that holds the dotted (config field) overrides, in order."""


def ints(value: str) -> list[int]:
    """``4,8`` -> ``[4, 8]``; an empty value is an empty list."""
    return [int(v) for v in split_list(value)]


def flag(value: str) -> bool:
    """``true`` / ``false`` (``1`` / ``0``, ``yes`` / ``no``) -> a bool; anything else raises a ValueError."""
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"{value!r} is not true or false")


def floats(value: str) -> list[float]:
    """``0.5,1`` -> ``[0.5, 1.0]``; an empty value is an empty list."""
    return [float(v) for v in split_list(value)]


def names(value: str) -> list[str]:
    """``schemes,nodes`` -> ``["schemes", "nodes"]``; an empty value is an empty list."""
    return split_list(value)


def parse_sets(
    bench: str,
    items: Iterable[str],
    defaults: Mapping[str, Any],
    types: Mapping[str, Callable[[str], Any]] | None = None,
    *,
    config: bool = False,
) -> dict[str, Any]:
    """``defaults`` updated by ``items`` (``key=value`` strings, the last one of a key wins). A value is converted by
    ``types[key]``, else by its default's own type (``int``, ``float`` or ``str``), so list-valued options need a
    ``types`` entry (:func:`ints`, :func:`floats`, :func:`names`). With ``config`` (the benchmark trains a config),
    dotted keys are collected in order under :data:`CONFIG` for ``apply_overrides``, which checks them. An unknown
    key, a dotted one without ``config`` or a value that does not convert raises a ValueError naming the
    benchmark's keys."""
    opts = dict(defaults)
    types = types or {}
    fields: list[str] = []
    takes = ", ".join([*opts, *(["section.field"] if config else [])])
    for item in items:
        key, value = split_set(item, "key=value")
        if "." in key and config:
            fields.append(item)
            continue
        if key not in opts:
            if not opts and not config:
                raise ValueError(f"bench {bench} takes no --set options; got {item!r}")
            raise ValueError(f"bench {bench} takes --set {takes}=...; got {item!r}")
        try:
            opts[key] = types.get(key, type(defaults[key]))(value)
        except ValueError as exc:
            raise ValueError(f"bench {bench} takes --set {takes}=...; got {item!r} ({exc})") from None
    if config:
        opts[CONFIG] = fields
    return opts


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
