"""The one training loop (nanoGPT-style, read top to bottom).

Dense all-reduce, the communication schemes, Zen and EDiT differ by the ``sync`` object passed in, not by forks of
this loop. Each step: every rank runs its V virtual workers' micro-batches (gradients accumulate), the capture
records per-worker gradients on capture steps, ``sync.synchronize`` averages gradients across ranks, then the
optimizer steps. Rank 0 writes the run's metrics, summary and trace manifest; every rank writes its own shards.

Files (``data/runs/<run_id>/``): ``metrics.jsonl`` (one line per step: loss, lr, step, compute, sync, exchange and
capture time),
``summary.json`` (final numbers). Traces: ``data/traces/<run_id>/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import torch
import torch.distributed as dist

from zen_analysis import paths
from zen_analysis.atomic import atomic_path, atomic_write_json
from zen_analysis.capture.hooks import GradientCapture
from zen_analysis.capture.traces import TraceWriter, collect_shards, write_manifest
from zen_analysis.config import AUTO, ExperimentConfig
from zen_analysis.ranks import env
from zen_analysis.ranks.env import RankInfo
from zen_analysis.sync.base import GradSync
from zen_analysis.train import checkpoint
from zen_analysis.train.optim import (
    LazyRowAdamW,
    clip_grad_norm_by_rows,
    densify_sparse_grads,
    embedding_rows,
    fused_adamw,
)
from zen_analysis.train.perturb import network_delay, network_seconds, spiked, straggler
from zen_analysis.train.registry import build_sync
from zen_analysis.wire.inflight import hold
from zen_analysis.workload.ctr import CTRData
from zen_analysis.workload.data import TokenData, open_data, prepared_for_run
from zen_analysis.workload.export import export_model
from zen_analysis.workload.model import build_model, input_embedding_name, model_loss, to_device


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


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(paths.REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("zen_analysis", "torch", "transformers", "tokenizers", "datasets", "pyarrow", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def parameter_digest(model: torch.nn.Module) -> str:
    """sha256 over every parameter's bytes: equal digests mean bit-identical replicas."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@dataclass
class _Run:
    """One rank's training run as :func:`_setup` builds it: what each step and :func:`_finish` read. The sync
    object is not in it: it travels beside it, always named ``sync`` (the contract test reads those uses)."""

    cfg: ExperimentConfig
    info: RankInfo
    log: Callable[[str], Any]
    run_dir: Path
    data: TokenData | CTRData
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    row_optimizer: LazyRowAdamW | None
    """``train.embedding_update=lazy``: the input embedding's optimizer (the other one holds the rest)."""
    embedding: torch.nn.Parameter | None
    """``train.embedding_update=lazy``: the input embedding's weight."""
    num_params: int
    capture: GradientCapture | None
    manifest: dict[str, Any]
    """The trace manifest as written at the start (``finished: False``); :func:`_finish` completes it."""
    metrics_f: IO[str] | None
    """Rank 0's open ``metrics.jsonl`` (line-buffered); ``None`` on the other ranks."""
    checkpoint_every: int = 0
    """``train.checkpoint_every``, or 0 where checkpoints do not cover the run (:func:`checkpoint.unsupported`)."""
    autos: dict[str, bool] = field(default_factory=dict)
    """The switches set to ``auto`` and what each came to (``model.sparse_embedding``: on), the summary's ``auto``."""
    dense_grads: dict = field(default_factory=dict)
    """:func:`densify_sparse_grads`'s buffers: a ``sparse_embedding`` gradient's dense table, reused every step."""


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
    start = found[0] if found else 0
    run, sync = _setup(cfg, info, sync, log, resume_from=found)
    # ---- the loop
    t_start = time.perf_counter()
    loss = float("nan")
    max_steps = sync.max_local_steps(cfg.train.num_steps)
    local_losses = sync.local  # local SGD: no per-step loss all-reduce (it would be a rendezvous)
    straggle = straggler(cfg, info)
    steps_done = 0
    for step in range(start, max_steps):
        loss = _step(run, sync, step, local_losses=local_losses, straggle=straggle)
        steps_done += 1
        if sync.should_stop():
            break
    return _finish(run, sync, loss=loss, steps_done=steps_done, t_start=t_start)


