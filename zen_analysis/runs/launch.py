"""Start N ranks from a notebook cell or a script, and return when they finish.

``launch(cfg)`` checks the config and prepares the data in the calling process (so ranks only read caches, and a
refused config or corpus leaves the run directory as it was), writes ``data/runs/<run_id>/config.json``, then
starts ``cfg.dist.num_ranks`` ranks:

* CPU (gloo): forked children. Each one first calls ``torch.set_num_threads(1)`` (a fork after the parent used
  torch's thread pool deadlocks otherwise), asks the kernel to kill it if the parent dies (no orphans), and runs
  :func:`zen_analysis.ranks.entry.run_rank`. Fork, unlike spawn, also runs functions defined in a notebook.
* GPU (NCCL): a ``torchrun`` subprocess running ``python -m zen_analysis.ranks.entry`` (CUDA must never be
  initialised in a process that forks). Several machines: run the same torchrun command on each (the guide's "GPUs and
  several machines").

While ranks run, a progress bar follows rank 0's ``metrics.jsonl`` and rank 0's log lines are echoed. When a rank
fails, the others are killed at once and :class:`RankFailedError` is raised naming the rank, with its traceback;
a hung collective fails its peers after ``dist.timeout_s``. Results are read back from the run directory.

Starting, watching and stopping processes, and naming the failed rank, is :mod:`zen_analysis.ranks.procs` (below
training); this module adds the run directory, the data and the training loop.
"""

from __future__ import annotations

import contextlib
import copy
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm.auto import tqdm

import zen_analysis.train.loop  # noqa: F401 - the ranks' default target, imported before the fork: ranks inherit it
from zen_analysis import paths, recipes
from zen_analysis.capture.reader import TraceReader
from zen_analysis.config import ExperimentConfig
from zen_analysis.evaluation.calibrate import planner_topology
from zen_analysis.ranks.entry import TIMEOUT_HINT, run_rank
from zen_analysis.ranks.env import loopback_env
from zen_analysis.ranks.netlab import NetLab
from zen_analysis.ranks.procs import (
    RankFailedError,
    RankGroup,
    blame,
    fork_ranks,
    free_port,
    log_tail,
    start_process,
    torchrun_per_node,
)
from zen_analysis.runs import observe
from zen_analysis.runs.rundir import RunInUseError, check_unused, claim_run, prepare_run, target_spec, write_run
from zen_analysis.train.checkpoint import unsupported
from zen_analysis.workload.batches import prepare
from zen_analysis.workload.models import preload, resolve_pretrained

__all__ = ["RunInUseError", "RunResult", "ensure_run", "launch", "prepare_run", "runs_or_fallback"]


@dataclass
class RunResult:
    """What a finished launch left on disk."""

    run_id: str
    run_dir: Path
    trace_dir: Path
    results: dict[int, Any] = field(default_factory=dict)
    """Each rank's return value (from ``results/rank{r}.json``)."""
    pids: list[int] = field(default_factory=list)

    @property
    def summary(self) -> Any:
        return self.results.get(0)

    def metrics(self) -> pd.DataFrame:
        """Rank 0's per-step metrics (loss, lr, step time, capture time)."""
        return pd.read_json(self.run_dir / "metrics.jsonl", lines=True)

    def traces(self):
        return TraceReader(self.trace_dir)


def _resolve_launcher(cfg: ExperimentConfig) -> str:
    if cfg.dist.launcher != "auto":
        return cfg.dist.launcher
    return (
        "torchrun"
        if cfg.dist.backend == "nccl" or (cfg.dist.backend == "auto" and torch.cuda.is_available())
        else "fork"
    )


