"""The command line's one option grammar, for the commands with options of their own (``replay``, ``evaluate``,
``characterize``, ``netlab``; ``bench`` and the config commands parse theirs the same way elsewhere).

Every value is a ``--set key=value`` (repeatable, the last one of a key winning, lists comma-separated:
:func:`~zen_analysis.config.options.parse_options`); only switches (``--force``, ``--synthetic``, ``--resume``) and
names (a run id, an ``--out`` path) stay flags. Each command declares its keys once as :class:`Option` rows, which
give its parser, its ``--help`` (every key with its default) and its parsed values. The flags these keys replaced
still parse, hidden, with a notice naming the ``--set`` that replaces them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from zen_analysis.config.options import parse_options


@dataclass(frozen=True)
class Option:
    """One ``--set`` key of a command: its default, how a value converts (None: by the default's type), what it
    means, and the flag it replaced (kept working, hidden)."""

    key: str
    default: Any
    help: str
    convert: Callable[[str], Any] | None = None
    legacy: str = ""


def add_options(p: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    """``--set`` on ``p``, its keys listed in ``p``'s description (one per line, with its default), and their former
    flags as hidden aliases."""
    width = max(len(f"{o.key}={_shown(o.default)}") for o in options)
    rows = [f"  {f'{o.key}={_shown(o.default)}':<{width}}  {o.help}" for o in options]
    p.description = "\n\n".join([p.description or "", "options (--set KEY=VALUE, repeatable):\n" + "\n".join(rows)])
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="an option listed above")
    for o in options:
        if o.legacy:
            p.add_argument(o.legacy, dest=_legacy(o), default=None, help=argparse.SUPPRESS)
    p.set_defaults(options=tuple(options))


def parse(command: str, args: argparse.Namespace) -> dict[str, Any]:
    """``command``'s values: the defaults, then any former flags given (with a notice), then ``--set`` items."""
    options: tuple[Option, ...] = args.options
    old = [(o, getattr(args, _legacy(o))) for o in options if o.legacy and getattr(args, _legacy(o)) is not None]
    if old:
        moved = ", ".join(f"{o.legacy} {v} is --set {o.key}={v}" for o, v in old)
        print(f"note: zen-analysis {command}: {moved} now (the old flags still work)", file=sys.stderr)
    items = [f"{o.key}={v}" for o, v in old] + list(args.set or [])
    defaults = {o.key: o.default for o in options}
    types = {o.key: o.convert for o in options if o.convert is not None}
    try:
        return parse_options(command, items, defaults, types)
    except ValueError as exc:
        raise SystemExit(f"zen-analysis {exc}") from None


def _legacy(o: Option) -> str:
    return f"legacy_{o.key}"


def _shown(value: Any) -> str:
    if value is None or value == "":
        return "none"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "none"
    return str(value).lower() if isinstance(value, bool) else str(value)
