"""One option grammar for every command: ``--set key=value``, repeatable, the last one of a key winning.

``train``, ``config`` and ``prepare`` take config fields (dotted keys, ``--set train.num_steps=20``:
:func:`~zen_analysis.config.overrides.apply_overrides`); ``bench <name>``, ``replay``, ``evaluate`` and
``characterize`` take their own options as plain keys (``--set ranks=4,8``), parsed here against the command's
defaults. Both split an item the same way (:func:`~zen_analysis.config.overrides.split_set`), and a list value is
comma-separated everywhere (:func:`~zen_analysis.config.overrides.split_list`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from zen_analysis.config.overrides import split_list, split_set

CONFIG = "config"
"""The key of :func:`parse_options`' result that holds the dotted (config field) items, in order."""


def ints(value: str) -> list[int]:
    """``4,8`` -> ``[4, 8]``; an empty value is an empty list."""
    return [int(v) for v in split_list(value)]


def floats(value: str) -> list[float]:
    """``0.5,1`` -> ``[0.5, 1.0]``; an empty value is an empty list."""
    return [float(v) for v in split_list(value)]


def names(value: str) -> list[str]:
    """``schemes,nodes`` -> ``["schemes", "nodes"]``; an empty value is an empty list."""
    return split_list(value)


def flag(value: str) -> bool:
    """``true`` / ``false`` (``1`` / ``0``, ``yes`` / ``no``) -> a bool; anything else raises a ValueError."""
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"{value!r} is not true or false")


def one_of(*choices: str) -> Callable[[str], str]:
    """A value among ``choices``; anything else raises a ValueError naming them, with a "did you mean"."""

    def parse(value: str) -> str:
        if value in choices:
            return value
        close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
        raise ValueError(f"one of {', '.join(choices)}" + (f"; did you mean {close[0]!r}?" if close else ""))

    return parse


def optional(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """``convert``, with an empty value or ``none`` (``--set tensor=``) meaning None: for options whose default is
    None."""

    def parse(value: str) -> Any:
        return None if value.strip().lower() in ("", "none") else convert(value)

    return parse


def parse_options(
    command: str,
    items: Iterable[str],
    defaults: Mapping[str, Any],
    types: Mapping[str, Callable[[str], Any]] | None = None,
    *,
    config: bool = False,
) -> dict[str, Any]:
    """``defaults`` updated by ``items`` (``key=value`` strings, the last one of a key wins). A value is converted by
    ``types[key]``, else by its default's own type (``int``, ``float``, ``str``; ``bool`` by :func:`flag`), so
    list-valued options and those defaulting to None need a ``types`` entry. With ``config`` (the command trains a
    config), dotted keys are collected in order under :data:`CONFIG` for ``apply_overrides``, which checks them. An
    unknown key, a dotted one without ``config`` or a value that does not convert raises a ValueError naming
    ``command``'s keys."""
    opts = dict(defaults)
    types = dict(types or {})
    fields: list[str] = []
    takes = ", ".join([*opts, *(["section.field"] if config else [])])
    for item in items:
        key, value = split_set(item, "key=value")
        if "." in key and config:
            fields.append(item)
            continue
        if key not in opts:
            if not opts and not config:
                raise ValueError(f"{command} takes no --set options; got {item!r}")
            raise ValueError(f"{command} takes --set {takes}=...; got {item!r}")
        default = defaults[key]
        convert = types.get(key) or (flag if isinstance(default, bool) else type(default))
        try:
            opts[key] = convert(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{command} takes --set {takes}=...; got {item!r} ({exc})") from None
    if config:
        opts[CONFIG] = fields
    return opts
