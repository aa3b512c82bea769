"""The single rank entry: ``python -m zen_analysis.ranks.entry --run-dir data/runs/<run_id>``.

Fork children and torchrun processes both end up in :func:`run_rank`: read ``config.json`` and ``launch.json``
from the run directory, send this rank's output to ``logs/rank{r}.log``, create the process group, run the
target (the training loop by default) and write its JSON result to ``results/rank{r}.json``. An exception is
written with its traceback to ``errors/rank{r}.txt`` for the launcher to show, and the rank exits non-zero.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zen_analysis.atomic import atomic_write_json, atomic_write_text
from zen_analysis.config import ExperimentConfig

DEFAULT_TARGET = "zen_analysis.train.loop:train"
TIMEOUT_HINT = (
    "A collective timed out (dist.timeout_s): another rank is probably hung or dead. "
    "Look at the other ranks' logs; raise dist.timeout_s if a rank is just slow."
)


def resolve_target(spec: str) -> Callable[..., Any]:
    """Import ``package.module:function``."""
    module, _, func = spec.partition(":")
    if not func:
        raise ValueError(f"target {spec!r} must look like 'package.module:function'")
    return getattr(importlib.import_module(module), func)


def redirect_output(log_path: Path) -> None:
    """Send this process's stdout/stderr (Python and C level) to ``log_path``, line-buffered."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    f = open(log_path, "a", buffering=1)
    os.dup2(f.fileno(), 1)
    os.dup2(f.fileno(), 2)
    sys.stdout = sys.stderr = f


def is_timeout(text: str) -> bool:
    low = text.lower()
    return "timed out" in low or "timeout" in low


def run_rank(run_dir: Path, target: Callable[..., Any] | None = None) -> int:
    """Run one rank to completion; returns the process exit code (0 on success)."""
    from zen_analysis.ranks import env  # deferred: torch; the CLI imports rundir, which imports this

    run_dir = Path(run_dir)
    rank = int(os.environ.get("RANK", "0"))
    redirect_output(run_dir / "logs" / f"rank{rank}.log")
    try:
        cfg = ExperimentConfig.from_json((run_dir / "config.json").read_text())
        if target is None:
            launch_info = json.loads((run_dir / "launch.json").read_text())
            target = resolve_target(launch_info.get("target", DEFAULT_TARGET))
        info = env.init(cfg.dist)
        resume = {"resume": True} if json.loads((run_dir / "launch.json").read_text()).get("resume") else {}
        result = target(cfg, info=info, log=print if info.is_main else (lambda *a, **k: None), **resume)
        atomic_write_json(run_dir / "results" / f"rank{rank}.json", result if result is not None else {})
        env.teardown()
        return 0
    except BaseException:  # noqa: BLE001 - the launcher reports whatever killed the rank
        tb = traceback.format_exc()
        if is_timeout(tb):
            tb += "\n" + TIMEOUT_HINT + "\n"
        print(tb, file=sys.stderr, flush=True)
        atomic_write_text(run_dir / "errors" / f"rank{rank}.txt", tb)
        return 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, type=Path, help="a run directory written by launch()/prepare")
    args = parser.parse_args(argv)
    sys.exit(run_rank(args.run_dir))


if __name__ == "__main__":
    main()
