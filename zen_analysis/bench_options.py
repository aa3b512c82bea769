"""The ``--set key=value`` options of ``zen-analysis bench <name>``, parsed the same way for every benchmark."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any


def ints(value: str) -> list[int]:
    """``4,8`` -> ``[4, 8]``; an empty value is an empty list."""
    return [int(v) for v in value.split(",") if v]


def floats(value: str) -> list[float]:
    """``0.5,1`` -> ``[0.5, 1.0]``; an empty value is an empty list."""
    return [float(v) for v in value.split(",") if v]


def names(value: str) -> list[str]:
    """``schemes,nodes`` -> ``["schemes", "nodes"]``; an empty value is an empty list."""
    return [v for v in value.split(",") if v]


def parse_sets(
    bench: str,
    items: Iterable[str],
    defaults: Mapping[str, Any],
    types: Mapping[str, Callable[[str], Any]] | None = None,
) -> dict[str, Any]:
    """``defaults`` updated by ``items`` (``key=value`` strings, the last one of a key wins). A value is converted by
    ``types[key]``, else by its default's own type (``int``, ``float`` or ``str``), so list-valued options need a
    ``types`` entry (:func:`ints`, :func:`floats`, :func:`names`). An unknown key or a value that does not convert
    raises a ValueError naming the benchmark's keys; with no ``defaults`` every item is an error."""
    opts = dict(defaults)
    types = types or {}
    for item in items:
        if not opts:
            raise ValueError(f"bench {bench} takes no --set overrides")
        key, _, value = item.partition("=")
        if key not in opts:
            raise ValueError(f"bench {bench} takes --set {', '.join(opts)}=...; got {item!r}")
        try:
            opts[key] = types.get(key, type(defaults[key]))(value)
        except ValueError as exc:
            raise ValueError(f"bench {bench} takes --set {', '.join(opts)}=...; got {item!r} ({exc})") from None
    return opts
