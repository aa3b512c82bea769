"""The collectives local SGD needs, behind one small interface: a sum all-reduce of a tensor (blocking, or
started and waited for later, so EDiT can prefetch the next module's sync) and an all-gather of one scalar per
worker.

:class:`TorchCollective` is torch.distributed (gloo or NCCL). :class:`ThreadGroup` runs M workers as threads
of one process with a barrier-based all-reduce, so the sync logic is unit-tested with no processes.
"""

from __future__ import annotations

import threading
from typing import Protocol

import torch
import torch.distributed as dist

from zen_analysis.wire.inflight import hold


class Collective(Protocol):
    rank: int
    world: int

    def all_reduce_sum(self, tensor: torch.Tensor) -> None: ...

    def all_reduce_sum_async(self, tensor: torch.Tensor): ...

    def all_gather_scalars(self, value: float) -> torch.Tensor: ...


class Done:
    """The handle of a collective that already completed."""

    def wait(self) -> bool:
        return True


class TorchCollective:
    def __init__(self, group=None) -> None:

        self.group = group
        initialised = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank(group) if initialised else 0
        self.world = dist.get_world_size(group) if initialised else 1
        self.device = torch.device("cpu")
        if initialised and dist.get_backend(group) == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        if self.world > 1:
            hold(tensor)
            dist.all_reduce(tensor, group=self.group)

    def all_reduce_sum_async(self, tensor: torch.Tensor):
        """Start the all-reduce; ``.wait()`` on the handle before reading ``tensor``."""
        if self.world == 1:
            return Done()

        hold(tensor)
        return dist.all_reduce(tensor, group=self.group, async_op=True)

    def all_gather_scalars(self, value: float) -> torch.Tensor:
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        if self.world == 1:
            return t.cpu()

        out = [torch.empty_like(t) for _ in range(self.world)]
        hold(t, *out)
        dist.all_gather(out, t, group=self.group)
        return torch.cat(out).cpu()


class ThreadGroup:
    """Shared state of M thread-workers; ``member(r)`` is worker r's :class:`Collective`."""

    def __init__(self, world: int) -> None:
        self.world = world
        self._barrier = threading.Barrier(world)
        self._slots: list = [None] * world

    def member(self, rank: int) -> _ThreadMember:
        return _ThreadMember(self, rank)


class _ThreadMember:
    def __init__(self, group: ThreadGroup, rank: int) -> None:
        self.group, self.rank, self.world = group, rank, group.world
        self.device = torch.device("cpu")

    def _exchange(self, value):
        g = self.group
        g._slots[self.rank] = value
        g._barrier.wait()
        everyone = list(g._slots)
        g._barrier.wait()  # nobody overwrites a slot before all have read
        return everyone

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        parts = self._exchange(tensor.clone())
        total = parts[0].clone()
        for p in parts[1:]:
            total += p
        tensor.copy_(total)

    def all_reduce_sum_async(self, tensor: torch.Tensor) -> Done:
        self.all_reduce_sum(tensor)  # threads: done at once, the order of calls is what the tests check
        return Done()

    def all_gather_scalars(self, value: float) -> torch.Tensor:
        return torch.tensor(self._exchange(float(value)), dtype=torch.float64)
