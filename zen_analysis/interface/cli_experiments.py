"""The ``zen-analysis`` commands that drive experiments: ``reproduce`` (named stages), ``bench`` (the benchmark
registry, read as data) and ``netlab`` (the emulated network), each command with its parser."""

from __future__ import annotations

import argparse
import sys

from zen_analysis.config.options import optional
from zen_analysis.interface.cli_options import Option, add_options, parse
from zen_analysis.ranks import netlab
from zen_experiments import benchmarks
from zen_experiments.benchmarks import BENCHMARKS, default_benchmarks

NETLAB_OPTIONS = (
    Option("bandwidth", None, "Gbit/s: also build a 2-node lab at this rate and measure it (with a program: the "
           "links' rate, default 1)", optional(float), "--bandwidth-gbps"),
    Option("nodes", 2, "with a program: lab nodes, one torchrun each", legacy="--nodes"),
    Option("ranks_per_node", 1, "with a program: torchrun's --nproc-per-node", legacy="--ranks-per-node"),
)  # fmt: skip
"""``netlab``'s ``--set`` keys (and the flags they replaced)."""


def cmd_reproduce(args: argparse.Namespace) -> None:
    from zen_experiments.reproduce import reproduce  # deferred: torch; --help stays light

    reproduce(args.set or [], only=_stages(args.only), skip=_stages(args.skip), full=args.full)


def _stages(values: list[str] | None) -> list[str]:
    return [v for item in values or [] for v in item.split(",") if v]


def cmd_bench(args: argparse.Namespace) -> None:
    unknown = [n for n in args.what if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(
            f"zen-analysis bench: unknown benchmark {', '.join(unknown)}; the benchmarks are {', '.join(BENCHMARKS)}"
        )
    if args.set and len(args.what) != 1:
        raise SystemExit("zen-analysis bench: --set options belong to one benchmark; name exactly one")
    for name in args.what or default_benchmarks():
        benchmarks.run(name, args.set or [])


def cmd_netlab(args: argparse.Namespace) -> None:
    o = parse("netlab", args)
    if args.program:
        from zen_analysis.ranks.procs import run_in_lab  # deferred: torch; --help stays light

        program = args.program[1:] if args.program[0] == "--" else args.program
        rate = o["bandwidth"] or 1.0
        sys.exit(run_in_lab(program, nodes=o["nodes"], ranks_per_node=o["ranks_per_node"], bandwidth_gbps=rate))
    if args.cleanup:
        removed = netlab.cleanup()
        print(f"removed {len(removed)} lab namespaces" + (f": {', '.join(removed)}" if removed else ""))
        return
    ok, why = netlab.available()
    if not ok:
        sys.exit(f"zen-analysis: the network lab is unavailable: {why}")
    print("the network lab is available", end="")
    if o["bandwidth"]:
        with netlab.NetLab(2, o["bandwidth"]) as lab:
            print(
                f"; two nodes at {o['bandwidth']:g} Gbit/s measure {lab.throughput_gbps():.3f} Gbit/s over TCP",
                end="",
            )
    print()


def add_reproduce_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reproduce",
        help="the main job: train + capture on the default data, then summarise",
        description="The main job, stage by stage: train, characterize, schemes, netlab, zen; with --full also "
        "edit and scale (the guide's table says what each writes).",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a field of every run the stages train (train, zen's parity runs, edit, scale)",
    )
    p.add_argument(
        "--only", action="append", metavar="STAGE", help="run only these stages (comma-separated or repeated)"
    )
    p.add_argument("--skip", action="append", metavar="STAGE", help="skip these stages")
    p.add_argument(
        "--full",
        action="store_true",
        help="also run the EDiT stage (edit: five trainings and an ablation, the longest) and the 1024-worker "
        "scale mode (scale)",
    )
    p.set_defaults(func=cmd_reproduce)


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks (ratios measured side by side, medians)")
    p.add_argument(
        "what",
        nargs="*",
        metavar="NAME",
        help="the benchmarks to run (none: every one that needs no network lab, as make bench does): "
        + "; ".join(f"{n}: {b.about}{' (root, the lab)' if b.needs_lab else ''}" for n, b in BENCHMARKS.items()),
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a benchmark option (each names its own; an unknown one lists them)",
    )
    p.set_defaults(func=cmd_bench)


def add_netlab_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "netlab",
        help="the emulated network (namespaces + shaped links): check it, or remove leftovers",
        description="Without options: say whether a lab can be built here (root, iproute2, veth, "
        "bridge, tbf). Examples: zen-analysis netlab --set bandwidth=1; zen-analysis netlab --cleanup; "
        "zen-analysis netlab --set nodes=4 --set bandwidth=1 -- scripts/ddp_transformers.py --zen natural "
        "(one torchrun per lab node running that program)",
    )
    p.add_argument("--cleanup", action="store_true", help="delete every lab namespace (zl-<tag>-...) left behind")
    add_options(p, NETLAB_OPTIONS)
    p.add_argument(
        "program",
        nargs=argparse.REMAINDER,
        help="-- script.py [args] (or -- -m module [args]): run it under torchrun across the lab's nodes",
    )
    p.set_defaults(func=cmd_netlab)
