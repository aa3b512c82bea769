"""``zen-analysis`` (also ``python -m zen_analysis``): the command line over recipes and runs.

Configs come from a recipe name or a JSON file, edited only with ``--set section.field=value``::

    zen-analysis recipes
    zen-analysis train smoke --set train.num_steps=20 --set dist.num_ranks=4
    zen-analysis traces <run_id>
    zen-analysis characterize <run_id>
    zen-analysis evaluate <run_id> [--max-workers 1024]
    zen-analysis replay <run_id> --ranks 4
    zen-analysis replay --synthetic --density 0.01 --skew 2 --overlap 0.5
    zen-analysis reproduce
    zen-analysis bench capture
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from pathlib import Path

from zen_analysis import recipes
from zen_analysis.config import ExperimentConfig, apply_overrides
from zen_analysis.experiments import benchmarks
from zen_analysis.experiments.benchmarks import BENCHMARKS, default_benchmarks


def _config(args: argparse.Namespace) -> ExperimentConfig:
    src = args.recipe
    if src.endswith(".json") or Path(src).is_file():
        cfg = config_file(Path(src))
    else:
        cfg = recipes.get(src)
    cfg = apply_overrides(cfg, args.set or [])
    if getattr(args, "run_id", None):
        cfg.run_id = args.run_id
    return cfg


def config_file(path: Path) -> ExperimentConfig:
    """An :class:`ExperimentConfig` from a JSON file; every error names the file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ValueError(f"config file {path} does not exist (give a recipe name or a config.json path)") from None
    except OSError as exc:
        raise ValueError(f"config file {path} cannot be read: {exc.strerror}") from None
    try:
        return ExperimentConfig.from_json(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"config file {path} is not valid JSON: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"config file {path}: {exc}") from None


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help=f"recipe name ({', '.join(recipes.RECIPES)}) or a config.json path")
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a config field, e.g. train.num_steps=20"
    )
    p.add_argument(
        "--run-id", help="run directory name: letters, digits, '.', '_', '-' (default: <recipe>-<timestamp>)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing run of the same id (never one in use)")


def cmd_recipes(args: argparse.Namespace) -> None:
    for name, fn in recipes.RECIPES.items():
        cfg = fn()
        print(
            f"{name:12s} {cfg.model.arch:6s} W={cfg.num_workers:<4d} steps={cfg.train.num_steps:<4d} "
            f"{_first_sentence(fn.__doc__)}"
        )


