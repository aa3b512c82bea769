"""When local SGD syncs (:class:`zen_analysis.local_sgd.engine.LocalSGD`'s cadence): the step rule (after
``warmup_steps``, every ``interval`` steps) or A-EDiT's wall clock (every ``sync_time_s``, at a rendezvous of the
workers' step counts, skipped under ``min_total_steps``, and the run stopped at a sync once the workers' steps
reach the budget). A mixin: the engine holds the state it reads (``config``, ``step``, ``collective``, the clock's
fields) and its ``_timed``."""

from __future__ import annotations

import time

import torch


class Cadence:
    """The cadence methods of :class:`~zen_analysis.local_sgd.engine.LocalSGD` (see the module docstring)."""

    def due(self, step: int) -> bool:
        """Step-based rule: t >= warm-up and (t - warm-up) mod interval == 0."""
        c = self.config
        return step >= c.warmup_steps and (step - c.warmup_steps) % c.interval == 0

    def _decide(self, now: float | None = None) -> bool:
        """Whether this step syncs (called once per step, at its first training forward)."""
        c = self.config
        if c.sync_time_s <= 0:
            return self.due(self.step)
        if self.step < c.warmup_steps:
            return False
        now_given = now
        now = time.time() if now is None else now
        if self._last_sync_time is None:  # first local step: the anchor, with everyone
            self._last_sync_time = now
            self._total_at_sync = self._total_steps()
            return True
        if now - self._last_sync_time < c.sync_time_s:
            return False
        total = self._total_steps()  # the rendezvous: a fast worker waits here for the others' clocks
        self._last_sync_time = time.time() if now_given is None else now  # after the wait, or it fires early
        if total - self._total_at_sync < c.min_total_steps:
            return False
        self._total_at_sync = total
        if self.step_budget and total >= self.step_budget:
            self._stop = True
        return True

    def _total_steps(self) -> int:
        t = torch.tensor([float(self.step)], dtype=torch.float64, device=getattr(self.collective, "device", "cpu"))
        self._timed(self.collective.all_reduce_sum, t)
        return int(t.item())

    def should_stop(self) -> bool:
        """A-EDiT: the last sync saw the step budget reached (every worker stops after this step)."""
        return self._stop

    def max_local_steps(self, num_steps: int) -> int:
        """How many steps a worker may run: ``num_steps``, or for A-EDiT no local limit — the budget is
        ``num_steps`` x workers in total, and only a sync (where every worker is) may stop the run: a worker
        leaving on a count of its own would leave the others waiting in a collective."""
        if self.config.sync_time_s <= 0:
            return num_steps
        self.step_budget = num_steps * self.collective.world
        return 2**62
