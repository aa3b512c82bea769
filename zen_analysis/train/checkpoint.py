"""Checkpoints of a training run, and resuming from the newest complete one.

``train.checkpoint_every=K`` writes ``data/runs/<run_id>/checkpoints/step-<k>/`` after every K-th step (k: the next
step to run): the model's and the optimizers' state (rank 0's alone where every rank holds the same, having applied
the same summed gradients; every rank's under local SGD, whose replicas differ between syncs), and every rank's RNG
states (torch, numpy, Python), sync state (top-k's residuals, local SGD's anchors) and capture state (the capture's
error-feedback residuals, and its trace shards by name and sha256: the writer flushes at every checkpoint, so a
checkpoint's shards end at its step). The data need no position: a
batch is a pure function of (seed, split, step, worker), and so is the learning rate. The folder follows the
toolkit's one checkpoint protocol (:mod:`zen_analysis.atomic`): built under ``step-<k>.partial/``, every
file fsynced, ``meta.json`` with the sha256 of every file written last, then renamed, so a rank or launcher killed
while writing leaves the previous checkpoint the newest complete one. The last ``train.keep_checkpoints`` are kept.

Resuming (``launch(cfg, resume=True)``, ``zen-analysis train ... --resume``) loads the newest checkpoint whose files
match their checksums (a truncated or altered one is skipped, saying so, and the one before it used), drops the
metrics rows from its step on and every rank's trace shards written after it (their steps run again; the shards it
lists must be there unchanged), and continues: the losses, metrics and trace shards of the resumed run equal an
uninterrupted run's, bit for bit. Covered: the dense all-reduce, the natural-sparsity syncs (every scheme, by rows or
elements, overlapped or not), the planner (``auto``, under DDP and FSDP2: its step counter and decisions, so it
decides at the same steps from the same sketches and the summary lists every decision), top-k with error feedback
and the step-based local SGD methods (Post-Local SGD, DiLoCo, EDiT: anchors, outer momentum, anomaly detectors), with
or without capture. A-EDiT's syncs follow the clock: for them :func:`unsupported` says why; such runs train without
checkpoints and ``--resume`` refuses them.

Why ``torch.save`` per rank and not ``torch.distributed.checkpoint`` (DCP): DCP shards one logical state across
ranks and reshards it on load. Here the state is either replicated (the data-parallel model and optimizer: one copy
by rank 0 is the whole of it) or private to a rank and never resharded (its RNGs, error-feedback residuals, local
SGD replicas, trace position), and a resume must find the same world size anyway (bit-exact continuation). What DCP
would add, its async save, pays only where a checkpoint costs a noticeable share of a step; each run records that
cost (``checkpoint_s`` beside ``step_s`` in its ``metrics.jsonl``; the guide's ``train.checkpoint_every`` row gives
the default recipe's). Sharded state (``dist.sharding=fsdp``) is the exception, and goes through DCP
(:mod:`zen_analysis.fsdp.dcp`) into the checkpoint's ``sharded/`` folder, every rank its shards; the RNG,
sync and capture states stay per rank beside it, and ``meta.json`` hashes DCP's files as it hashes the others.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from zen_analysis import atomic
from zen_analysis.config import ExperimentConfig
from zen_analysis.config.names import METHODS
from zen_analysis.fsdp import dcp as fsdp_checkpoint

DIR = "checkpoints"
SHARDED = "sharded"
"""An FSDP2 run's model and optimizer state, in DCP's files, inside a checkpoint's folder."""


def unsupported(cfg: ExperimentConfig) -> str | None:
    """Why ``cfg`` cannot be checkpointed and resumed yet (None: it can)."""
    if cfg.sync.method == "a_edit" or (cfg.sync.method in METHODS and cfg.local_sgd.sync_time_s > 0):
        return "A-EDiT's syncs follow the wall clock, which a resumed run cannot replay"
    return None


def _barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