def _newest_checkpoint(cfg: ExperimentConfig, info: RankInfo, log) -> tuple[int, Path]:
    found = checkpoint.newest(paths.run_dir(cfg.run_id), info.world_size, log=log)
    if found is None:
        raise ValueError(f"run {cfg.run_id} has no complete checkpoint to resume from (train.checkpoint_every)")
    return found


def _setup(
    cfg: ExperimentConfig,
    info: RankInfo,
    sync: GradSync | None,
    log: Callable[[str], Any],
    resume_from: tuple[int, Path] | None = None,
) -> tuple[_Run, GradSync]:
    """Everything before the first step: the run directory, the data, the model (identical on every rank), the sync
    (built from ``cfg.sync`` unless one is passed) attached to it, the optimizer, the capture and its trace manifest,
    the start-of-run log lines and (rank 0) the open ``metrics.jsonl``."""
    t = cfg.train
    run_dir = paths.run_dir(cfg.run_id)
    if info.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
    V = t.workers_per_rank
    # ---- data and model: the seed makes every rank build identical weights
    prepared = prepared_for_run(cfg.data, run_dir)
    data = open_data(prepared, seq_len=t.seq_len, seed=t.seed)
    torch.manual_seed(t.seed)
    built = cfg.resolved()  # model.sparse_embedding and sync.overlap: auto made on or off
    autos = {
        f"{section}.{name}": getattr(getattr(built, section), name)
        for section, name in (("model", "sparse_embedding"), ("sync", "overlap"))
        if getattr(getattr(cfg, section), name) == AUTO
    }
    model = build_model(built.model, vocab_size=data.vocab_size, max_seq_len=t.seq_len, **data.input_dims)
    model = model.to(info.device)
    model.train()
    network = {k: getattr(cfg.dist, k) for k in ("network", "bandwidth_gbps", "ranks_per_node")}
    sync = sync or build_sync(built.sync, cfg.local_sgd, network=network)
    if cfg.perturb.bandwidth_gbps > 0:  # every cross-worker all-reduce of the sync also pays a slow link
        sync.set_link(
            lambda nbytes: network_delay(cfg, nbytes, info.world_size),
            lambda nbytes: network_seconds(cfg, nbytes, info.world_size),
        )
    sync.attach(model)
    embedding = None
    if t.embedding_update == "lazy":  # the input embedding steps its touched rows alone (SparseAdam's semantics)
        embedding = dict(model.named_parameters())[input_embedding_name(model)]
    decay = [p for p in model.parameters() if p.dim() >= 2 and p is not embedding]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=t.lr,
        betas=(0.9, 0.95),
        fused=fused_adamw(model.parameters()),
    )
    row_optimizer = None
    if embedding is not None:
        row_optimizer = LazyRowAdamW([embedding], lr=t.lr, betas=(0.9, 0.95), weight_decay=t.weight_decay)
    num_params = sum(p.numel() for p in model.parameters())
    # ---- capture: per-worker sparse gradients into this rank's trace shards
    capture = None
    if cfg.capture.enabled:
        writer = TraceWriter(
            paths.trace_dir(cfg.run_id),
            rank=info.rank,
            run_id=cfg.run_id,
            world_size=info.world_size,
            steps_per_shard=cfg.capture.steps_per_shard,
        )
        capture = GradientCapture(cfg.capture, model, writer, rank=info.rank, seed=t.seed)
    tensors = capture.tensor_info() if capture else {}
    if capture and cfg.capture.pseudo != "off":  # local SGD's pseudo-gradients at each outer sync, same shards
        tensors.update(sync.capture_pseudo_gradients(capture.writer, rank=info.rank, mode=cfg.capture.pseudo))
    manifest = {
        "run_id": cfg.run_id,
        "config": cfg.to_dict(),
        "world_size": info.world_size,
        "workers_per_rank": V,
        "num_workers": info.world_size * V,
        "worker_of_rank": "worker = rank * workers_per_rank + micro-batch index",
        "versions": package_versions(),
        "git_commit": _git_commit(),
        "platform": platform.platform(),
        "corpus": prepared.to_dict(),
        "tensors": tensors,
        "finished": False,
    }
    if info.is_main:
        if capture:
            write_manifest(paths.trace_dir(cfg.run_id), manifest)
        log(
            f"run {cfg.run_id}: {cfg.model.arch} {num_params / 1e6:.2f}M params, vocab {data.vocab_size}, "
            f"{info.world_size} ranks x {V} workers, global batch {cfg.global_batch} x {t.seq_len} tokens, "
            f"{t.num_steps} steps on {info.device}"
        )
        if autos:
            log(", ".join(f"{key}=auto: {'on' if on else 'off'}" for key, on in autos.items()))
        if capture:
            log(
                f"capturing every {cfg.capture.every} steps: "
                + ", ".join(f"{n} ({i['kind']}, {i['numel']:,})" for n, i in tensors.items())
            )
    no_checkpoints = checkpoint.unsupported(cfg) if t.checkpoint_every else None
    if no_checkpoints and info.is_main and t.num_steps > t.checkpoint_every:
        log(f"no checkpoints for this run: {no_checkpoints}")
    if resume_from is not None:  # the state of the checkpoint's step; the metrics rows before it stay
        start, path = resume_from
        optimizers = [o for o in (optimizer, row_optimizer) if o is not None]
        sync_state, capture_state = checkpoint.restore(path, rank=info.rank, model=model, optimizers=optimizers)
        sync.load_state_dict(sync_state)
        if capture:  # this rank's shards written after the checkpoint go: their steps run again
            dropped = capture.load_state_dict(capture_state)
            if dropped:
                log(f"rank {info.rank}: dropped trace shards written after the checkpoint: {', '.join(dropped)}")
        if info.is_main:
            checkpoint.trim_metrics(run_dir / "metrics.jsonl", start, log=log)  # done already when launch() resumes
            log(f"resumed from step {start} ({path.name})")
    mode = "a" if resume_from is not None else "w"
    metrics_f = open(run_dir / "metrics.jsonl", mode, buffering=1) if info.is_main else None
    run = _Run(
        cfg=cfg,
        info=info,
        log=log,
        run_dir=run_dir,
        data=data,
        model=model,
        optimizer=optimizer,
        row_optimizer=row_optimizer,
        embedding=embedding,
        num_params=num_params,
        capture=capture,
        manifest=manifest,
        metrics_f=metrics_f,
        checkpoint_every=0 if no_checkpoints else t.checkpoint_every,
        autos=autos,
    )
    return run, sync


