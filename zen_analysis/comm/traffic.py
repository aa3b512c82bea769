"""Traffic models: the bytes a scheme's ``run`` moves, computed from index sets alone (no processes).

:class:`Traffic` mirrors :class:`zen_analysis.comm.exchange.Exchange` rule for rule, for all ranks at once.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from zen_analysis.comm.exchange import COUNT_BYTES, ring_chunk_sizes

COLUMNS = ["rank", "phase", "kind", "bytes_sent", "bytes_received"]


class Traffic:
    """Accumulates (rank, phase, kind) -> [sent, received] for a world of ``world`` ranks."""

    def __init__(self, world: int) -> None:
        self.world = world
        self._bytes: dict[tuple[int, str, str], list[int]] = defaultdict(lambda: [0, 0])
        self.pairs: dict[str, np.ndarray] = {}
        """phase -> (W, W) bytes rank i sends to rank j (payload and control), for the time model."""
        self.ring_phases: dict[str, tuple[int, int]] = {}
        """phase -> (numel, element bytes) of dense ring all-reduces (timed by the ring formula)."""
        self.calls: dict[str, int] = defaultdict(int)
        """phase -> collective calls each rank makes (each pays the latency alpha once)."""
        self.primitive: dict[str, str] = {}
        """phase -> "all_to_all" or "p2p": which calibrated link parameters price it."""

    def _call(self, phase: str, primitive: str) -> None:
        self.calls[phase] += 1
        self.primitive[phase] = primitive

    def _pair(self, phase: str, i: int, j: int, nbytes: int) -> None:
        if phase not in self.pairs:
            self.pairs[phase] = np.zeros((self.world, self.world), dtype=np.int64)
        self.pairs[phase][i, j] += nbytes

    def add(self, rank: int, phase: str, kind: str, sent: int, received: int) -> None:
        cell = self._bytes[(rank, phase, kind)]
        cell[0] += int(sent)
        cell[1] += int(received)

    def counts(self, phase: str) -> None:
        """One count exchange: every rank sends and receives a count from every other rank."""
        self._call(phase, "all_to_all")
        for r in range(self.world):
            self.add(r, phase, "control", COUNT_BYTES * (self.world - 1), COUNT_BYTES * (self.world - 1))
            for j in range(self.world):
                if j != r:
                    self._pair(phase, r, j, COUNT_BYTES)

    def p2p(self, phase: str, i: int, j: int, nbytes: int, *, kind: str = "payload") -> None:
        """Rank i sends ``nbytes`` to rank j (and j's side is recorded as received); pairs swap at once, so a
        swap counts as one call per rank (call it for both directions)."""
        if i == 0:  # every rank makes the same calls; count rank 0's
            self._call(phase, "p2p")
        self.add(i, phase, kind, nbytes, 0)
        self.add(j, phase, kind, 0, nbytes)
        self._pair(phase, i, j, nbytes)

    def all_to_all(self, phase: str, matrix: list[list[int]], *, kind: str = "payload") -> None:
        """matrix[i][j] = bytes rank i addresses to rank j (the diagonal stays local)."""
        W = self.world
        self._call(phase, "all_to_all")
        for i in range(W):
            sent = sum(matrix[i][j] for j in range(W) if j != i)
            received = sum(matrix[j][i] for j in range(W) if j != i)
            self.add(i, phase, kind, sent, received)
            for j in range(W):
                if j != i and matrix[i][j]:
                    self._pair(phase, i, j, matrix[i][j])

    def all_gather(self, phase: str, sizes: list[int], *, kind: str = "payload") -> None:
        """Every rank i delivers ``sizes[i]`` bytes to each other rank (an all_to_all_single underneath)."""
        self._call(phase, "all_to_all")
        total = sum(sizes)
        for i in range(self.world):
            self.add(i, phase, kind, sizes[i] * (self.world - 1), total - sizes[i])
            for j in range(self.world):
                if j != i and sizes[i]:
                    self._pair(phase, i, j, sizes[i])

    def ring_all_reduce(self, phase: str, numel: int, element_bytes: int) -> None:
        self.ring_phases[phase] = (numel, element_bytes)
        for r, own in enumerate(ring_chunk_sizes(numel, self.world)):
            moved = 2 * (numel - own) * element_bytes
            self.add(r, phase, "payload", moved, moved)

    def frame(self) -> pd.DataFrame:
        rows = [(r, p, k, s, rv) for (r, p, k), (s, rv) in sorted(self._bytes.items())]
        return pd.DataFrame(rows, columns=COLUMNS)
