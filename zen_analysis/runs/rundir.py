"""A run's directory: its id, its lock, and what a launch writes there before any rank starts.

``data/runs/<run_id>/`` holds ``config.json``, ``launch.json`` (what each rank runs) and ``data.json`` (the
prepared corpus); the launcher then adds logs, metrics, results and errors. The id must be a name
(``paths.check_run_id``); an existing run is replaced only on request (``overwrite``), and never while another
launch holds its lock (``.lock``, ``flock``ed by the launching process for the run's life).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zen_analysis import paths
from zen_analysis.atomic import atomic_write_json, atomic_write_text
from zen_analysis.config import ExperimentConfig
from zen_analysis.ranks.entry import DEFAULT_TARGET


class RunInUseError(ValueError):
    """Another live launch holds this run id (its lock file); nothing of either run was touched."""


def target_spec(target: Callable[..., Any] | str | None) -> str:
    if target is None:
        return DEFAULT_TARGET
    if isinstance(target, str):
        return target
    return f"{target.__module__}:{target.__qualname__}"


LOCK_NAME = ".lock"


class RunLock:
    """An exclusive ``flock`` on ``data/runs/<run_id>/.lock``, held by the launching process for the run's life.

    The kernel drops the lock when that process exits, however it exits, so a crashed launch never leaves a
    stale lock behind; a second launch of the same id fails at once with :class:`RunInUseError`.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.path = paths.run_dir(run_id) / LOCK_NAME
        self._fd: int | None = None
        self.resume_from: tuple[int, Path] | None = None
        """Set by :func:`claim_run` with ``resume``: the step and directory of the checkpoint the run resumes
        from."""

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunInUseError(
                f"run {self.run_id} is in use by another launch (pid {holder}); wait for it to finish, or choose "
                "another run id"
            ) from None
        self._fd = fd
        return self

    def mark_holder(self) -> None:
        """Write this process's pid into the lock file (what a refused second launch reports)."""
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self, *, discard_if_empty: bool = False) -> None:
        """Drop the lock; with ``discard_if_empty``, first remove the lock file and the run directory where they
        are all there is (a launch refused before it wrote anything leaves no trace)."""
        if self._fd is None:
            return
        run_dir = self.path.parent
        if discard_if_empty and {p.name for p in run_dir.iterdir()} <= {LOCK_NAME}:
            self.path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # another launch may have put something there since
                run_dir.rmdir()
        os.close(self._fd)  # closing the descriptor drops the flock
        self._fd = None

    def __enter__(self) -> RunLock:
        return self if self._fd is not None else self.acquire()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.release(discard_if_empty=exc_type is not None)


def claim_run(cfg: ExperimentConfig, *, overwrite: bool, resume: bool = False) -> RunLock:
    """Check the run id, lock the run, and clear a previous run of that id (only with ``overwrite``); with
    ``resume``, keep it, once its stored config is ``cfg`` but for the step count."""
    cfg.validate()
    if not cfg.run_id:
        cfg.run_id = paths.new_run_id(cfg.name)
    run_dir, trace_dir = paths.run_dir(cfg.run_id), paths.trace_dir(cfg.run_id)  # both check the id
    if resume and not run_dir.is_dir():  # refused before the lock creates the directory: nothing left behind
        raise ValueError(_NOTHING_TO_RESUME.format(run_id=cfg.run_id, run_dir=run_dir))
    lock = RunLock(cfg.run_id).acquire()
    try:
        if resume:
            from zen_analysis.train import checkpoint  # deferred: torch; the CLI imports rundir

            lock.resume_from = _check_resumable(cfg, run_dir)
            checkpoint.trim_metrics(run_dir / "metrics.jsonl", lock.resume_from[0])
            lock.mark_holder()
            for stale in ("errors", "results"):  # the interrupted launch's: this one writes its own
                shutil.rmtree(run_dir / stale, ignore_errors=True)
            store = run_dir / ".rendezvous"  # its file store: new ranks would read the dead ranks' addresses
            if store.is_dir():
                shutil.rmtree(store, ignore_errors=True)
            elif store.exists():
                store.unlink()
            return lock
        old = [p for p in run_dir.iterdir() if p.name != LOCK_NAME]
        if not overwrite:
            check_unused(cfg.run_id)
        lock.mark_holder()
        for p in old:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        if trace_dir.exists():
            shutil.rmtree(trace_dir)
    except BaseException:
        lock.release(discard_if_empty=True)
        raise
    return lock