def _first_sentence(doc: str | None) -> str:
    """The docstring's first sentence, whole (joined across lines), not its first line."""
    text = " ".join((doc or "").split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def cmd_runs(args: argparse.Namespace) -> None:
    from zen_analysis import paths
    from zen_analysis.runs.rundir import delete_run, list_runs, prune_runs

    if args.delete:
        for run_id in args.delete:
            print(f"deleted {run_id} ({delete_run(run_id) / 1e6:.1f} MB)")
        return
    if args.prune:
        deleted = prune_runs()
        print(f"deleted {len(deleted)} runs" + (f": {', '.join(deleted)}" if deleted else "") + " (kept reproduce-*)")
        return
    rows = list_runs()
    if not rows:
        print(f"no runs under {paths.data_dir()}")
        return
    print(
        f"{'run id':40s} {'recipe':12s} {'ranks x w':>9s} {'steps':>5s} {'size':>9s} {'finished':>8s} "
        f"{'checkpoint':>10s}  started"
    )
    built_in_code = False
    for r in rows:
        ckpt = "-" if r["checkpoint"] is None else f"{r['checkpoint']}" + (" resume" if r["resumable"] else "")
        recipe = r["recipe"]
        if recipe not in recipes.RECIPES and recipe != "?":  # `config` would refuse the name: say it is none
            recipe, built_in_code = f"{recipe}*", True
        print(
            f"{r['run_id']:40s} {recipe:12s} {r['ranks_x_workers']:>9s} "
            f"{r['steps'] if r['steps'] is not None else '?':>5} "
            f"{r['bytes'] / 1e6:>7.1f}MB {'yes' if r['finished'] else 'no':>8s} {ckpt:>10s}  {r['started']}"
        )
    if built_in_code:
        print(
            f"'*': a name, not a recipe (the run's config was built in code, e.g. a parity run); its config is "
            f"{paths.runs_dir()}/<run id>/config.json, which config and train take in place of a recipe"
        )
    if any(r["resumable"] for r in rows):
        print(
            "'resume': unfinished with a checkpoint; continue it with zen-analysis train <recipe or its config.json> "
            "--run-id R --resume"
        )
    print(f"{len(rows)} runs, {sum(r['bytes'] for r in rows) / 1e6:.1f} MB under {paths.data_dir()}")


def cmd_config(args: argparse.Namespace) -> None:
    print(_config(args).to_json())


def cmd_train(args: argparse.Namespace) -> None:
    from zen_analysis.runs.launch import launch

    result = launch(_config(args), overwrite=args.overwrite, resume=args.resume)
    print(json.dumps(result.summary, indent=2))
    print(f"run directory: {result.run_dir}\ntraces: {result.trace_dir}")


def cmd_prepare(args: argparse.Namespace) -> None:
    from zen_analysis.runs.launch import prepare_run

    cfg = _config(args)
    run_dir = prepare_run(cfg, overwrite=args.overwrite)
    print(run_dir)
    print(
        "start the ranks on every machine with:\n  torchrun --nnodes=<N> --node-rank=<i> --nproc-per-node=<GPUs> "
        f"--rdzv-backend=c10d --rdzv-endpoint=<host0>:29500 -m zen_analysis.ranks.entry --run-dir {run_dir}"
    )


def cmd_traces(args: argparse.Namespace) -> None:
    from zen_analysis.capture.summary import describe_run

    print(describe_run(args.run, allow_missing=args.allow_missing))


def cmd_characterize(args: argparse.Namespace) -> None:
    from zen_analysis.sparsity.characterize import CharacterizeOptions, characterize

    opts = CharacterizeOptions(natural_granularity=args.natural_granularity, hash_seed=args.hash_seed)
    out = characterize(args.run, options=opts, force=args.force, allow_missing=args.allow_missing)
    print(f"tables in {out}")
    note = json.loads((out / "stamp.json").read_text()).get("missing")
    if note:
        print(f"INCOMPLETE ({note})")


def cmd_evaluate(args: argparse.Namespace) -> None:
    from zen_analysis.evaluation.evaluate import DEFAULT_TOPOLOGIES, crossover_report, evaluate, normalized

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


def cmd_reproduce(args: argparse.Namespace) -> None:
    from zen_analysis.experiments.reproduce import reproduce

    reproduce(args.set or [], only=_stages(args.only), skip=_stages(args.skip), full=args.full)


def _stages(values: list[str] | None) -> list[str]:
    return [v for item in values or [] for v in item.split(",") if v]


def cmd_replay(args: argparse.Namespace) -> None:
    from zen_analysis.evaluation import calibrate, measure, replay

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
    from zen_analysis.ranks import netlab

    if args.program:
        from zen_analysis.ranks.procs import run_in_lab

        program = args.program[1:] if args.program[0] == "--" else args.program
        sys.exit(
            run_in_lab(
                program, nodes=args.nodes, ranks_per_node=args.ranks_per_node, bandwidth_gbps=args.bandwidth_gbps or 1.0
            )
        )
    if args.cleanup:
        removed = netlab.cleanup()
        print(f"removed {len(removed)} lab namespaces" + (f": {', '.join(removed)}" if removed else ""))
        return
    ok, why = netlab.available()
    if not ok:
        sys.exit(f"zen-analysis: the network lab is unavailable: {why}")
    print("the network lab is available", end="")
    if args.bandwidth_gbps:
        with netlab.NetLab(2, args.bandwidth_gbps) as lab:
            print(
                f"; two nodes at {args.bandwidth_gbps:g} Gbit/s measure {lab.throughput_gbps():.3f} Gbit/s over TCP",
                end="",
            )
    print()


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
    "  zen-analysis train default --set dist.num_ranks=4 --set sync.scheme=zen --run-id my-zen",
    "prepare": "zen-analysis prepare default --run-id my-run --set dist.num_ranks=16",
    "runs": "zen-analysis runs\n  zen-analysis runs --delete smoke-20261201-101500\n  zen-analysis runs --prune",
    "traces": "zen-analysis traces reproduce-default",
    "characterize": "zen-analysis characterize reproduce-default --natural-granularity element",
    "evaluate": "zen-analysis evaluate reproduce-workers1024 --max-workers 1024",
    "reproduce": "zen-analysis reproduce\n  zen-analysis reproduce --full\n"
    "  zen-analysis reproduce --only zen\n  zen-analysis reproduce --skip netlab",
    "replay": "zen-analysis replay reproduce-default --ranks 4\n"
    "  zen-analysis replay --synthetic --density 0.01 --skew 2 --overlap 0.5\n"
    "  zen-analysis replay reproduce-default --bandwidth-gbps 1   # root: the emulated network",
    "bench": "zen-analysis bench zen\n  zen-analysis bench ddp --set bandwidths=loopback,1 --set rounds=2\n"
    "  zen-analysis bench netlab --set parts=schemes --set ranks=4\n"
    "  zen-analysis bench train --set ranks=4,8 --set rates=1",
    "netlab": "zen-analysis netlab --bandwidth-gbps 1\n  zen-analysis netlab --cleanup\n"
    "  zen-analysis netlab --nodes 4 --bandwidth-gbps 1 -- scripts/ddp_transformers.py --zen natural",
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
        _add_config_parsers,
        _add_runs_parser,
        _add_traces_parser,
        _add_characterize_parser,
        _add_evaluate_parser,
        _add_reproduce_parser,
        _add_replay_parser,
        _add_bench_parser,
        _add_netlab_parser,
    ):
        add_parsers(sub)  # in this order: the order of --help's list
    return parser


