"""EDiT's pseudo-gradient penalty (Cheng et al., ICLR'25, section 2.5 of the digest), as pure functions.

Per module (or tensor, or the whole model) and per worker m, with pseudo-gradient Delta_m = anchor - local:

1. **anomaly elimination** — :class:`EWMADetector`, an exponentially weighted z-test on the worker's own
   pseudo-gradient norm g_m (one detector per module per worker; it counts syncs, not steps). After ``warmup``
   syncs, g_m is anomalous when its z-score exceeds ``threshold`` x max(1, std of recent z-scores); an anomalous
   worker's Delta_m is zeroed and its norm pushed up by 1e6 (so its softmax weight vanishes), and — unlike the
   FSDP code path, which aliases the penalised value into the EMA — the EMA is updated with normal norms only;
2. **weighted averaging** — :func:`softmax_weights`: w_m = softmax(-g_m / T) over workers;
3. **clipping** — :func:`clip_coefficient`: the averaged Delta is scaled by min(1, phi / (||Delta|| + 1e-6));
4. the outer step is skipped when every worker was anomalous (the average is zero).
"""

from __future__ import annotations

import math
from collections import deque

import torch

ANOMALY_PENALTY = 1e6


class EWMADetector:
    """One-sided EMA z-test on a stream of norms (``OnlineDynamicEWMA`` of the reference code)."""

    def __init__(
        self, *, alpha: float = 0.02, warmup: int = 10, threshold: float = 3.0, window: int | None = None
    ) -> None:
        self.alpha, self.warmup, self.threshold = alpha, warmup, threshold
        self.mean = 0.0
        self.var = 0.0
        self.count = 0
        self.z_history: deque[float] = deque(maxlen=window or max(warmup, 1))

    def z_score(self, g: float) -> float:
        if self.count < self.warmup or self.var <= 0:
            return 0.0
        return (g - self.mean) / math.sqrt(self.var)

    def dynamic_threshold(self) -> float:
        if self.count < self.warmup or len(self.z_history) < 2:
            return self.threshold
        z = torch.tensor(list(self.z_history), dtype=torch.float64)
        return self.threshold * max(1.0, float(z.std()))

    def is_outlier(self, g: float) -> bool:
        return self.count >= self.warmup and self.z_score(g) > self.dynamic_threshold()

    def update(self, g: float) -> None:
        d = g - self.mean
        self.mean += self.alpha * d
        self.var = (1 - self.alpha) * (self.var + self.alpha * d * (g - self.mean))
        self.count += 1
        self.z_history.append((g - self.mean) / math.sqrt(self.var) if self.var > 0 else 0.0)

    def state(self) -> dict:
        return {"mean": self.mean, "var": self.var, "count": self.count}


def softmax_weights(norms: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """w_m = softmax(-g_m / T), numerically stable."""
    return torch.softmax(-norms.double() / temperature, dim=0)


def clip_coefficient(norm: float, max_norm: float) -> float:
    """min(1, phi / (norm + 1e-6)); 1 when clipping is off (``max_norm <= 0``)."""
    if max_norm <= 0:
        return 1.0
    return min(1.0, max_norm / (norm + 1e-6))