def check_unused(run_id: str) -> None:
    """Refuse a run id that names a run already (its directory holds more than a lock, or it has traces). A
    launch asks before it prepares the data, to fail at once, and :func:`claim_run` again under the lock."""
    run_dir, trace_dir = paths.run_dir(run_id), paths.trace_dir(run_id)
    if (run_dir.is_dir() and any(p.name != LOCK_NAME for p in run_dir.iterdir())) or trace_dir.exists():
        raise ValueError(
            f"run {run_id} already exists ({run_dir}); pass overwrite=True (command line: --overwrite) to "
            "replace it, or choose another run id"
        )


_NOTHING_TO_RESUME = (
    "run {run_id} does not exist ({run_dir}): there is nothing to resume; leave out --resume (resume=True) to start "
    "it, or give the id of a run `zen-analysis runs` lists"
)


def read_json(path: Path, what: str, fix: str) -> Any:
    """The JSON in ``path``, one of a run's own files; a file that is missing, unreadable or not JSON (torn by a
    crash, or edited) is a ValueError naming the file (``what`` it is), what is wrong with it and ``fix``."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{what} {path} is missing: {fix}") from None
    except OSError as exc:
        raise ValueError(f"{what} {path} cannot be read ({exc.strerror}): {fix}") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{what} {path} is not valid JSON ({exc}): it is damaged or was edited; {fix}") from None


def _check_resumable(cfg: ExperimentConfig, run_dir: Path) -> tuple[int, Path]:
    """A resumed run continues the stored one: the same config in everything but ``train.num_steps``, and a
    complete checkpoint to start from. Returns (its step, its directory). Checked before anything of the run is
    changed; every refusal names the file at fault and what to do."""
    from zen_analysis.train import checkpoint  # deferred: torch; the CLI imports rundir

    stored_path = run_dir / "config.json"
    newest_step = checkpoint.latest_step(run_dir)
    write_back = (
        f"write the config the run was started with back there (zen-analysis config <recipe> --set ... --run-id "
        f"{cfg.run_id} > {stored_path}) and resume again, or start the run anew with --overwrite"
    )
    if not stored_path.exists():
        if newest_step is None and not (run_dir / checkpoint.DIR).is_dir():
            raise ValueError(_NOTHING_TO_RESUME.format(run_id=cfg.run_id, run_dir=run_dir))
        raise ValueError(
            f"run {cfg.run_id} has checkpoints ({run_dir / checkpoint.DIR}"
            + (f", the newest of step {newest_step}" if newest_step is not None else "")
            + f") but its config file {stored_path} is missing, so a resume cannot check that it continues with "
            f"the same settings: {write_back}"
        )
    what = f"run {cfg.run_id}'s config file"
    stored_json = read_json(stored_path, what, write_back)
    try:
        stored = ExperimentConfig.from_dict(stored_json, source=str(stored_path)).to_dict()
    except ValueError as exc:
        raise ValueError(f"{what} {stored_path}: {exc}; correct that field, or {write_back}") from None
    wanted = cfg.to_dict()
    stored["train"].pop("num_steps"), wanted["train"].pop("num_steps")
    differ = sorted(
        f"{section}.{key}"
        for section in wanted
        for key in (wanted[section] if isinstance(wanted[section], dict) else {})
        if wanted[section][key] != stored.get(section, {}).get(key)
    )
    differ += sorted(
        k for k in wanted if not isinstance(wanted[k], dict) and k != "run_id" and wanted[k] != stored.get(k)
    )
    if differ:
        raise ValueError(
            f"run {cfg.run_id} was started with another config; a resumed run may change train.num_steps only, "
            f"not {', '.join(differ)}"
        )
    skipped: list[str] = []
    found = checkpoint.newest(run_dir, cfg.dist.num_ranks, log=skipped.append)
    if found is None:
        raise ValueError(
            f"run {cfg.run_id} has no complete checkpoint to resume from (train.checkpoint_every) in "
            f"{run_dir / checkpoint.DIR}"
            + (f" ({'; '.join(skipped)})" if skipped else "")
            + ": start it anew with --overwrite"
        )
    return found


def write_run(
    cfg: ExperimentConfig, target: Callable[..., Any] | str | None, prepared: Any, *, resume: bool = False
) -> Path:
    """Write the claimed run's config.json, launch.json and data.json (``prepared``, the data
    :func:`zen_analysis.workload.batches.prepare` returned: prepared before the run was claimed, so a corpus it
    refused left the run directory as it was)."""
    run_dir = paths.run_dir(cfg.run_id)
    atomic_write_text(run_dir / "config.json", cfg.to_json())
    atomic_write_json(run_dir / "launch.json", {"target": target_spec(target), "resume": resume})
    # ranks read this instead of re-reading and re-hashing the corpus each
    atomic_write_json(run_dir / "data.json", prepared.to_dict())
    return run_dir


def prepare_run(
    cfg: ExperimentConfig,
    *,
    target: Callable[..., Any] | str | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> Path:
    """Write the run directory (config.json, launch.json, data.json) and prepare the data, for ranks started by
    hand (``torchrun ... -m zen_analysis.ranks.entry --run-dir``).

    The run id must be a name (``paths.check_run_id``); an existing run of that id is replaced only with
    ``overwrite`` and never while another launch holds it. The lock is released on return: the ranks you start
    are not guarded against a later ``prepare`` of the same id.
    """
    from zen_analysis.workload.batches import prepare  # deferred: torch; the CLI imports rundir
    from zen_analysis.workload.models import resolve_pretrained  # deferred: torch; the CLI imports rundir

    cfg = resolve_pretrained(cfg)
    cfg.validate()
    if cfg.run_id and not overwrite:
        check_unused(cfg.run_id)  # before the data, which may take minutes; claim_run asks again under the lock
    prepared = prepare(cfg.data, progress=progress)  # before the claim: a refused corpus leaves the run as it was
    with claim_run(cfg, overwrite=overwrite):
        return write_run(cfg, target, prepared)


KEEP_PREFIX = "reproduce-"
"""Runs ``prune_runs`` keeps unless named: ``make reproduce``'s, which the notebooks and figures read."""