def launch(
    cfg: ExperimentConfig,
    *,
    target: Callable[..., Any] | str | None = None,
    progress: bool = True,
    echo: bool = True,
    timeout_s: float | None = None,
    on_metrics: Callable[[list[dict]], None] | list | None = None,
    overwrite: bool = False,
    resume: bool = False,
) -> RunResult:
    """Run ``cfg`` on ``cfg.dist.num_ranks`` ranks and wait for them.

    Args:
        cfg: the experiment (copied; the run id is filled in when empty, and must be a name when given).
        target: what each rank runs, ``fn(cfg, *, info, log) -> JSON-able``; default the training loop. Under
            torchrun it must be importable (``"package.module:function"``).
        progress: show a progress bar over training steps.
        echo: print rank 0's log lines as they appear.
        timeout_s: stop everything and raise if the ranks run longer than this.
        on_metrics: an observer or a list of them (:mod:`zen_analysis.runs.observe`): called with each batch of
            new rows of rank 0's ``metrics.jsonl`` (live plots, TensorBoard); an observer's ``finish(summary,
            error)`` is called once at the end, also when the run fails or is interrupted.
        overwrite: replace an earlier run of the same id (without it, an existing id is an error).
        resume: continue the run of this id from its newest complete checkpoint (``train.checkpoint_every``); its
            stored config must be ``cfg`` but for ``train.num_steps``. The resumed run's losses and metrics equal
            an uninterrupted run's (:mod:`zen_analysis.train.checkpoint` says which syncs are covered).

    Returns:
        A :class:`RunResult` read back from the run directory.

    Raises:
        ValueError: a bad config, run id or corpus (named, with what to do), or the id exists and ``overwrite`` is
            false; nothing was touched.
        RunInUseError: another launch is running this id; nothing was touched.
        RankFailedError: a rank raised, crashed or timed out (the others are stopped first).
    """
    cfg = resolve_pretrained(copy.deepcopy(cfg))
    _check_launchable(cfg, target, overwrite=overwrite, resume=resume)
    prepared = prepare(cfg.data, progress=progress)  # before the claim: a refused corpus leaves the run as it was
    watchers = observe.observers(on_metrics)
    try:
        with claim_run(cfg, overwrite=overwrite, resume=resume) as lock, _network(cfg) as lab:  # until ranks stop
            result = _launch_claimed(
                cfg,
                prepared,
                target=target,
                progress=progress,
                echo=echo,
                timeout_s=timeout_s,
                on_metrics=watchers,
                lab=lab,
                resumed_from=lock.resume_from[0] if lock.resume_from else None,
            )
    except BaseException as e:
        observe.finish(watchers, None, e)
        raise
    observe.finish(watchers, result.results.get(0), None)
    return result


def _check_launchable(cfg: ExperimentConfig, target, *, overwrite: bool, resume: bool) -> None:
    """Before anything is touched: a valid config, a new run id unless replacing or resuming one (asked again
    under the lock; here too, before the data is prepared), a resume checkpoints cover and no overwrite beside it,
    the planner's topology calibrated (here on first use: a rank must not fork one), and under torchrun an
    importable target."""
    cfg.validate()
    if cfg.run_id and not (overwrite or resume):
        check_unused(cfg.run_id)
    if resume:
        why = unsupported(cfg)
        if why:
            raise ValueError(f"checkpoints and resume do not cover this run yet: {why}")
    if resume and overwrite:
        raise ValueError("resume continues a run and overwrite replaces it: pass one of them")
    if cfg.sync.scheme == "auto" and cfg.dist.sharding == "none":  # the planner (FSDP2's auto prices bytes alone)
        d = cfg.dist
        planner_topology(
            cfg.sync.planner_topology,
            d.num_ranks,
            network=d.network,
            bandwidth_gbps=d.bandwidth_gbps,
            ranks_per_node=d.ranks_per_node,
        )
    if (
        _resolve_launcher(cfg) == "torchrun"
        and target is not None
        and not isinstance(target, str)
        and "<" in target_spec(target)
    ):
        raise ValueError("under torchrun the target must be an importable module function, not a local one")