def save(
    run_dir: Path,
    step: int,
    *,
    rank: int,
    world: int,
    model,
    optimizers,
    sync_state: dict,
    replicated: bool,
    keep: int,
    capture_state: dict | None = None,
    sharded: bool = False,
) -> float:
    """Write the checkpoint of ``step`` (the next step to run) on every rank, with this rank's ``sync_state``
    (:meth:`~zen_analysis.sync.grad_sync.GradSync.state_dict`) and ``capture_state``
    (:meth:`~zen_analysis.capture.hooks.GradientCapture.state_dict`); ``replicated``: every rank holds the same
    model and optimizer state, so rank 0 writes it once; ``sharded``: the model is FSDP2's, its state and its one
    optimizer's written by every rank through DCP into ``sharded/`` (:mod:`zen_analysis.fsdp.dcp`: hashed
    tables and their moments in the original row order). Returns the seconds it took."""
    t0 = time.perf_counter()
    root = run_dir / DIR
    if rank == 0:
        atomic.begin_checkpoint(root, step)
    _barrier(world)
    partial = atomic.partial_checkpoint_dir(root, step)
    rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    mine = {"rng": rng, "sync": sync_state, "capture": capture_state}
    if sharded:
        (optimizer,) = optimizers
        fsdp_checkpoint.write_state(partial / SHARDED, model, optimizer)
    elif not replicated:
        mine["model"], mine["optim"] = model.state_dict(), [o.state_dict() for o in optimizers]
    torch.save(mine, partial / f"rank{rank}.pt")
    if rank == 0 and replicated and not sharded:
        torch.save(model.state_dict(), partial / "model.pt")
        torch.save([o.state_dict() for o in optimizers], partial / "optim.pt")
    _barrier(world)  # every rank's file is there
    if rank == 0:
        atomic.commit_checkpoint(partial, step=step, world=world, keep=keep)
    _barrier(world)
    return time.perf_counter() - t0


def latest_step(run_dir: Path) -> int | None:
    """The step of the newest checkpoint with a readable marker (files not hashed: a listing's answer;
    :func:`newest` verifies). None: none."""
    return atomic.latest_checkpoint_step(run_dir / DIR)


def newest(run_dir: Path, world: int, log=print) -> tuple[int, Path] | None:
    """(step, directory) of the newest complete checkpoint whose files match their checksums and world size; a bad
    one is skipped with a line saying why (:func:`zen_analysis.atomic.newest_checkpoint`). None: there is none."""
    return atomic.newest_checkpoint(run_dir / DIR, world=world, log=log)


def trim_metrics(path: Path, step: int, log=print) -> None:
    """Drop the rows of ``metrics.jsonl`` from ``step`` on (a resumed run writes them again); the file is replaced
    whole, and only when it holds such rows.

    A last line that is not a whole row (not JSON) is what a crash in the middle of an append leaves:
    it is dropped, with a line through ``log`` saying so. Any other bad line is damage this cannot repair: a
    ValueError naming the file and the line."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row_step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError) as exc:
            if number == len(lines):
                log(f"{path}: dropped its last line, a row torn by the crash ({line[:60].strip()!r}...)")
                continue
            raise ValueError(
                f"{path} line {number} is not a metrics row ({type(exc).__name__}: {exc}): the file was damaged or "
                f"edited; delete that line (rows from step {step} on are written again) and resume again, or start "
                "the run anew with --overwrite"
            ) from None
        if row_step < step:
            kept.append(line if line.endswith("\n") else line + "\n")  # a whole row whose newline was cut off
    if kept != lines:
        atomic.atomic_write_text(path, "".join(kept))


def restore(path: Path, *, rank: int, model, optimizers) -> tuple[dict, dict | None]:
    """Load checkpoint ``path`` into this rank's model, optimizers and RNGs; returns its sync state and capture
    state (None: the run captured nothing)."""
    mine = torch.load(path / f"rank{rank}.pt", weights_only=False)
    if (path / SHARDED).is_dir():  # every rank reads its shards (a collective)
        (optimizer,) = optimizers
        fsdp_checkpoint.read_state(path / SHARDED, model, optimizer)
    else:
        replicated = "model" not in mine
        model.load_state_dict(torch.load(path / "model.pt", weights_only=False) if replicated else mine["model"])
        optim = torch.load(path / "optim.pt", weights_only=False) if replicated else mine["optim"]
        for opt, state in zip(optimizers, optim, strict=True):
            opt.load_state_dict(state)
    rng = mine["rng"]
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    if "cuda" in rng:
        torch.cuda.set_rng_state_all(rng["cuda"])
    return mine["sync"], mine.get("capture")
