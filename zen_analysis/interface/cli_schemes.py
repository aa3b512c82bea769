"""``zen-analysis check-scheme``: the scheme contract (:func:`~zen_analysis.comm.scheme_contract.check_scheme`) on a
scheme of one's own, named by where it is defined (``my_pkg.schemes:MyScheme``, ``path/to/file.py:MyScheme``) or by
its registered name; and the ``plugins`` key the commands that take scheme names share."""

from __future__ import annotations

import argparse
import sys

from zen_analysis.config.options import ints, names
from zen_analysis.config.plugins import load_object, load_plugins
from zen_analysis.interface.cli_options import Option, add_options, parse

PLUGINS = Option("plugins", [], "modules or .py files registering schemes, imported first (as sync.plugins)", names)
"""The ``--set plugins=`` key of ``replay`` and ``evaluate``: their scheme names may then be the plug-ins'."""
CHECK_OPTIONS = (
    Option("ranks", [2, 3, 4], "gloo rank counts to check on, comma-separated", ints),
    Option("seed", 0, "seed of the cases (the same seed, the same cases)"),
    Option("cases", 8, "random float32 cases per rank count, beside the fixed ones"),
    PLUGINS,
)
"""``check-scheme``'s ``--set`` keys."""


def load_option_plugins(got: dict) -> None:
    """Import the modules of a command's ``--set plugins=`` (:data:`PLUGINS`) before it reads scheme names."""
    load_plugins(got.get("plugins", []), key="--set plugins")


def cmd_check_scheme(args: argparse.Namespace) -> None:
    from zen_analysis.comm.scheme_contract import SchemeContractError, check_scheme  # deferred: torch, not --help

    got = parse("check-scheme", args)
    load_option_plugins(got)
    scheme = load_object(args.scheme) if ":" in args.scheme else args.scheme
    try:
        report = check_scheme(scheme, ranks=got["ranks"], seed=got["seed"], cases=got["cases"])
    except SchemeContractError as exc:
        again = f"zen-analysis check-scheme {args.scheme} --set ranks={exc.world} --set seed={exc.seed}"
        sys.exit(f"zen-analysis: check-scheme {args.scheme}: {exc}\n  or: {again}")
    rows = "and by rows " if report["rows"] else "(it does not sum by rows) "
    print(
        f"{report['scheme']} meets the contract on {', '.join(map(str, report['ranks']))} ranks: {report['cases']} "
        f"cases, every one of {len(report['dtypes'])} dtypes {rows}equal to dist.all_reduce bit for bit, its "
        "traffic model equal to the bytes and calls measured"
    )


def add_check_scheme_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check-scheme",
        help="check a scheme's contract on forked gloo ranks: lossless, and its bytes equal to its model",
    )
    p.add_argument("scheme", help="<module or file.py>:<Class> (e.g. my_pkg.schemes:MyScheme), or a registered name")
    add_options(p, CHECK_OPTIONS)
    p.set_defaults(func=cmd_check_scheme)