def _mark_new_attempt(run_dir: Path, resumed_from: int) -> dict[Path, int]:
    """Append a line to each rank's log saying that a resumed attempt starts here (the logs are appended to, so
    the interrupted attempt's output, its traceback included, stays above it); returns each log's size after it,
    where the live echo starts reading: the previous attempt's errors are not shown again as if they were new."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    ends = {}
    for log in sorted((run_dir / "logs").glob("*.log")):
        with open(log, "a") as f:
            f.write(f"\n---- {stamp}: resumed from step {resumed_from}; the lines above are earlier attempts' ----\n")
            ends[log] = f.tell()
    return ends


def _network(cfg: ExperimentConfig):
    """The emulated network a launch runs in (``dist.network="netlab"``), removed when the launch ends however
    it ends; nothing for loopback."""
    if cfg.dist.network != "netlab":
        return contextlib.nullcontext()
    return NetLab(cfg.dist.num_ranks, cfg.dist.bandwidth_gbps, ranks_per_node=cfg.dist.ranks_per_node)


def _launch_claimed(
    cfg: ExperimentConfig,
    prepared,
    *,
    target,
    progress,
    echo,
    timeout_s,
    on_metrics,
    lab=None,
    resumed_from: int | None = None,
) -> RunResult:
    """Write the run (``prepared``: its data), start the ranks and watch them. ``resumed_from``: the checkpoint's
    step (:func:`claim_run` found it and dropped the metrics rows from it on, before the live view reads the file:
    its rows count once)."""
    run_dir = write_run(cfg, target, prepared, resume=resumed_from is not None)
    log_starts = _mark_new_attempt(run_dir, resumed_from) if resumed_from is not None else {}
    world = cfg.dist.num_ranks
    launcher = _resolve_launcher(cfg)
    group = _start_torchrun(cfg, run_dir, lab) if launcher == "torchrun" else _start_forked(cfg, run_dir, target, lab)
    pids = group.pids
    desc = cfg.run_id if resumed_from is None else f"{cfg.run_id} (resumed from step {resumed_from})"
    bar = tqdm(total=cfg.train.num_steps, desc=desc, unit="step", disable=not progress)
    rank0_log = run_dir / "logs" / "rank0.log"
    metrics_tail, log_tail_ = (
        observe.LineTail(run_dir / "metrics.jsonl"),
        observe.LineTail(rank0_log, start=log_starts.get(rank0_log, 0)),
    )

    def pump() -> None:
        rows = [json.loads(line) for line in metrics_tail.lines() if line.strip()]
        if rows:
            bar.update(len(rows))
            bar.set_postfix(loss=f"{rows[-1]['loss']:.3f}")
            observe.notify(on_metrics, rows)
        if echo:
            for line in log_tail_.lines():
                bar.write(f"[rank 0] {line}")

    try:
        outcome = group.watch(timeout_s=timeout_s, on_tick=pump)  # every rank is stopped when it returns or raises
        if outcome.ok:
            pump()
    finally:
        bar.close()
    if outcome.timed_out:
        raise RankFailedError(
            f"run {cfg.run_id} exceeded timeout_s={timeout_s}; all ranks were stopped. {TIMEOUT_HINT}",
            rank=None,
            run_id=cfg.run_id,
            pids=pids,
        )
    if not outcome.ok:
        failed, codes, killed = outcome.failed, outcome.codes, outcome.running
        if launcher == "torchrun":  # torchrun's exit code is not a rank's: find the ranks that wrote errors
            ranks = sorted(int(p.stem[4:]) for p in (run_dir / "errors").glob("rank*.txt"))
            if not ranks:  # torchrun itself failed (rendezvous, start-up) before any rank reported
                logs = sorted((run_dir / "logs").glob("torchrun*.log"))
                tails = "\n\n".join(f"{p.name}:\n{log_tail(p, 15).rstrip()}" for p in logs)
                raise RankFailedError(
                    f"torchrun of run {cfg.run_id} failed before any rank reported an error; the end of its log:"
                    f"\n\n{tails}",
                    rank=None,
                    run_id=cfg.run_id,
                    pids=pids,
                )
            failed, codes, killed = ranks, {}, []
        raise blame(run_dir, cfg.run_id, failed, codes, killed, pids)
    results = {}
    for r in range(world):
        f = run_dir / "results" / f"rank{r}.json"
        if f.exists():
            results[r] = json.loads(f.read_text())
    return RunResult(
        run_id=cfg.run_id, run_dir=run_dir, trace_dir=paths.trace_dir(cfg.run_id), results=results, pids=pids
    )


def _start_torchrun(cfg: ExperimentConfig, run_dir: Path, lab) -> RankGroup:
    """The torchrun path: one torchrun per node of ``lab``, else one local torchrun of ``num_ranks`` ranks (its
    output in ``logs/torchrun.log``); every rank runs ``python -m zen_analysis.ranks.entry`` on ``run_dir``."""
    if lab is not None:
        program = ["-m", "zen_analysis.ranks.entry", "--run-dir", str(run_dir)]
        return torchrun_per_node(lab, program, cfg.dist.master_port or free_port(), run_dir / "logs")
    port = cfg.dist.master_port or free_port()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc-per-node={cfg.dist.num_ranks}",
        f"--master-addr={cfg.dist.master_addr}",
        f"--master-port={port}",
        "-m",
        "zen_analysis.ranks.entry",
        "--run-dir",
        str(run_dir),
    ]
    return RankGroup([start_process(cmd, run_dir / "logs" / "torchrun.log")])


def _start_forked(cfg: ExperimentConfig, run_dir: Path, target, lab) -> RankGroup:
    """The fork path: one forked rank each (:func:`~zen_analysis.ranks.procs.fork_ranks`: one thread, dies with
    this process, in its lab node's namespace when there is a ``lab``) running
    :func:`~zen_analysis.ranks.entry.run_rank`; the training loop and the model's code are imported here first, so
    the ranks inherit them (imported at the top of this module, before any fork)."""
    preload(cfg.model.arch, cfg.model.pretrained)
    world = cfg.dist.num_ranks
    fn = target if callable(target) else None

    def environ(rank: int) -> dict[str, str]:
        return {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            **loopback_env(run_dir / ".rendezvous"),
        }

    return fork_ranks(world, lambda rank: run_rank(run_dir, fn), environ=environ, lab=lab)


def ensure_run(cfg: ExperimentConfig, **launch_kwargs: Any) -> str:
    """The run id of a finished capture of ``cfg`` (its ``run_id``, default ``<name>``), launching it if needed.

    A run is reused when its manifest says it finished with exactly this config; notebooks use this to share a
    run instead of retraining on every execution. Otherwise the run of that id is replaced (``overwrite``): the
    id stands for "the run of this recipe", not for one launch.
    """
    cfg = copy.deepcopy(cfg)
    cfg.run_id = cfg.run_id or cfg.name
    manifest = paths.trace_dir(cfg.run_id) / "manifest.json"
    if manifest.exists():
        try:
            m = json.loads(manifest.read_text())
        except (OSError, ValueError):  # torn or edited: not a finished run to reuse; the launch replaces it
            print(f"{manifest} is damaged (not JSON): training run {cfg.run_id} again")
            m = {}
        if isinstance(m, dict) and m.get("finished") and m.get("config") == json.loads(cfg.to_json()):
            print(f"reusing run {cfg.run_id}: it finished with this config (delete it to train it again)")
            return cfg.run_id
    launch(cfg, overwrite=True, **launch_kwargs)
    return cfg.run_id


def runs_or_fallback(run_ids: Sequence[str], fallback: Sequence[str] = ()) -> list[str]:
    """``run_ids`` where every one's traces are on disk (``make reproduce``'s runs), else the runs of the ``fallback``
    recipes, each trained now if need be (:func:`ensure_run`: the notebooks' small recipes take seconds).

    All or nothing, never a mix: a figure then compares workloads of one size. A fallback recipe that cannot be
    trained here (:func:`zen_analysis.recipes.unavailable`: the MiniLM without its checkpoint) is left out, and
    stdout says why, so the list may be shorter than ``fallback``. With no ``fallback`` it only asks whether the
    runs are there (``runs_or_fallback(ids) == ids``)."""
    run_ids = list(run_ids)
    if run_ids and all((paths.trace_dir(r) / "manifest.json").exists() for r in run_ids):
        return run_ids
    found = []
    for name in fallback:
        if (why := recipes.unavailable(name)) is not None:
            print(f"not training the fallback {name} here: {why}")
            continue
        found.append(ensure_run(recipes.get(name), echo=False))
    return found
