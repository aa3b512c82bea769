"""The ``zen-analysis`` commands over recipes and runs: ``recipes``, ``config``, ``train``, ``prepare`` (a recipe
or a config.json, edited with ``--set``) and ``runs`` (list, delete, prune), each command with its parser."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from zen_analysis import paths, recipes
from zen_analysis.config import ExperimentConfig, apply_overrides
from zen_analysis.runs.rundir import delete_run, list_runs, prune_runs


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
        return ExperimentConfig.from_json(text, source=str(path))
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
    from zen_analysis.runs.launch import launch  # deferred: torch; --help stays light

    result = launch(_config(args), overwrite=args.overwrite, resume=args.resume)
    print(json.dumps(result.summary, indent=2))
    print(f"run directory: {result.run_dir}\ntraces: {result.trace_dir}")


def cmd_prepare(args: argparse.Namespace) -> None:
    from zen_analysis.runs.launch import prepare_run  # deferred: torch; --help stays light

    cfg = _config(args)
    run_dir = prepare_run(cfg, overwrite=args.overwrite)
    print(run_dir)
    print(
        "start the ranks on every machine with:\n  torchrun --nnodes=<N> --node-rank=<i> --nproc-per-node=<GPUs> "
        f"--rdzv-backend=c10d --rdzv-endpoint=<host0>:29500 -m zen_analysis.ranks.entry --run-dir {run_dir}"
    )


def add_config_parsers(sub: argparse._SubParsersAction) -> None:
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


def add_runs_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "runs", help="list the runs under the data root (id, recipe, size, finished), delete or prune them"
    )
    p.add_argument(
        "--delete", nargs="+", metavar="RUN_ID", help="delete these runs (directory, traces, derived tables)"
    )
    p.add_argument("--prune", action="store_true", help="delete every run but make reproduce's (reproduce-*)")
    p.set_defaults(func=cmd_runs)
