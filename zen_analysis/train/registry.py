"""The one place a configured name becomes a synchronization: ``sync.method`` (dense, natural, top-k, or a local SGD
method) and ``sync.scheme`` (a communication scheme of :data:`zen_analysis.comm.SCHEMES`, or ``auto`` for Zen's
planner), which sums what the method sends sparse."""

from __future__ import annotations

import torch

from zen_analysis.comm import SCHEMES
from zen_analysis.comm.planner import Planner
from zen_analysis.comm.schemes import BUILTIN_SCHEMES
from zen_analysis.config import LocalSGDSection, SyncConfig
from zen_analysis.evaluation.calibrate import planner_topology
from zen_analysis.fsdp.training import FSDPSync
from zen_analysis.local_sgd import METHODS, LocalSGD, method_config
from zen_analysis.sync.compressed import CompressedSync
from zen_analysis.sync.grad_sync import DenseAllReduce, GradSync
from zen_analysis.sync.sparse import SparseSync
from zen_analysis.zen.bitmap import set_cache_limit

SYNCS = {"allreduce": DenseAllReduce}
"""Dense syncs by name; every other scheme of the registry is a sparse one."""
SPARSE_SCHEMES = tuple(name for name in BUILTIN_SCHEMES if name not in SYNCS)
"""The built-in sparse schemes; a scheme registered from outside the package is a sparse one too (read from
:data:`~zen_analysis.comm.SCHEMES` when the sync is built)."""


def build_sync(cfg: SyncConfig, local_sgd=None, *, network: dict | None = None, sharding: str = "none") -> GradSync:
    """The synchronization ``cfg.method`` names, its sparse part summed by ``cfg.scheme``: ``dense`` (every gradient
    dense), ``natural`` (the embedding's sparse gradient by the scheme), ``topk`` (every gradient bucket top-k
    sparsified, summed by the scheme) or a local SGD method (``local_sgd``: its section). ``network`` (``network``,
    ``bandwidth_gbps``, ``ranks_per_node`` of the ``dist`` section): where ``auto``'s planner runs. ``sharding``:
    ``dist.sharding``; under ``fsdp`` the sync is FSDP2's (:class:`~zen_analysis.fsdp.training.FSDPSync`), its input
    embedding's reduce-scatter stock (``method=dense``), Zen's (``scheme=zen``) or chosen per unit (``auto``)."""
    set_cache_limit(int(cfg.zen_cache_mb * 2**20))
    wire = None if cfg.wire_dtype == "model" else getattr(torch, cfg.wire_dtype)
    if sharding == "fsdp":
        return FSDPSync(
            embedding="dense" if cfg.method == "dense" else "zen" if cfg.scheme == "zen" else "auto",
            reduce_dtype=wire,
            seed=cfg.hash_seed,
            row_source=cfg.row_source,
            every=cfg.planner_every,
            hysteresis=cfg.planner_hysteresis,
        )
    planner = _planner(cfg, network) if cfg.scheme == "auto" else None
    if cfg.method in METHODS:
        section = local_sgd or LocalSGDSection()
        config = method_config(cfg.method, seed=cfg.hash_seed, **section.overrides(cfg.scheme))
        return LocalSGD(config, name=cfg.method, planner=planner if config.compress != "none" else None)
    if cfg.scheme not in (*SYNCS, *SCHEMES, "auto"):
        raise ValueError(f"sync.scheme={cfg.scheme!r} is unknown; available: {sorted({*SYNCS, *SCHEMES})}")
    if cfg.method == "topk":
        return CompressedSync(
            cfg.scheme,
            ratio=cfg.topk_ratio,
            bucket_mb=cfg.bucket_mb,
            seed=cfg.hash_seed,
            overlap=cfg.overlap,
            wire_dtype=wire,
            planner=planner,
        )
    if cfg.method == "dense":
        return SYNCS[cfg.scheme](bucket_mb=cfg.bucket_mb, overlap=cfg.overlap, wire_dtype=wire)
    if cfg.method == "natural":
        return SparseSync(
            cfg.scheme,
            bucket_mb=cfg.bucket_mb,
            planner=planner,
            gpus_per_node=0 if planner else cfg.gpus_per_node,
            seed=cfg.hash_seed,
            granularity=cfg.granularity,
            row_source=cfg.row_source,
            overlap=cfg.overlap,
            wire_dtype=wire,
        )
    raise ValueError(f"sync.method={cfg.method!r} is unknown; available: {['dense', 'natural', 'topk', *METHODS]}")


def _planner(cfg: SyncConfig, network: dict | None):
    """``scheme=auto``'s planner, built by the sync at ``attach`` once the world size is known (on a topology the
    launcher calibrated: a rank never forks a calibration of its own)."""

    def build(world: int) -> Planner:
        topology = planner_topology(cfg.planner_topology, world, **(network or {}), calibrate_missing=False)
        return Planner(topology=topology, every=cfg.planner_every, hysteresis=cfg.planner_hysteresis)

    return build
