"""Everything a training run builds before its first step, one named step each: the data, the model, the sync
attached to it (with ``perturb``'s slow link) and the method's hooks around the loop, the optimizers, the capture and
its trace manifest, the restore from a checkpoint, and rank 0's open ``metrics.jsonl``. :func:`setup_run` runs them
in order; :mod:`zen_analysis.train.loop` then steps the :class:`TrainingRun` it returns."""

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from zen_analysis import paths
from zen_analysis.capture.hooks import GradientCapture
from zen_analysis.capture.traces import TraceWriter, write_manifest
from zen_analysis.config import AUTO, ExperimentConfig
from zen_analysis.config.model import model_label
from zen_analysis.fsdp.embedding_capture import FSDPCapture
from zen_analysis.ranks.env import RankInfo
from zen_analysis.sync.grad_sync import GradSync
from zen_analysis.train import checkpoint
from zen_analysis.train.loop_hooks import LoopHooks, hooks_for
from zen_analysis.train.optim import LazyRowAdamW, fused_adamw
from zen_analysis.train.perturbations import slow_link
from zen_analysis.train.provenance import git_commit, is_sharded, package_versions
from zen_analysis.train.registry import build_sync
from zen_analysis.workload.batches import PreparedData, TokenData, open_data, prepared_for_run
from zen_analysis.workload.ctr import CTRData
from zen_analysis.workload.models import build_model, input_embedding_name, resolve_pretrained


@dataclass
class TrainingRun:
    """One rank's training run as :func:`setup_run` builds it: what each step and the loop's finish read. The sync
    object is not in it: it travels beside it (the contract test follows it wherever it goes)."""

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
    hooks: LoopHooks
    """What the method adds around the plain loop (:func:`~zen_analysis.train.loop_hooks.hooks_for`: local SGD's)."""
    sharded: bool
    """The ranks hold shards of the model's parameters (FSDP2): checkpoints through DCP, the final ones gathered."""
    capture: GradientCapture | None
    manifest: dict[str, Any]
    """The trace manifest as written at the start (``finished: False``); the loop's finish completes it."""
    metrics_f: IO[str] | None
    """Rank 0's open ``metrics.jsonl`` (line-buffered); ``None`` on the other ranks."""
    checkpoint_every: int = 0
    """``train.checkpoint_every``, or 0 where checkpoints do not cover the run (:func:`checkpoint.unsupported`)."""
    autos: dict[str, bool] = field(default_factory=dict)
    """The switches set to ``auto`` and what each came to (``model.sparse_embedding``: on), the summary's ``auto``."""
    dense_grads: dict = field(default_factory=dict)
    """:func:`densify_sparse_grads`'s buffers: a ``sparse_embedding`` gradient's dense table, reused every step."""

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers this run steps: the main one, and the lazy row update's where there is one."""
        return [o for o in (self.optimizer, self.row_optimizer) if o is not None]


def setup_run(
    cfg: ExperimentConfig,
    info: RankInfo,
    sync: GradSync | None,
    log: Callable[[str], Any],
    resume_from: tuple[int, Path] | None = None,
) -> tuple[TrainingRun, GradSync]:
    """Everything before the first step: the run directory, the data, the model (identical on every rank), the sync
    (built from ``cfg.sync`` unless one is passed) attached to it, the optimizer, the capture and its trace manifest,
    the start-of-run log lines and (rank 0) the open ``metrics.jsonl``."""
    t = cfg.train
    run_dir = paths.run_dir(cfg.run_id)
    if info.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
    cfg = resolve_pretrained(cfg)  # a launcher did already (its config.json): the same settings
    built = cfg.resolved()  # model.sparse_embedding and sync.overlap: auto made on or off
    prepared, data = _build_data(cfg, built, run_dir)
    autos = _autos(cfg, built)
    model = _build_model(cfg, built, data, info)
    sync = sync or build_sync(built.sync, cfg.local_sgd, network=_network(cfg), sharding=cfg.dist.sharding)
    slow_link(sync, cfg, info.world_size)  # perturb.bandwidth_gbps: every cross-worker all-reduce pays a slow link
    sync.attach(model)
    hooks, sharded = hooks_for(sync), is_sharded(model)
    optimizer, row_optimizer, embedding = _build_optimizers(cfg, model)
    num_params = sum(p.numel() for p in model.parameters())
    capture, tensors = _open_capture(cfg, info, model, sharded=sharded, hooks=hooks)
    manifest = _manifest(cfg, info, prepared, tensors)
    if info.is_main:
        _announce(cfg, info, log, data, num_params, autos, capture, manifest)
    no_checkpoints = checkpoint.unsupported(cfg) if t.checkpoint_every else None
    if no_checkpoints and info.is_main and t.num_steps > t.checkpoint_every:
        log(f"no checkpoints for this run: {no_checkpoints}")
    run = TrainingRun(
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
        hooks=hooks,
        sharded=sharded,
        capture=capture,
        manifest=manifest,
        metrics_f=None,
        checkpoint_every=0 if no_checkpoints else t.checkpoint_every,
        autos=autos,
    )
    if resume_from is not None:  # the state of the checkpoint's step; the metrics rows before it stay
        _restore(run, sync, resume_from)
    mode = "a" if resume_from is not None else "w"
    run.metrics_f = open(run_dir / "metrics.jsonl", mode, buffering=1) if info.is_main else None
    return run, sync


def _build_data(
    cfg: ExperimentConfig, built: ExperimentConfig, run_dir: Path
) -> tuple[PreparedData, TokenData | CTRData]:
    """The run's prepared data and the batches read from it (masked-LM pairs for ``model.objective=masked``, read
    from ``built``, the resolved config)."""
    prepared = prepared_for_run(cfg.data, run_dir)
    t, objective = cfg.train, built.model.objective
    return prepared, open_data(prepared, seq_len=t.seq_len, seed=t.seed, objective=objective)


