"""Gradient synchronization plugged into the training loop.

The loop calls ``sync.attach(model)`` once and ``sync.synchronize(model)`` after the last micro-batch's backward
of every step; after it every rank holds the same averaged gradient. The default, :class:`DenseAllReduce`, is
what DDP does: broadcast rank 0's parameters once, then all-reduce flattened gradient buckets. The schemes,
Zen and EDiT plug in through the same two calls (``build_sync``), not by forking the loop.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.distributed as dist
from torch import nn

from zen_analysis.config import SyncConfig


class GradSync(Protocol):
    name: str

    def attach(self, model: nn.Module) -> None: ...

    def synchronize(self, model: nn.Module) -> None: ...


class DenseAllReduce:
    """Bucketed dense all-reduce of every gradient, averaged over ranks (the baseline)."""

    name = "allreduce"

    def __init__(self, *, bucket_mb: float = 25.0, group: dist.ProcessGroup | None = None) -> None:
        self.bucket_bytes = int(bucket_mb * 2**20)
        self.group = group
        self._buckets: list[list[nn.Parameter]] = []

    def _world(self) -> int:
        return dist.get_world_size(self.group) if dist.is_initialized() else 1

    def attach(self, model: nn.Module) -> None:
        params = [p for p in model.parameters() if p.requires_grad]
        if self._world() > 1:
            for p in params:  # identical start on every rank, whatever each rank's RNG did
                dist.broadcast(p.data, src=0, group=self.group)
        self._buckets, bucket, size = [], [], 0
        for p in params:
            bucket.append(p)
            size += p.numel() * p.element_size()
            if size >= self.bucket_bytes:
                self._buckets.append(bucket)
                bucket, size = [], 0
        if bucket:
            self._buckets.append(bucket)

    def synchronize(self, model: nn.Module) -> None:
        world = self._world()
        if world == 1:
            return
        for bucket in self._buckets:
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in bucket]
            flat_N = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat_N, group=self.group)
            flat_N /= world
            offset = 0
            for p, g in zip(bucket, grads):
                n = g.numel()
                if p.grad is None:
                    p.grad = g
                p.grad.copy_(flat_N[offset : offset + n].view_as(g))
                offset += n


SYNCS = {"allreduce": DenseAllReduce}


def build_sync(cfg: SyncConfig) -> GradSync:
    """The synchronization named by ``cfg.scheme``."""
    if cfg.scheme not in SYNCS:
        raise ValueError(f"sync.scheme={cfg.scheme!r} is unknown; available: {sorted(SYNCS)}")
    return SYNCS[cfg.scheme](bucket_mb=cfg.bucket_mb)