def _step(run: _Run, sync: GradSync, step: int, *, local_losses: bool, straggle: Callable[[int, float], None]) -> float:
    """One optimizer step: this rank's V workers' micro-batches (captured on capture steps), the straggler delay,
    ``sync.synchronize``, clipping, the optimizer; rank 0 writes the step's row to ``metrics.jsonl``. Returns the
    step's loss: the mean over ranks, or this rank's own under local SGD (``local_losses``)."""
    cfg, info, t, data, model, capture = run.cfg, run.info, run.cfg.train, run.data, run.model, run.capture
    V = t.workers_per_rank
    t0 = time.perf_counter()
    lr = lr_at(cfg, min(step, t.num_steps - 1))
    optimizers = [o for o in (run.optimizer, run.row_optimizer) if o is not None]
    for group in (g for o in optimizers for g in o.param_groups):
        group["lr"] = lr
    capturing = capture is not None and capture.is_capture_step(step)
    capture_s0 = capture.seconds if capture else 0.0
    sync_bytes0 = sync.sparse_bytes_sent or 0
    sparse_s0 = sync.sparse_seconds
    sync_s0 = sync.sync_seconds
    overlap_s0, hidden_s0, early0 = sync.overlap_seconds, sync.hidden_seconds, sync.early_buckets
    local_loss = 0.0
    for v in range(V):
        worker = info.rank * V + v
        x, y = data.batch("train", step=step, worker=worker, batch_size=t.batch_per_worker)
        x, y = spiked(cfg, info, step, x, y, data.vocab_size, micro=v)
        x, y = to_device(x, info.device), y.to(info.device)
        with capture.worker(step=step, worker=worker) if capturing else contextlib.nullcontext():
            micro_loss = model_loss(model, x, y) / V  # mean over the rank's batch
            if v == V - 1 and not capturing:  # sync.overlap: buckets start summing as backward fills them
                sync.before_last_backward()
            micro_loss.backward()
        local_loss += micro_loss.item()
    if capturing:
        capture.end_step()
    straggle(step, time.perf_counter() - t0 - (sync.sync_seconds - sync_s0))  # compute time only
    t_sync = time.perf_counter()
    compute_s = t_sync - t0
    sync.synchronize(model)
    # after the sync, never before: the sync's collectives (buckets held back by a parameter without a gradient on
    # some rank launch only in synchronize) must come in the same order on every rank
    stats = None if local_losses else _start_step_stats(local_loss, compute_s, info)
    t_clip = time.perf_counter()
    sync_s = t_clip - t_sync
    rows = {}  # lazy: the embedding's non-zero rows, what the clip reads and the row update steps
    if run.embedding is not None and run.embedding.grad is not None:
        rows = {run.embedding: embedding_rows(run.embedding.grad, sync.union_rows)}
    # a sparse=True gradient AdamW's dense step takes is clipped on its rows too, then placed in its dense table:
    # the clip's norm and scaling read the rows, not the table
    sparse = {p: embedding_rows(p.grad) for p in model.parameters() if p.grad is not None and p.grad.is_sparse}
    if t.grad_clip > 0 and (rows or sparse):
        clip_grad_norm_by_rows(model.parameters(), t.grad_clip, {**sparse, **rows})
    elif t.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
    # AdamW's: a sparse=True embedding's summed rows, in a dense table kept from step to step
    densify_sparse_grads(model.parameters(), keep=run.embedding, buffers=run.dense_grads)
    t_opt = time.perf_counter()
    run.optimizer.step()
    if run.row_optimizer is not None:
        run.row_optimizer.step(rows=rows)
    t_zero = time.perf_counter()
    for o in optimizers:
        o.zero_grad(set_to_none=True)
    t_stats = time.perf_counter()
    if local_losses:
        loss, compute_max_s = local_loss, compute_s
    else:
        loss, compute_max_s = _end_step_stats(stats, local_loss, compute_s, info)
    step_s = time.perf_counter() - t0
    row = {
        "step": step,
        "loss": loss,
        "lr": lr,
        "step_s": step_s,
        "compute_s": compute_s,  # rank 0's micro-batches (and capture) before the sync
        "sync_s": sync_s,  # rank 0's time in synchronize(): the exchange, and waiting for slower ranks to reach it
        # the exchange alone: rank 0's sync less its wait for the slowest rank's compute
        "exchange_s": max(sync_s - (compute_max_s - compute_s), 0.0),
        # the rest of the step, after the sync: clipping (the lazy update's row finding included), the
        # optimizer, zero_grad, and the wait for the loss mean over ranks (started after the sync: a rendezvous, but
        # it travels while the clip and the optimizer run)
        "clip_s": t_opt - t_clip,
        "optimizer_s": t_zero - t_opt,
        "zero_grad_s": t_stats - t_zero,
        "stats_s": t0 + step_s - t_stats,
        "capture_s": (capture.seconds - capture_s0) if capture else 0.0,
        "captured": capturing,
        "tokens": (step + 1) * cfg.global_batch * t.seq_len,
    }
    if sync.sparse_bytes_sent is not None:  # a sparse scheme syncs the embedding: its bytes and seconds this step
        row["sparse_bytes_sent_rank0"] = sync.sparse_bytes_sent - sync_bytes0
        row["sparse_s"] = sync.sparse_seconds - sparse_s0
    if sync.overlap:  # the sums started during backward: how long they took, and how much of it backward hid
        row["overlap_s"] = sync.overlap_seconds - overlap_s0
        row["hidden_s"] = sync.hidden_seconds - hidden_s0
        row["early_buckets"] = sync.early_buckets - early0
    if not math.isfinite(loss) and not t.allow_nonfinite_loss:
        if run.metrics_f:  # the step's row stays, with its loss: what the error names
            run.metrics_f.write(json.dumps(row) + "\n")
        raise NonFiniteLossError(step, loss, local=local_losses)
    if t.eval_every and (step + 1) % t.eval_every == 0 and step + 1 < t.num_steps:
        row["val_loss"] = validation_loss(model, data, cfg, info)
    if local_losses:
        row["loss_is_rank0_only"] = True
    if run.checkpoint_every and (step + 1) % run.checkpoint_every == 0 and step + 1 < t.num_steps:
        row["checkpoint_s"] = checkpoint.save(
            run.run_dir,
            step + 1,
            rank=info.rank,
            world=info.world_size,
            model=model,
            optimizers=optimizers,
            sync_state=sync.state_dict(),
            replicated=not sync.local,  # local SGD: each rank its own model between syncs
            keep=t.keep_checkpoints,
            capture_state=capture.state_dict() if capture else None,
        )
    if run.metrics_f:
        run.metrics_f.write(json.dumps(row) + "\n")
    return loss


