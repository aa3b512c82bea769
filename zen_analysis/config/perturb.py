"""``perturb``: stragglers, a slow network and loss spikes for the local SGD experiments."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)
class PerturbConfig:
    """Real perturbations for the local SGD experiments (EDiT issue): stragglers sleep inside the step."""

    straggler: str = "none"
    """none | consistent (rank ``straggler_rank`` always ``straggler_factor`` x slower) | random (each step, with
    probability ``straggler_prob``, one random rank sleeps ``straggler_kappa`` x its step time)."""
    straggler_rank: int = 0
    straggler_factor: float = 2.0
    straggler_prob: float = 0.1
    straggler_kappa: float = 1.0
    bandwidth_gbps: float = 0.0
    """> 0: every cross-worker all-reduce also sleeps latency_s + ring bytes / bandwidth (a slow network)."""
    latency_s: float = 0.0
    spikes: str = "none"
    """none | shuffle (tokens of each sequence permuted) | random (uniform random tokens) | repeat (each sequence
    one random token repeated, a degenerate off-domain batch): the batches rank ``spike_rank`` trains on every
    ``spike_every`` steps, to provoke loss spikes."""
    spike_rank: int = 0
    spike_every: int = 10
    spike_len: int = 1
    """Consecutive corrupted steps per period (a burst; e.g. one whole sync interval)."""
    spike_start: int = 0
    """First corrupted step (0: ``spike_every``); then every ``spike_every`` steps."""

    def __post_init__(self) -> None:
        if self.spikes not in ("none", "shuffle", "random", "repeat") or self.spike_every < 1:
            raise ValueError("perturb.spikes must be none, shuffle, random or repeat, and perturb.spike_every >= 1")
        if not 1 <= self.spike_len <= self.spike_every or self.spike_start < 0:
            raise ValueError("need 1 <= perturb.spike_len <= perturb.spike_every and perturb.spike_start >= 0")
        if self.bandwidth_gbps < 0 or self.latency_s < 0:
            raise ValueError("perturb.bandwidth_gbps and perturb.latency_s must be >= 0")
        if self.straggler not in ("none", "consistent", "random"):
            raise ValueError(f"perturb.straggler must be none, consistent or random, got {self.straggler!r}")
        if self.straggler_factor < 1 or not 0 <= self.straggler_prob <= 1 or self.straggler_kappa < 0:
            raise ValueError("need perturb.straggler_factor >= 1, 0 <= straggler_prob <= 1, straggler_kappa >= 0")