def _size(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def list_runs() -> list[dict]:
    """Every run under the data root (a run directory or a trace directory), newest first: id, recipe, ranks x
    workers per rank, steps, bytes on disk (run + traces + derived tables), whether it finished, when it started,
    its newest checkpoint's step and whether it can be resumed (unfinished, with a checkpoint)."""

    from zen_analysis.train.checkpoint import latest_step  # deferred: torch; the CLI imports rundir

    ids = {
        p.name
        for root in (paths.runs_dir(), paths.traces_dir())
        if root.is_dir()
        for p in root.iterdir()
        if p.is_dir() and paths.RUN_ID.fullmatch(p.name)
    }
    rows = []
    for run_id in ids:
        run, traces = paths.run_dir(run_id), paths.trace_dir(run_id)
        cfg_file = run / "config.json"
        try:
            cfg = json.loads(cfg_file.read_text())
        except (OSError, ValueError):
            cfg = {}
        train, dist_cfg = cfg.get("train", {}), cfg.get("dist", {})
        started = cfg_file.stat().st_mtime if cfg_file.exists() else (run if run.exists() else traces).stat().st_mtime
        rows.append(
            {
                "run_id": run_id,
                "recipe": cfg.get("name", "?"),
                "ranks_x_workers": f"{dist_cfg.get('num_ranks', '?')} x {train.get('workers_per_rank', '?')}",
                "steps": train.get("num_steps"),
                "bytes": _size(run) + _size(traces) + _size(paths.derived_run_dir(run_id)),
                "finished": (run / "results" / "rank0.json").exists() or _manifest_finished(traces),
                "started": datetime.datetime.fromtimestamp(started).strftime("%Y-%m-%d %H:%M"),
                "checkpoint": latest_step(run),
            }
        )
        rows[-1]["resumable"] = not rows[-1]["finished"] and rows[-1]["checkpoint"] is not None
    return sorted(rows, key=lambda r: r["started"], reverse=True)


def _manifest_finished(traces: Path) -> bool:
    """Whether the trace manifest says the run finished; a missing or damaged one (listing must not fail on it:
    reading the traces names it) says no."""
    try:
        return json.loads((traces / "manifest.json").read_text()).get("finished", False) is True
    except (OSError, ValueError, AttributeError):
        return False


def delete_run(run_id: str) -> int:
    """Remove a run's directory, traces and derived tables; returns the bytes freed. A run in use (its launch
    still holds the lock) is refused with :class:`RunInUseError`."""
    dirs = [paths.run_dir(run_id), paths.trace_dir(run_id), paths.derived_run_dir(run_id)]
    if not any(d.exists() for d in dirs):
        raise ValueError(f"no run {run_id!r} under {paths.data_dir()} (`zen-analysis runs` lists them)")
    freed = sum(_size(d) for d in dirs)
    with RunLock(run_id):  # refuses while a launch holds it
        for d in dirs[1:]:
            if d.exists():
                shutil.rmtree(d)
        for p in dirs[0].iterdir():
            if p.name != LOCK_NAME:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    shutil.rmtree(dirs[0], ignore_errors=True)
    return freed


def prune_runs(keep: tuple[str, ...] = ()) -> list[str]:
    """Delete every run except ``make reproduce``'s (``reproduce-*``) and those in ``keep``; returns the ids
    deleted (runs in use are skipped)."""
    deleted = []
    for row in list_runs():
        run_id = row["run_id"]
        if run_id.startswith(KEEP_PREFIX) or run_id in keep:
            continue
        try:
            delete_run(run_id)
        except RunInUseError:
            continue
        deleted.append(run_id)
    return deleted
