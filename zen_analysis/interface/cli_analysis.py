"""The ``zen-analysis`` commands that read a run's traces: ``traces``, ``characterize``, ``evaluate`` and
``replay`` (the schemes on gloo ranks, measured beside the model), each command with its parser."""

from __future__ import annotations

import argparse
import json
import sys

from zen_analysis.config.options import names, one_of, optional
from zen_analysis.interface.cli_options import Option, add_options, parse
from zen_analysis.interface.cli_schemes import PLUGINS, load_option_plugins

CHARACTERIZE_OPTIONS = (
    Option(
        "natural_granularity", "row", "embedding gradients by row (token id) or element", one_of("row", "element"),
        "--natural-granularity",
    ),
    Option("hash_seed", 0, "seed of Zen's h0 for the hash owner", legacy="--hash-seed"),
)  # fmt: skip
"""``characterize``'s ``--set`` keys (and the flags they replaced)."""
EVALUATE_OPTIONS = (
    Option(
        "topologies", [], "topology presets, comma-separated (none: the paper's and h200-node)", names, "--topology"
    ),
    Option("max_workers", 128, "largest n modelled, up to the run's virtual workers", legacy="--max-workers"),
    PLUGINS,
)
"""``evaluate``'s ``--set`` keys (and the flags they replaced)."""
REPLAY_OPTIONS = (
    Option("ranks", 4, "gloo ranks; rank r replays worker r", legacy="--ranks"),
    Option("steps", 3, "captured steps to replay, the first ones", legacy="--steps"),
    Option("tensor", None, "captured tensor (none: the run's natural, embedding, tensor)", optional(str), "--tensor"),
    Option("repeats", 25, "timed repeats per scheme after 2 warm-up runs", legacy="--repeats"),
    Option("schemes", [], "scheme names, comma-separated (none: all)", names, "--schemes"),
    Option("numel", 2_000_000, "--synthetic: elements of the tensor", legacy="--numel"),
    Option("density", 0.025, "--synthetic: non-zeros per rank / elements", legacy="--density"),
    Option("skew", 1.0, "--synthetic: 0 uniform, larger crowds non-zeros towards index 0", legacy="--skew"),
    Option("overlap", 0.3, "--synthetic: fraction of each set shared by all ranks", legacy="--overlap"),
    Option(
        "bandwidth", None, "Gbit/s: run the ranks in the emulated network, each behind a link of this rate (root)",
        optional(float), "--bandwidth-gbps",
    ),
    PLUGINS,
)  # fmt: skip
"""``replay``'s ``--set`` keys (and the flags they replaced)."""


def cmd_traces(args: argparse.Namespace) -> None:
    from zen_analysis.capture.summary import describe_run  # deferred: torch; --help stays light

    print(describe_run(args.run, allow_missing=args.allow_missing))


def cmd_characterize(args: argparse.Namespace) -> None:
    from zen_analysis.sparsity.characterize import CharacterizeOptions, characterize  # deferred: torch, not --help

    got = parse("characterize", args)
    opts = CharacterizeOptions(natural_granularity=got["natural_granularity"], hash_seed=got["hash_seed"])
    out = characterize(args.run, options=opts, force=args.force, allow_missing=args.allow_missing)
    print(f"tables in {out}")
    note = json.loads((out / "stamp.json").read_text()).get("missing")
    if note:
        print(f"INCOMPLETE ({note})")


def cmd_evaluate(args: argparse.Namespace) -> None:
    from zen_analysis.evaluation.crossover import crossover_report  # deferred: torch; --help stays light
    from zen_analysis.evaluation.evaluate import DEFAULT_TOPOLOGIES, evaluate, normalized  # deferred: torch

    got = parse("evaluate", args)
    load_option_plugins(got)
    topologies = got["topologies"] or list(DEFAULT_TOPOLOGIES)
    df = evaluate(
        args.run,
        topologies=topologies,
        max_workers=got["max_workers"],
        force=args.force,
        allow_missing=args.allow_missing,
    )
    print(f"{len(df)} rows in {df.attrs['path']}")
    if df.attrs["missing"]:
        print(f"INCOMPLETE ({df.attrs['missing']})")
    print(f"modelled time / dense all-reduce on {topologies[0]} (mean over captured steps and tensors):")
    print(normalized(df, topology=topologies[0]).round(2).to_string())
    print("where dense all-reduce catches up (the crossover):")
    for line in crossover_report(args.run, allow_missing=args.allow_missing):
        print(" ", line)


