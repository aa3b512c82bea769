"""The one place a configured name becomes a synchronization: ``sync.scheme`` (a communication scheme of
:data:`zen_analysis.comm.SCHEMES`, ``auto`` for Zen's planner, or a local-SGD method) and ``sync.compress``."""

from __future__ import annotations

import torch

from zen_analysis.comm import SCHEMES
from zen_analysis.config import LocalSGDSection, SyncConfig
from zen_analysis.local_sgd import METHODS, LocalSGD, method_config
from zen_analysis.sync.base import DenseAllReduce, GradSync
from zen_analysis.sync.compressed import CompressedSync
from zen_analysis.sync.planner import Planner
from zen_analysis.sync.sparse import SparseSync
from zen_analysis.zen.bitmap import set_cache_limit

SYNCS = {"allreduce": DenseAllReduce}
"""Dense syncs by name; every other scheme of the registry is a sparse one."""
SPARSE_SCHEMES = tuple(name for name in SCHEMES if name not in SYNCS)


def build_sync(cfg: SyncConfig, local_sgd=None) -> GradSync:
    """The synchronization named by ``cfg.scheme``: ``allreduce`` (dense) or a sparse scheme for the embedding;
    with ``cfg.compress == "topk"``, every gradient bucket top-k sparsified and summed by the scheme."""
    set_cache_limit(int(cfg.zen_cache_mb * 2**20))
    wire = None if cfg.wire_dtype == "model" else getattr(torch, cfg.wire_dtype)
    if cfg.scheme in METHODS:
        section = local_sgd or LocalSGDSection()
        return LocalSGD(method_config(cfg.scheme, **section.overrides()), name=cfg.scheme)
    if cfg.compress == "topk":
        if cfg.scheme not in (*SYNCS, *SPARSE_SCHEMES):
            raise ValueError(f"sync.scheme={cfg.scheme!r} is unknown; available: {sorted([*SYNCS, *SPARSE_SCHEMES])}")
        return CompressedSync(
            cfg.scheme,
            ratio=cfg.topk_ratio,
            bucket_mb=cfg.bucket_mb,
            seed=cfg.hash_seed,
            overlap=cfg.overlap,
            wire_dtype=wire,
        )
    if cfg.scheme in SYNCS:
        return SYNCS[cfg.scheme](bucket_mb=cfg.bucket_mb, overlap=cfg.overlap, wire_dtype=wire)
    if cfg.scheme == "auto":
        planner = Planner(topology=cfg.planner_topology, profile_steps=cfg.planner_steps)
        return SparseSync(
            "auto", bucket_mb=cfg.bucket_mb, planner=planner, seed=cfg.hash_seed, overlap=cfg.overlap, wire_dtype=wire
        )
    if cfg.scheme in SPARSE_SCHEMES:
        return SparseSync(
            cfg.scheme,
            bucket_mb=cfg.bucket_mb,
            gpus_per_node=cfg.gpus_per_node,
            seed=cfg.hash_seed,
            granularity=cfg.granularity,
            row_source=cfg.row_source,
            overlap=cfg.overlap,
            wire_dtype=wire,
        )
    raise ValueError(
        f"sync.scheme={cfg.scheme!r} is unknown; available: {sorted([*SYNCS, *SPARSE_SCHEMES, 'auto', *METHODS])}"
    )
