"""``zen-analysis`` (also ``python -m zen_analysis``): the command line over recipes and runs.

Configs come from a recipe name or a JSON file, edited only with ``--set section.field=value``; every other
command's values are ``--set key=value`` too (:mod:`zen_analysis.interface.cli_options`)::

    zen-analysis recipes
    zen-analysis train smoke --set train.num_steps=20 --set dist.num_ranks=4
    zen-analysis traces <run_id>
    zen-analysis characterize <run_id>
    zen-analysis evaluate <run_id> [--set max_workers=1024]
    zen-analysis replay <run_id> --set ranks=4
    zen-analysis replay --synthetic --set density=0.01 --set skew=2 --set overlap=0.5
    zen-analysis check-scheme my_pkg.schemes:MyScheme
    zen-analysis reproduce
    zen-analysis bench capture
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys

from zen_analysis.interface.cli_analysis import (
    add_characterize_parser,
    add_evaluate_parser,
    add_replay_parser,
    add_traces_parser,
)
from zen_analysis.interface.cli_experiments import add_bench_parser, add_netlab_parser, add_reproduce_parser
from zen_analysis.interface.cli_runs import add_config_parsers, add_runs_parser, config_file
from zen_analysis.interface.cli_schemes import add_check_scheme_parser

__all__ = ["EXAMPLES", "build_parser", "config_file", "main"]


class _Parser(argparse.ArgumentParser):
    """argparse's parser with a "did you mean" on an invalid choice (a subcommand typo, an unknown option value):
    Python 3.11's argparse has no ``suggest_on_error``. Subcommands' parsers are of this class too."""

    def error(self, message: str):
        bad = re.search(r"invalid choice: '([^']*)'", message)
        if bad:
            choices = [str(c) for a in self._actions if a.choices for c in a.choices]
            close = difflib.get_close_matches(bad[1], choices, n=3, cutoff=0.6)
            if close:
                message += f"; did you mean {' or '.join(repr(c) for c in close)}?"
        super().error(message)


class _Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every option's default in --help (unless it is None, False or already written), examples kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


EXAMPLES = {
    "recipes": "zen-analysis recipes",
    "config": "zen-analysis config default --set train.num_steps=10",
    "train": "zen-analysis train smoke\n"
    "  zen-analysis train smoke --run-id long --set train.checkpoint_every=20\n"
    "  zen-analysis train smoke --run-id long --set train.checkpoint_every=20 --resume\n"
    "  zen-analysis train default --set dist.num_ranks=4 --set sync.method=natural --set sync.scheme=zen "
    "--run-id my-zen",
    "prepare": "zen-analysis prepare default --run-id my-run --set dist.num_ranks=16",
    "runs": "zen-analysis runs\n  zen-analysis runs --delete smoke-20261201-101500\n  zen-analysis runs --prune",
    "traces": "zen-analysis traces reproduce-default",
    "characterize": "zen-analysis characterize reproduce-default --set natural_granularity=element",
    "evaluate": "zen-analysis evaluate reproduce-workers1024 --set max_workers=1024",
    "reproduce": "zen-analysis reproduce\n  zen-analysis reproduce --full\n"
    "  zen-analysis reproduce --only zen\n  zen-analysis reproduce --skip netlab",
    "replay": "zen-analysis replay reproduce-default --set ranks=4\n"
    "  zen-analysis replay --synthetic --set density=0.01 --set skew=2 --set overlap=0.5\n"
    "  zen-analysis replay reproduce-default --set bandwidth=1   # root: the emulated network",
    "check-scheme": "zen-analysis check-scheme my_pkg.schemes:MyScheme\n"
    "  zen-analysis check-scheme schemes/ring.py:Ring --set ranks=2,4\n"
    "  zen-analysis replay my-run --set plugins=my_pkg.schemes --set schemes=my_scheme,zen",
    "bench": "zen-analysis bench zen\n  zen-analysis bench ddp --set bandwidths=loopback,1 --set rounds=2\n"
    "  zen-analysis bench netlab --set parts=schemes --set ranks=4\n"
    "  zen-analysis bench train --set ranks=4,8 --set rates=1",
    "netlab": "zen-analysis netlab --set bandwidth=1\n  zen-analysis netlab --cleanup\n"
    "  zen-analysis netlab --set nodes=4 --set bandwidth=1 -- scripts/ddp_transformers.py --zen natural",
}


def build_parser() -> argparse.ArgumentParser:
    """The ``zen-analysis`` parser: one subcommand per ``cmd_*`` function, each with its examples."""
    parser = _Parser(
        prog="zen-analysis",
        description="Sparse gradient synchronization toolkit.",
        epilog="examples:\n  " + "\n  ".join(v.split("\n")[0] for v in EXAMPLES.values()),
        formatter_class=_Help,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add = sub.add_parser

    def command(name: str, help: str, **kw) -> argparse.ArgumentParser:  # noqa: A002 - argparse's own name
        return add(
            name,
            help=help,
            description=kw.pop("description", help),
            formatter_class=_Help,
            epilog="examples:\n  " + EXAMPLES[name] if name in EXAMPLES else None,
            **kw,
        )

    sub.add_parser = command  # every subcommand gets the defaults formatter and its examples
    for add_parsers in (
        add_config_parsers,
        add_runs_parser,
        add_traces_parser,
        add_characterize_parser,
        add_evaluate_parser,
        add_reproduce_parser,
        add_replay_parser,
        add_check_scheme_parser,
        add_bench_parser,
        add_netlab_parser,
    ):
        add_parsers(sub)  # in this order: the order of --help's list
    return parser


def main(argv: list[str] | None = None) -> None:
    # Nothing here needs the hub unless a datasets corpus is named (data.source=hf, or the earlier hub); never wait
    # on network retries otherwise.
    argv = sys.argv[1:] if argv is None else argv
    if not any(f"data.source={source}" in a for a in argv for source in ("hf", "hub")):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    from zen_analysis.capture.traces import TraceError  # deferred: torch; --help stays light

    try:
        args.func(args)
    except KeyboardInterrupt:  # a launcher has already stopped its ranks on its way out
        print(
            "\nzen-analysis: interrupted (ranks it had started were stopped; finished files are intact)",
            file=sys.stderr,
        )
        sys.exit(130)
    except (ValueError, TraceError) as exc:  # config, input and trace mistakes: a clear message, no traceback
        sys.exit(f"zen-analysis: error: {exc}")
    except RuntimeError as exc:
        if type(exc).__name__ != "RankFailedError":
            raise
        sys.exit(f"zen-analysis: error: {exc}")