def _add_config_parsers(sub: argparse._SubParsersAction) -> None:
    """``recipes``, and ``config``, ``train``, ``prepare``: the commands that take a recipe and ``--set``."""
    sub.add_parser("recipes", help="list the named recipes").set_defaults(func=cmd_recipes)
    p = sub.add_parser("config", help="print a recipe's full config as JSON")
    _add_config_args(p)
    p.set_defaults(func=cmd_config)
    p = sub.add_parser("train", help="train and capture on N ranks (fork on CPU, torchrun on GPUs)")
    _add_config_args(p)
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run of --run-id from its newest complete checkpoint (train.checkpoint_every); its config "
        "may differ in train.num_steps only",
    )
    p.set_defaults(func=cmd_train)
    p = sub.add_parser("prepare", help="write a run directory and data caches for a manual torchrun launch")
    _add_config_args(p)
    p.set_defaults(func=cmd_prepare)


def _add_runs_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "runs", help="list the runs under the data root (id, recipe, size, finished), delete or prune them"
    )
    p.add_argument(
        "--delete", nargs="+", metavar="RUN_ID", help="delete these runs (directory, traces, derived tables)"
    )
    p.add_argument("--prune", action="store_true", help="delete every run but make reproduce's (reproduce-*)")
    p.set_defaults(func=cmd_runs)


def _add_traces_parser(sub: argparse._SubParsersAction) -> None:
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


def _add_characterize_parser(sub: argparse._SubParsersAction) -> None:
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


def _add_evaluate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="modelled bytes and time of every scheme on a run's traces")
    p.add_argument("run", help="run id under data/traces, or a trace directory")
    p.add_argument(
        "--topology", action="append", help="topology preset (repeatable; default: the paper's and h200-node)"
    )
    p.add_argument("--max-workers", type=int, default=128, help="largest n modelled (up to the run's virtual workers)")
    p.add_argument("--force", action="store_true", help="recompute even if the table is up to date")
    _add_allow_missing(p)
    p.set_defaults(func=cmd_evaluate)


def _add_reproduce_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reproduce",
        help="the main job: train + capture on the default data, then summarise",
        description="The main job, stage by stage: train, characterize, schemes, netlab, zen; with --full also "
        "edit and scale (the README's table says what each writes).",
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


def _add_replay_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="every scheme on real gloo ranks, replaying a run's captured tensors, measured beside the model",
        aliases=["measure", "bench-comm"],  # its names until 2026-12, kept working with a notice
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


def _add_bench_parser(sub: argparse._SubParsersAction) -> None:
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


def _add_netlab_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "netlab",
        help="the emulated network (namespaces + shaped links): check it, or remove leftovers",
        description="Without options: say whether a lab can be built here (root, iproute2, veth, "
        "bridge, tbf). Examples: zen-analysis netlab --bandwidth-gbps 1; zen-analysis netlab --cleanup; "
        "zen-analysis netlab --nodes 4 --bandwidth-gbps 1 -- scripts/ddp_transformers.py --zen natural "
        "(one torchrun per lab node running that program)",
    )
    p.add_argument("--cleanup", action="store_true", help="delete every lab namespace (zl-<tag>-...) left behind")
    p.add_argument("--bandwidth-gbps", type=float, help="also build a 2-node lab at this rate and measure it")
    p.add_argument("--nodes", type=int, default=2, help="with a program: lab nodes, one torchrun each")
    p.add_argument("--ranks-per-node", type=int, default=1, help="with a program: torchrun's --nproc-per-node")
    p.add_argument(
        "program",
        nargs=argparse.REMAINDER,
        help="-- script.py [args] (or -- -m module [args]): run it under torchrun across the lab's nodes",
    )
    p.set_defaults(func=cmd_netlab)


def main(argv: list[str] | None = None) -> None:
    # Nothing here needs the hub unless a hub dataset is named; never wait on network retries otherwise.
    argv = sys.argv[1:] if argv is None else argv
    if not any("data.source=hub" in a for a in argv):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    from zen_analysis.capture.traces import TraceError

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
