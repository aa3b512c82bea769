"""The ``zen-analysis`` commands that read a run's traces: ``traces``, ``characterize``, ``evaluate`` and
``replay`` (the schemes on gloo ranks, measured beside the model), each command with its parser."""

from __future__ import annotations

import argparse
import json
import sys


def cmd_traces(args: argparse.Namespace) -> None:
    from zen_analysis.capture.summary import describe_run  # deferred: torch; --help stays light

    print(describe_run(args.run, allow_missing=args.allow_missing))


def cmd_characterize(args: argparse.Namespace) -> None:
    from zen_analysis.sparsity.characterize import CharacterizeOptions, characterize  # deferred: torch, not --help

    opts = CharacterizeOptions(natural_granularity=args.natural_granularity, hash_seed=args.hash_seed)
    out = characterize(args.run, options=opts, force=args.force, allow_missing=args.allow_missing)
    print(f"tables in {out}")
    note = json.loads((out / "stamp.json").read_text()).get("missing")
    if note:
        print(f"INCOMPLETE ({note})")


def cmd_evaluate(args: argparse.Namespace) -> None:
    from zen_analysis.evaluation.crossover import crossover_report  # deferred: torch; --help stays light
    from zen_analysis.evaluation.evaluate import DEFAULT_TOPOLOGIES, evaluate, normalized  # deferred: torch

    topologies = args.topology or list(DEFAULT_TOPOLOGIES)
    df = evaluate(
        args.run,
        topologies=topologies,
        max_workers=args.max_workers,
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
    schemes = args.schemes.split(",") if args.schemes else None
    if args.synthetic:
        if args.run:
            raise ValueError("give a run id or --synthetic, not both")
        df, stats = replay.replay_synthetic(
            numel=args.numel,
            density=args.density,
            skew=args.skew,
            overlap=args.overlap,
            ranks=args.ranks,
            repeats=args.repeats,
            schemes=schemes,
            recalibrate=args.recalibrate,
            bandwidth_gbps=args.bandwidth_gbps,
        )
        print(
            f"synthetic: {args.ranks} ranks, numel {args.numel:,}; measured "
            + ", ".join(f"{k} {v:.3f}" for k, v in stats.items())
        )
    else:
        if not args.run:
            raise ValueError("replay needs a run id (`zen-analysis runs` lists them) or --synthetic")
        df = replay.replay_run(
            args.run,
            ranks=args.ranks,
            steps=args.steps,
            tensor=args.tensor,
            repeats=args.repeats,
            schemes=schemes,
            recalibrate=args.recalibrate,
            bandwidth_gbps=args.bandwidth_gbps,
        )
        print(
            f"{df['run'].iloc[0]} / {df['tensor'].iloc[0]} ({df['numel'].iloc[0]:,} elements): {args.ranks} "
            "gloo ranks, "
            f"steps {sorted(df['step'].unique())}, {args.repeats} repeats; medians over steps"
        )
    topo = calibrate.model_topology(args.ranks, bandwidth_gbps=args.bandwidth_gbps)
    fits = ", ".join(f"{p} {1e6 * a:.0f} us + bytes / {b / 1e9:.3f} GB/s" for p, a, b in topo.calibrated)
    print(f"model {topo.name} calibrated at {args.ranks} ranks: {fits}")
    if args.bandwidth_gbps:
        print(
            f"measured in the emulated network, each rank behind a {args.bandwidth_gbps:g} Gbit/s link (alpha fitted "
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
    p.add_argument(
        "--natural-granularity",
        choices=["row", "element"],
        default="row",
        help="embedding gradients by rows (token ids) or by elements",
    )
    p.add_argument("--hash-seed", type=int, default=0, help="seed of Zen's h0 for the hash owner")
    p.add_argument("--force", action="store_true", help="recompute even if the tables are up to date")
    _add_allow_missing(p)
    p.set_defaults(func=cmd_characterize)


def add_evaluate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="modelled bytes and time of every scheme on a run's traces")
    p.add_argument("run", help="run id under data/traces, or a trace directory")
    p.add_argument(
        "--topology", action="append", help="topology preset (repeatable; default: the paper's and h200-node)"
    )
    p.add_argument("--max-workers", type=int, default=128, help="largest n modelled (up to the run's virtual workers)")
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
    p.add_argument("--ranks", type=int, default=4, help="gloo ranks; rank r replays worker r")
    p.add_argument("--steps", type=int, default=3, help="captured steps to replay (the first ones)")
    p.add_argument("--tensor", help="captured tensor (default: the run's natural, embedding, tensor)")
    p.add_argument("--repeats", type=int, default=25, help="timed repeats per scheme after 2 warm-up runs")
    p.add_argument("--schemes", help="comma-separated scheme names (default: all)")
    p.add_argument("--recalibrate", action="store_true", help="re-fit this machine's alpha and bandwidth first")
    p.add_argument("--synthetic", action="store_true", help="generated index sets instead of a run")
    p.add_argument("--numel", type=int, default=2_000_000, help="--synthetic: elements of the tensor")
    p.add_argument("--density", type=float, default=0.025, help="--synthetic: non-zeros per rank / elements")
    p.add_argument("--skew", type=float, default=1.0, help="0 uniform; larger crowds non-zeros towards index 0")
    p.add_argument("--overlap", type=float, default=0.3, help="fraction of each set shared by all ranks")
    p.add_argument(
        "--bandwidth-gbps",
        type=float,
        help="run the ranks in the emulated network, each behind a link of this rate (root; see `netlab`)",
    )
    p.add_argument(
        "--out",
        metavar="PATH",
        help="also write the per-scheme summary as Parquet (scheme, ranks, "
        "bandwidth_gbps, numel, bytes_sent_max_rank, measured_s_median, modelled_s, lossless, ...)",
    )
    p.set_defaults(func=cmd_replay)