def _autos(cfg: ExperimentConfig, built: ExperimentConfig) -> dict[str, bool]:
    """The switches set to ``auto`` and what :meth:`ExperimentConfig.resolved` (``built``) made of each."""
    return {
        f"{section}.{name}": getattr(getattr(built, section), name)
        for section, name in (("model", "sparse_embedding"), ("sync", "overlap"))
        if getattr(getattr(cfg, section), name) == AUTO
    }


def _build_model(
    cfg: ExperimentConfig, built: ExperimentConfig, data: TokenData | CTRData, info: RankInfo
) -> torch.nn.Module:
    """The model on this rank's device, in training mode: the seed makes every rank build identical weights."""
    torch.manual_seed(cfg.train.seed)
    model = build_model(built.model, vocab_size=data.vocab_size, max_seq_len=cfg.train.seq_len, **data.input_dims)
    model = model.to(info.device)
    model.train()
    return model


def _network(cfg: ExperimentConfig) -> dict[str, Any]:
    """Where ``auto``'s planner runs: the ``dist`` section's ``network``, ``bandwidth_gbps`` and ``ranks_per_node``."""
    return {k: getattr(cfg.dist, k) for k in ("network", "bandwidth_gbps", "ranks_per_node")}


def _build_optimizers(
    cfg: ExperimentConfig, model: torch.nn.Module
) -> tuple[torch.optim.Optimizer, LazyRowAdamW | None, torch.nn.Parameter | None]:
    """AdamW over two groups (weight decay on matrices, none on vectors), and under ``train.embedding_update=lazy``
    the input embedding apart, in its own row-wise optimizer: (optimizer, row optimizer, embedding)."""
    t = cfg.train
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
    return optimizer, row_optimizer, embedding


def _open_capture(
    cfg: ExperimentConfig, info: RankInfo, model: torch.nn.Module, *, sharded: bool, hooks: LoopHooks
) -> tuple[GradientCapture | None, dict[str, Any]]:
    """The capture (per-worker sparse gradients into this rank's trace shards) and the tensors it records, local
    SGD's pseudo-gradients included; (None, {}) with capture off."""
    capture = None
    if cfg.capture.enabled:
        writer = TraceWriter(
            paths.trace_dir(cfg.run_id),
            rank=info.rank,
            run_id=cfg.run_id,
            world_size=info.world_size,
            steps_per_shard=cfg.capture.steps_per_shard,
        )
        capture_type = FSDPCapture if sharded else GradientCapture  # FSDP2: from the embedding's ids and output
        capture = capture_type(cfg.capture, model, writer, rank=info.rank, seed=cfg.train.seed)
    tensors = capture.tensor_info() if capture else {}
    if capture and cfg.capture.pseudo != "off":  # local SGD's pseudo-gradients at each outer sync, same shards
        tensors.update(hooks.open_capture(capture, rank=info.rank, mode=cfg.capture.pseudo))
    return capture, tensors


def _manifest(cfg: ExperimentConfig, info: RankInfo, prepared: PreparedData, tensors: dict) -> dict[str, Any]:
    """The trace manifest as the run starts (``finished: False``)."""
    V = cfg.train.workers_per_rank
    return {
        "run_id": cfg.run_id,
        "config": cfg.to_dict(),
        "world_size": info.world_size,
        "workers_per_rank": V,
        "num_workers": info.world_size * V,
        "worker_of_rank": "worker = rank * workers_per_rank + micro-batch index",
        "versions": package_versions(),
        "git_commit": git_commit(),
        "platform": platform.platform(),
        "corpus": prepared.to_dict(),
        "tensors": tensors,
        "finished": False,
    }


def _announce(cfg, info, log, data, num_params: int, autos: dict, capture, manifest: dict) -> None:
    """Rank 0: the manifest written (with capture on) and the start-of-run log lines."""
    t, tensors = cfg.train, manifest["tensors"]
    if capture:
        write_manifest(paths.trace_dir(cfg.run_id), manifest)
    log(
        f"run {cfg.run_id}: {model_label(dataclasses.asdict(cfg.model))} {num_params / 1e6:.2f}M params, "
        f"vocab {data.vocab_size}, "
        f"{info.world_size} ranks x {t.workers_per_rank} workers, global batch {cfg.global_batch} x {t.seq_len} "
        f"tokens, {t.num_steps} steps on {info.device}"
    )
    if autos:
        log(", ".join(f"{key}=auto: {'on' if on else 'off'}" for key, on in autos.items()))
    if capture:
        log(
            f"capturing every {cfg.capture.every} steps: "
            + ", ".join(f"{n} ({i['kind']}, {i['numel']:,})" for n, i in tensors.items())
        )


def _restore(run: TrainingRun, sync: GradSync, resume_from: tuple[int, Path]) -> None:
    """The model, optimizers, sync and capture as the checkpoint saved them; rank 0 trims ``metrics.jsonl`` to it."""
    info, log = run.info, run.log
    start, path = resume_from
    sync_state, capture_state = checkpoint.restore(path, rank=info.rank, model=run.model, optimizers=run.optimizers)
    sync.load_state_dict(sync_state)
    if run.capture:  # this rank's shards written after the checkpoint go: their steps run again
        dropped = run.capture.load_state_dict(capture_state)
        if dropped:
            log(f"rank {info.rank}: dropped trace shards written after the checkpoint: {', '.join(dropped)}")
    if info.is_main:
        checkpoint.trim_metrics(run.run_dir / "metrics.jsonl", start, log=log)  # done already when launch() resumes
        log(f"resumed from step {start} ({path.name})")
