"""The one training loop. Its step reads as the algorithm: every worker's forward and backward, the sync, the clip,
the optimizer, the log.

Dense all-reduce, the communication schemes, Zen, FSDP2 and local SGD differ by what comes in from outside, not by
branches of this loop: the ``sync`` object (:class:`~zen_analysis.sync.contract.TrainingSync`: it sums the gradients,
clips them where they live and counts what it sent), the method's hooks around the loop
(:mod:`zen_analysis.train.loop_hooks`: local SGD's schedule and records) and the perturbations wrapping the data
(:func:`~zen_analysis.train.perturbations.perturbed_batches`). Each step every rank runs its V virtual workers'
micro-batches (gradients accumulate), the capture records per-worker gradients on capture steps,
``sync.synchronize`` averages gradients across ranks, then the optimizer steps. Rank 0 writes the run's metrics,
summary and trace manifest; every rank writes its own shards.

Files (``data/runs/<run_id>/``): ``metrics.jsonl`` (one line per step: loss, lr, step, compute, sync, exchange and
capture time, and what the sync counted), ``summary.json`` (final numbers). Traces: ``data/traces/<run_id>/``.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from zen_analysis import paths
from zen_analysis.atomic import atomic_path, atomic_write_json
from zen_analysis.capture.traces import collect_shards, write_manifest
from zen_analysis.config import ExperimentConfig
from zen_analysis.ranks import env
from zen_analysis.ranks.env import RankInfo
from zen_analysis.sync.contract import TrainingSync
from zen_analysis.sync.grad_sync import GradSync
from zen_analysis.train import checkpoint
from zen_analysis.train.optim import densify_sparse_grads, embedding_rows
from zen_analysis.train.perturbations import perturbed_batches
from zen_analysis.train.provenance import full_state_dict, parameter_digest
from zen_analysis.train.setup import TrainingRun, setup_run
from zen_analysis.train.step_timer import StepTimer
from zen_analysis.wire.inflight import hold
from zen_analysis.workload.batches import TokenData
from zen_analysis.workload.ctr import CTRData
from zen_analysis.workload.export import export_model
from zen_analysis.workload.models import build_model, model_loss, to_device


class NonFiniteLossError(FloatingPointError):
    """A step's loss is NaN or infinite (``train.allow_nonfinite_loss`` off): the run stops at that step, before
    its evaluation and checkpoint, so the newest checkpoint is still a finite one."""

    def __init__(self, step: int, loss: float, *, local: bool) -> None:
        whose = "this rank's own loss (local SGD)" if local else "the mean over ranks, so every rank stops here"
        super().__init__(
            f"the loss became {loss} at step {step} ({whose}); training stopped. Train again with a lower "
            "train.lr or with train.grad_clip set (--overwrite), or set train.allow_nonfinite_loss=true to train on "
            "regardless"
        )
        self.step, self.loss = step, loss


def lr_at(cfg: ExperimentConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio * lr``."""
    t = cfg.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    progress = (step - t.warmup_steps) / max(1, t.num_steps - t.warmup_steps)
    return t.lr * (t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _start_step_stats(loss: float, compute_s: float, info: RankInfo):
    """Start the step's one statistics collective, asynchronously: the mean of ``loss`` over ranks and the longest
    ``compute_s`` (rank r adds its compute time at position r + 1 of a zero vector, summed). Started after the sync
    and read after the optimizer (:func:`_end_step_stats`), it travels while the clip and the optimizer run. None on
    one rank."""
    if info.world_size == 1:
        return None
    t = torch.zeros(1 + info.world_size, dtype=torch.float64, device=info.device)
    t[0], t[1 + info.rank] = loss, compute_s
    hold(t)
    return t, dist.all_reduce(t, async_op=True)


def _end_step_stats(pending, loss: float, compute_s: float, info: RankInfo) -> tuple[float, float]:
    """(the mean loss over ranks, the longest compute time) of :func:`_start_step_stats`'s collective."""
    if pending is None:
        return loss, compute_s
    t, work = pending
    work.wait()
    return t[0].item() / info.world_size, t[1:].max().item()


def _mean_over_ranks(x: float, info: RankInfo) -> float:
    if info.world_size == 1:
        return x
    t = torch.tensor([x], dtype=torch.float64, device=info.device)
    hold(t)
    dist.all_reduce(t)
    return t.item() / info.world_size


@torch.no_grad()
def validation_loss(model, data: TokenData | CTRData, cfg: ExperimentConfig, info: RankInfo) -> float:
    """Mean validation loss over ``eval_batches`` batches per rank (fixed batches, averaged over ranks)."""
    model.eval()
    losses = []
    for b in range(cfg.train.eval_batches):
        x, y = data.batch("val", step=b, worker=info.rank, batch_size=cfg.train.batch_per_worker)
        losses.append(model_loss(model, to_device(x, info.device), y.to(info.device)).item())
    model.train()
    return _mean_over_ranks(sum(losses) / len(losses), info)


def train(
    cfg: ExperimentConfig,
    *,
    info: RankInfo | None = None,
    sync: GradSync | None = None,
    log=print,
    resume: bool = False,
) -> dict[str, Any]:
    """Train ``cfg`` on this rank; returns the run summary (rank 0 also writes it to ``summary.json``).

    Ranks started by :func:`zen_analysis.launch` pass ``info``; called directly (say in a notebook kernel) it
    trains as a single rank, all ``workers_per_rank`` workers in this process. ``resume``: continue from the run's
    newest complete checkpoint (:mod:`zen_analysis.train.checkpoint`).
    """
    if info is None:
        info = env.init(cfg.dist)
    if not cfg.run_id:
        cfg.run_id = paths.new_run_id(cfg.name)
    found = _newest_checkpoint(cfg, info, log) if resume else None
    run, sync = setup_run(cfg, info, sync, log, resume_from=found)
    t_start = time.perf_counter()
    loss, steps_done = float("nan"), 0
    for step in run.hooks.steps(found[0] if found else 0, cfg.train.num_steps):  # A-EDiT: more or fewer
        loss = _step(run, sync, step)
        steps_done += 1
    return _finish(run, sync, loss=loss, steps_done=steps_done, t_start=t_start)


def _newest_checkpoint(cfg: ExperimentConfig, info: RankInfo, log) -> tuple[int, Path]:
    found = checkpoint.newest(paths.run_dir(cfg.run_id), info.world_size, log=log)
    if found is None:
        raise ValueError(f"run {cfg.run_id} has no complete checkpoint to resume from (train.checkpoint_every)")
    return found


def _step(run: TrainingRun, sync: TrainingSync, step: int) -> float:
    """One optimizer step: forward and backward of this rank's V workers' micro-batches (captured on capture
    steps), the sync, the clip, the optimizer, and rank 0's row in ``metrics.jsonl``. Returns the step's loss: the
    mean over ranks, or this rank's own where every rank trains its own model (local SGD)."""
    cfg, info, t, model, capture = run.cfg, run.info, run.cfg.train, run.model, run.capture
    timer = StepTimer(capture, run.hooks.sync_seconds)
    lr = _set_lr(run, step)
    capturing = capture is not None and capture.is_capture_step(step)
    batches = _micro_batches(run, step, capturing=capturing)
    batches = perturbed_batches(
        cfg, info, batches, step=step, vocab=run.data.vocab_size, compute_s=timer.compute_only_s
    )
    local_loss = 0.0
    for v, (worker, x, y) in enumerate(batches):
        x, y = to_device(x, info.device), y.to(info.device)
        with capture.worker(step=step, worker=worker) if capturing else contextlib.nullcontext():
            micro_loss = model_loss(model, x, y) / t.workers_per_rank  # mean over the rank's batch
            sync.before_backward(last=v == t.workers_per_rank - 1, capturing=capturing)
            micro_loss.backward()
        local_loss += micro_loss.item()
    timer.begin("sync")
    sync.synchronize(model)
    record = sync.record()
    # after the sync, never before: the sync's collectives (buckets held back by a parameter without a gradient on
    # some rank launch only in synchronize) must come in the same order on every rank
    stats = None if run.hooks.local else _start_step_stats(local_loss, timer.compute_s, info)
    timer.begin("clip")
    rows = _clip(run, sync, record.union_rows)
    timer.begin("optimizer")
    run.optimizer.step()
    if run.row_optimizer is not None:
        run.row_optimizer.step(rows=rows)
    timer.begin("zero_grad")
    for o in run.optimizers:
        o.zero_grad(set_to_none=True)
    timer.begin("stats")
    loss, compute_max_s = _end_step_stats(stats, local_loss, timer.compute_s, info)
    row = {"step": step, "loss": loss, "lr": lr, **timer.times(compute_max_s)}
    row.update(captured=capturing, tokens=(step + 1) * cfg.global_batch * t.seq_len, **record.row())
    _log(run, sync, step, row)
    return loss


def _set_lr(run: TrainingRun, step: int) -> float:
    """Every optimizer's learning rate for ``step`` (:func:`lr_at`); returns it."""
    lr = lr_at(run.cfg, min(step, run.cfg.train.num_steps - 1))
    for group in (g for o in run.optimizers for g in o.param_groups):
        group["lr"] = lr
    return lr


def _micro_batches(run: TrainingRun, step: int, *, capturing: bool) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """This rank's V workers' training batches of ``step``, as (worker, inputs, targets); after the last, a capture
    step's end (on every rank: with a global threshold it gathers)."""
    t, V = run.cfg.train, run.cfg.train.workers_per_rank
    for v in range(V):
        worker = run.info.rank * V + v
        yield worker, *run.data.batch("train", step=step, worker=worker, batch_size=t.batch_per_worker)
    if capturing:
        run.capture.end_step()


def _clip(run: TrainingRun, sync: TrainingSync, union_rows: torch.Tensor | None) -> dict:
    """``train.grad_clip`` on the summed gradients, by the sync, then a ``sparse=True`` gradient placed in its dense
    table; returns the lazy update's rows (the embedding's non-zero rows, what the clip reads and the row update
    steps: from ``union_rows``, the rows the sync found, where it found them)."""
    model, clip = run.model, run.cfg.train.grad_clip
    rows = {}
    if run.embedding is not None and run.embedding.grad is not None:
        rows = {run.embedding: embedding_rows(run.embedding.grad, union_rows)}
    # a sparse=True gradient AdamW's dense step takes is clipped on its rows too, then placed in its dense table:
    # the clip's norm and scaling read the rows, not the table
    sparse = {p: embedding_rows(p.grad) for p in model.parameters() if p.grad is not None and p.grad.is_sparse}
    if clip > 0:
        sync.clip_grad_norm_(model.parameters(), clip, rows={**sparse, **rows})
    # AdamW's: a sparse=True embedding's summed rows, in a dense table kept from step to step
    densify_sparse_grads(model.parameters(), keep=run.embedding, buffers=run.dense_grads)
    return rows


def _log(run: TrainingRun, sync: TrainingSync, step: int, row: dict) -> None:
    """The step's row, finished and written by rank 0: a non-finite loss stops the run there (its row written),
    then the validation loss and the checkpoint where due."""
    t, loss = run.cfg.train, row["loss"]
    if not math.isfinite(loss) and not t.allow_nonfinite_loss:
        if run.metrics_f:  # the step's row stays, with its loss: what the error names
            run.metrics_f.write(json.dumps(row) + "\n")
        raise NonFiniteLossError(step, loss, local=run.hooks.local)
    if t.eval_every and (step + 1) % t.eval_every == 0 and step + 1 < t.num_steps:
        row["val_loss"] = validation_loss(run.model, run.data, run.cfg, run.info)
    if run.hooks.local:
        row["loss_is_rank0_only"] = True
    if run.checkpoint_every and (step + 1) % run.checkpoint_every == 0 and step + 1 < t.num_steps:
        row["checkpoint_s"] = _save_checkpoint(run, sync, step + 1)
    if run.metrics_f:
        run.metrics_f.write(json.dumps(row) + "\n")


def _save_checkpoint(run: TrainingRun, sync: TrainingSync, step: int) -> float:
    """This rank's part of the checkpoint at ``step``; returns its seconds (the row's ``checkpoint_s``)."""
    t, info, capture = run.cfg.train, run.info, run.capture
    return checkpoint.save(
        run.run_dir,
        step,
        rank=info.rank,
        world=info.world_size,
        model=run.model,
        optimizers=run.optimizers,
        sync_state=sync.state_dict(),
        replicated=not run.hooks.local,  # local SGD: each rank its own model between syncs
        sharded=run.sharded,
        keep=t.keep_checkpoints,
        capture_state=capture.state_dict() if capture else None,
    )


def _finish(run: TrainingRun, sync: TrainingSync, *, loss: float, steps_done: int, t_start: float) -> dict[str, Any]:
    """After the last step: close the capture, ``sync.end_run``, the final validation loss and the summary; each
    rank writes its method's records (local SGD's log), rank 0 the run's files (:func:`_write_run`). Returns the
    summary."""
    cfg, info, t, model, capture = run.cfg, run.info, run.cfg.train, run.model, run.capture
    if capture:
        capture.close()  # writes the last shard: part of the capture cost, so inside the timed span
    final = sync.end_run(model)  # local SGD: one last sync, so the final model is the global one
    pseudo_s = run.hooks.close_capture(capture)  # local SGD: the last sync's pseudo-gradient records
    elapsed = time.perf_counter() - t_start
    total_steps = int(round(_mean_over_ranks(float(steps_done), info) * info.world_size))  # workers may differ (A-EDiT)
    val_loss = validation_loss(model, run.data, cfg, info)
    full = full_state_dict(model) if run.sharded else None  # every rank: a collective
    summary = {
        "run_id": cfg.run_id,
        "num_steps": t.num_steps,
        "final_loss": loss,
        "val_loss": val_loss,
        "num_params": run.num_params,
        "elapsed_s": elapsed,
        "tokens_per_s": total_steps * t.workers_per_rank * t.batch_per_worker * t.seq_len / elapsed,
        "total_steps_all_ranks": total_steps,
        "sync_bytes_rank": final.bytes_sent,
        "steps_done": steps_done,
        "capture_s_rank0": (capture.seconds + pseudo_s) if capture else 0.0,
        "trace_bytes_rank0": capture.writer.bytes_written if capture else 0,
        "param_sha256": parameter_digest(model, full),
    }
    if run.autos:  # what each auto switch came to on this run
        summary["auto"] = run.autos
    if final.decisions:  # Zen's planner: what it chose per tensor, and why
        summary["planner"] = final.decisions
    if final.described is not None:
        summary["sync"] = final.described
    run.hooks.write(run.run_dir, info.rank)  # local SGD: per sync and group, each worker's norm, weight, clip, skip
    if info.is_main:
        _write_run(run, summary, full)
    elif capture and info.world_size > 1:
        dist.barrier()
    return summary


def _write_run(run: TrainingRun, summary: dict[str, Any], full: dict | None) -> None:
    """Rank 0, once the run is over: ``summary.json`` (and ``params.pt``, the export), then the finished manifest
    once every rank's shards are complete. ``full``: the gathered parameters of a sharded model."""
    cfg, info, t, model, capture, run_dir = run.cfg, run.info, run.cfg.train, run.model, run.capture, run.run_dir
    run.metrics_f.close()
    atomic_write_json(run_dir / "summary.json", summary)
    if t.save_params:
        with atomic_path(run_dir / "params.pt") as tmp:
            torch.save(full or {k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp)
    if t.export:
        build = {"vocab_size": run.data.vocab_size, "max_seq_len": t.seq_len, **run.data.input_dims}
        if full is not None:  # the sharded model, gathered into an unsharded one
            model = build_model(cfg.resolved().model, **build)
            model.load_state_dict(full)
        prepared = getattr(run.data, "prepared", None)
        tokenizer = getattr(prepared, "tokenizer_file", None)  # text data: its tokenizer; CTR data has none
        export_model(model, cfg.model, run_dir / "export", build=build, tokenizer_file=tokenizer)
        run.log(f"exported the model to {run_dir / 'export'}")
    if capture:
        if info.world_size > 1:  # every rank's shards are complete before the manifest says so
            dist.barrier()
        tdir = paths.trace_dir(cfg.run_id)  # the ranks' shard lists, merged: a reader then knows every shard
        shards = collect_shards(tdir, info.world_size)
        write_manifest(tdir, {**run.manifest, "finished": True, "summary": summary, "shards": shards})
    loss, val_loss = summary["final_loss"], summary["val_loss"]
    run.log(f"done: loss {loss:.4f}, val loss {val_loss:.4f}, {summary['tokens_per_s']:.0f} tokens/s")
