"""Where an FSDP2 step's time goes: a comm wrapper that times every reduce-scatter or all-gather a unit makes.

:class:`Timed` wraps a unit's comm (stock FSDP2's default or Zen's) and adds the wall time of each call to a
:class:`CommClock`, by collective. On the CPU (gloo) FSDP2 calls its collectives synchronously, so that time is the
collective's; on CUDA the comm runs on FSDP2's side streams and a host timer measures only the launch, so the clock
is for CPU runs and says so (:attr:`CommClock.synchronous`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

from zen_analysis.fsdp.units import current_comm


@dataclass
class CommClock:
    """Seconds and calls by collective (``all_gather``, ``reduce_scatter``) and unit, since the last :meth:`take`."""

    seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    calls: dict[tuple[str, str], int] = field(default_factory=dict)
    synchronous: bool = True
    nbytes: dict[tuple[str, str], int] = field(default_factory=dict)
    """Bytes of the buffers the collectives were handed (an all-gather's input shard, a reduce-scatter's whole
    input), by (collective, unit), since the last :meth:`take_bytes`."""

    def add(self, kind: str, unit: str, seconds: float, nbytes: int = 0) -> None:
        self.seconds[(kind, unit)] = self.seconds.get((kind, unit), 0.0) + seconds
        self.calls[(kind, unit)] = self.calls.get((kind, unit), 0) + 1
        self.nbytes[(kind, unit)] = self.nbytes.get((kind, unit), 0) + nbytes

    def take_bytes(self) -> dict[tuple[str, str], int]:
        """:attr:`nbytes` so far; resets it."""
        out, self.nbytes = self.nbytes, {}
        return out

    def take(self) -> dict[tuple[str, str], float]:
        """The seconds so far, by (collective, unit); resets the clock."""
        out, self.seconds, self.calls = self.seconds, {}, {}
        return out


class _TimedAllGather(AllGather):
    def __init__(self, inner: AllGather, clock: CommClock, unit: str) -> None:
        self.inner, self.clock, self.unit = inner, clock, unit

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return self.inner.allocate(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, async_op: bool = False):
        t0 = time.perf_counter()
        work = self.inner(output_tensor, input_tensor, group, async_op)
        self.clock.add("all_gather", self.unit, time.perf_counter() - t0, _nbytes(input_tensor))
        return work


class _TimedReduceScatter(ReduceScatter):
    def __init__(self, inner: ReduceScatter, clock: CommClock, unit: str) -> None:
        self.inner, self.clock, self.unit = inner, clock, unit

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return self.inner.allocate(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op: bool = False):
        t0 = time.perf_counter()
        work = self.inner(output_tensor, input_tensor, group, op, async_op)
        self.clock.add("reduce_scatter", self.unit, time.perf_counter() - t0, _nbytes(input_tensor))
        return work


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def time_comms(units: dict[str, object], clock: CommClock | None = None) -> CommClock:
    """Wrap every unit's all-gather and reduce-scatter (``units``: name -> ``FSDPModule``) in timers on one clock;
    call it after Zen's comms are installed, so they are what is timed."""
    clock = clock or CommClock()
    for name, unit in units.items():
        unit.set_custom_all_gather(_TimedAllGather(current_comm(unit, "all_gather"), clock, name))
        unit.set_custom_reduce_scatter(_TimedReduceScatter(current_comm(unit, "reduce_scatter"), clock, name))
        if any(p.device.type == "cuda" for p in unit.parameters()):
            clock.synchronous = False
    return clock