def cmd_replay(args: argparse.Namespace) -> None:
    from zen_analysis.evaluation import calibrate, measure, replay  # deferred: torch; --help stays light

    if args.command in ("bench-comm", "measure"):
        print(
            f"note: `zen-analysis {args.command}` is now `zen-analysis replay` (the old name still works)",
            file=sys.stderr,
        )
    o = parse("replay", args)
    load_option_plugins(o)
    schemes = o["schemes"] or None
    if args.synthetic:
        if args.run:
            raise ValueError("give a run id or --synthetic, not both")
        df, stats = replay.replay_synthetic(
            numel=o["numel"],
            density=o["density"],
            skew=o["skew"],
            overlap=o["overlap"],
            ranks=o["ranks"],
            repeats=o["repeats"],
            schemes=schemes,
            recalibrate=args.recalibrate,
            bandwidth_gbps=o["bandwidth"],
        )
        print(
            f"synthetic: {o['ranks']} ranks, numel {o['numel']:,}; measured "
            + ", ".join(f"{k} {v:.3f}" for k, v in stats.items())
        )
    else:
        if not args.run:
            raise ValueError("replay needs a run id (`zen-analysis runs` lists them) or --synthetic")
        df = replay.replay_run(
            args.run,
            ranks=o["ranks"],
            steps=o["steps"],
            tensor=o["tensor"],
            repeats=o["repeats"],
            schemes=schemes,
            recalibrate=args.recalibrate,
            bandwidth_gbps=o["bandwidth"],
        )
        print(
            f"{df['run'].iloc[0]} / {df['tensor'].iloc[0]} ({df['numel'].iloc[0]:,} elements): {o['ranks']} "
            "gloo ranks, "
            f"steps {sorted(df['step'].unique())}, {o['repeats']} repeats; medians over steps"
        )
    topo = calibrate.model_topology(o["ranks"], bandwidth_gbps=o["bandwidth"])
    fits = ", ".join(f"{p} {1e6 * a:.0f} us + bytes / {b / 1e9:.3f} GB/s" for p, a, b in topo.calibrated)
    print(f"model {topo.name} calibrated at {o['ranks']} ranks: {fits}")
    if o["bandwidth"]:
        print(
            f"measured in the emulated network, each rank behind a {o['bandwidth']:g} Gbit/s link (alpha fitted "
            "inside the lab, bandwidth the link's TCP payload rate)"
        )
    print(measure.report(measure.summarize(df)))
    if args.out:
        measure.write_summary(df, args.out, command=" ".join(sys.argv))
        print(f"per-scheme summary written to {args.out}")


def add_traces_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("traces", help="summarise the captured traces of a run")
    p.add_argument("run", help="run id under data/traces (`zen-analysis runs` lists them), or a trace directory")
    _add_allow_missing(p)
    p.set_defaults(func=cmd_traces)


def _add_allow_missing(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-missing",
        action="store_true",
        help="analyse what is left of a run missing some trace shards; the output names the missing workers and steps",
    )


def add_characterize_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("characterize", help="overlap, densification, skew, drift and imbalance tables of a run")
    p.add_argument("run", help="run id under data/traces, or a trace directory")
    add_options(p, CHARACTERIZE_OPTIONS)
    p.add_argument("--force", action="store_true", help="recompute even if the tables are up to date")
    _add_allow_missing(p)
    p.set_defaults(func=cmd_characterize)


def add_evaluate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="modelled bytes and time of every scheme on a run's traces")
    p.add_argument("run", help="run id under data/traces, or a trace directory")
    add_options(p, EVALUATE_OPTIONS)
    p.add_argument("--force", action="store_true", help="recompute even if the table is up to date")
    _add_allow_missing(p)
    p.set_defaults(func=cmd_evaluate)


def add_replay_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="every scheme on real gloo ranks, replaying a run's captured tensors, measured beside the model",
        aliases=["measure", "bench-comm"],  # its former names, kept working with a notice
    )
    p.add_argument("run", nargs="?", help="run id under data/traces (or use --synthetic)")
    p.add_argument("--recalibrate", action="store_true", help="re-fit this machine's alpha and bandwidth first")
    p.add_argument("--synthetic", action="store_true", help="generated index sets instead of a run")
    add_options(p, REPLAY_OPTIONS)
    p.add_argument(
        "--out",
        metavar="PATH",
        help="also write the per-scheme summary as Parquet (scheme, ranks, "
        "bandwidth_gbps, numel, bytes_sent_max_rank, measured_s_median, modelled_s, lossless, ...)",
    )
    p.set_defaults(func=cmd_replay)