def _finish(run: _Run, sync: GradSync, *, loss: float, steps_done: int, t_start: float) -> dict[str, Any]:
    """After the last step: close the capture, ``sync.finalize``, the final validation loss and the summary; each
    rank writes its local SGD log, rank 0 ``summary.json`` (and ``params.pt``), then the finished manifest once
    every rank's shards are complete. Returns the summary."""
    cfg, info, t, model, capture, run_dir = run.cfg, run.info, run.cfg.train, run.model, run.capture, run.run_dir
    V = t.workers_per_rank
    if capture:
        capture.close()  # writes the last shard: part of the capture cost, so inside the timed span
    sync.finalize(model)  # local SGD: one last sync, so the final model is the global one
    pseudo = sync.pseudo_capture
    if capture and pseudo is not None:
        capture.close()  # the last sync's pseudo-gradient records
    elapsed = time.perf_counter() - t_start
    total_steps = int(round(_mean_over_ranks(float(steps_done), info) * info.world_size))  # workers may differ (A-EDiT)
    val_loss = validation_loss(model, run.data, cfg, info)
    summary = {
        "run_id": cfg.run_id,
        "num_steps": t.num_steps,
        "final_loss": loss,
        "val_loss": val_loss,
        "num_params": run.num_params,
        "elapsed_s": elapsed,
        "tokens_per_s": total_steps * V * t.batch_per_worker * t.seq_len / elapsed,
        "total_steps_all_ranks": total_steps,
        "sync_bytes_rank": sync.bytes_sent,
        "steps_done": steps_done,
        "capture_s_rank0": (capture.seconds + getattr(pseudo, "seconds", 0.0)) if capture else 0.0,
        "trace_bytes_rank0": capture.writer.bytes_written if capture else 0,
        "param_sha256": parameter_digest(model),
    }
    if run.autos:  # what each auto switch came to on this run
        summary["auto"] = run.autos
    if sync.decisions:  # Zen's planner: what it chose per tensor, and why
        summary["planner"] = sync.decisions
    described = sync.describe()
    if described is not None:
        summary["sync"] = described
    if sync.log:  # local SGD: per sync and group, each worker's norm, weight, clip, skip
        with atomic_path(run_dir / "local_sgd" / f"rank{info.rank}.jsonl") as tmp:
            tmp.write_text("".join(json.dumps(row) + "\n" for row in sync.log))
    if info.is_main:
        run.metrics_f.close()
        atomic_write_json(run_dir / "summary.json", summary)
        if t.save_params:
            with atomic_path(run_dir / "params.pt") as tmp:
                torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp)
        if t.export:
            build = {"vocab_size": run.data.vocab_size, "max_seq_len": t.seq_len, **run.data.input_dims}
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
        run.log(f"done: loss {loss:.4f}, val loss {val_loss:.4f}, {summary['tokens_per_s']:.0f} tokens/s")
    elif capture and info.world_size > 1:
        dist.barrier()
    return summary
