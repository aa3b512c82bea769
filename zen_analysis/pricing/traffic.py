"""Traffic models: the bytes a scheme's ``run`` moves, computed from index sets alone (no processes).

:class:`Traffic` mirrors :class:`zen_analysis.wire.exchange.Exchange` rule for rule, for all ranks at once.
It keeps one (W, W) matrix per (phase, kind) of the bytes rank i addresses to rank j, so a 1024-rank model
is a handful of numpy operations rather than W^2 Python calls; per-rank bytes sent and received are its row
and column sums.

Shape suffixes: W ranks (one count of distinct rows each).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from zen_analysis.wire.exchange import COUNT_BYTES, ring_chunk_sizes

COLUMNS = ["rank", "phase", "kind", "bytes_sent", "bytes_received", "calls"]
WORK_FEATURES = ("scanned", "bytes", "written")
"""What a rank's local work is priced by: dense elements scanned, bytes it sends plus receives (packed,
unpacked, hashed, summed), non-zeros written into the result (rows, for a row-granular sum)."""


class Traffic:
    """Accumulates the bytes every rank sends to every other rank, per (phase, kind), for ``world`` ranks."""

    def __init__(self, world: int, *, value_bytes: int = 4, width: int = 0) -> None:
        self.world = world
        self.value_bytes = value_bytes
        """Bytes of one entry's values on the wire: the summed tensor's dtype width (4 for float32, 2 for
        fp16/bf16), times ``width`` by rows."""
        self.width = width
        """Values per entry by rows (:meth:`~zen_analysis.comm.schemes.base.CommScheme.sum_rows`); 0: elements."""
        self._first_counts: str | None = None
        self.matrices: dict[tuple[str, str], np.ndarray] = {}
        """(phase, kind) -> (W, W) int64, bytes rank i sends to rank j (zero diagonal)."""
        self.active: dict[tuple[str, str], np.ndarray] = {}
        """(phase, kind) -> (W,) bool: ranks that take part (a rank outside a p2p stage has no record)."""
        self.ring_phases: dict[str, tuple[int, int]] = {}
        """phase -> (numel, element bytes) of dense ring all-reduces (timed by the ring formula)."""
        self._ring_bytes: dict[str, np.ndarray] = {}
        self.calls: dict[str, int] = defaultdict(int)
        """phase -> collective calls each rank makes (each pays the latency alpha once)."""
        self.primitive: dict[str, str] = {}
        """phase -> "all_to_all" or "p2p": which calibrated link parameters price it."""
        self.rank_calls: dict[tuple[str, str], np.ndarray] = {}
        """(phase, kind) -> (W,) calls each rank makes: what ``Exchange`` counts in ``PhaseRecord.calls``."""
        self.work: dict[str, np.ndarray] = {}
        """Local work per rank, by :data:`WORK_FEATURES` (empty for a scheme that does none of its own)."""
        self.ring_gathers: dict[str, list[tuple[np.ndarray, int, str]]] = {}
        """phase -> one ((W,) block bytes, segments per step, kind) per gloo ring all-gather call
        (:meth:`ring_all_gather`): timed step by step around the ring, not by the all-to-all rule."""

    def local_work(self, numel: int, union: int) -> None:
        """Record each rank's own work: it scans ``numel`` dense elements for its non-zeros, encodes, decodes and
        sums the bytes it sends and receives, and writes the ``union`` non-zeros of the result."""
        moved = (self.sent() + self.received()).astype(np.float64)
        self.work = {
            "scanned": np.full(self.world, float(numel)),
            "bytes": moved,
            "written": np.full(self.world, float(union)),
        }

    def _call(self, phase: str, primitive: str, kind: str, ranks=None) -> None:
        self.calls[phase] += 1
        self.primitive[phase] = primitive
        per_rank = self.rank_calls.setdefault((phase, kind), np.zeros(self.world, dtype=np.int64))
        if ranks is None:
            per_rank += 1
        else:
            per_rank[np.unique(ranks)] += 1

    def _matrix(self, phase: str, kind: str, *, everyone: bool = True) -> np.ndarray:
        key = (phase, kind)
        if key not in self.matrices:
            self.matrices[key] = np.zeros((self.world, self.world), dtype=np.int64)
            self.active[key] = np.zeros(self.world, dtype=bool)
        if everyone:
            self.active[key][:] = True
        return self.matrices[key]

    @property
    def pairs(self) -> dict[str, np.ndarray]:
        """phase -> (W, W) bytes rank i sends to rank j, payload and control together (for the time model)."""
        out: dict[str, np.ndarray] = {}
        for (phase, _), m in self.matrices.items():
            out[phase] = out[phase] + m if phase in out else m.copy()
        return out

    def counts(self, phase: str) -> None:
        """One count exchange: every rank sends and receives a count from every other rank."""
        self._first_counts = self._first_counts or phase
        self._call(phase, "all_to_all", "control")
        _every_pair(self._matrix(phase, "control"), COUNT_BYTES)

    def agreement(self, nbytes: int, *, folded: bool) -> None:
        """The ranks' agreement check (``Exchange.expect_agreement``): ``nbytes`` from every rank to every other,
        riding on the first count exchange (``folded``: no call of its own) or in a phase ``agree`` of one call."""
        if folded:
            if self._first_counts is None:
                raise ValueError("a folded agreement check needs a count exchange to ride on")
            m = self._matrix(self._first_counts, "control")
        else:
            self._call("agree", "all_to_all", "control")
            m = self._matrix("agree", "control")
        _every_pair(m, nbytes)

    def p2p(self, phase: str, src, dst, nbytes, *, kind: str = "payload") -> None:
        """One round of point-to-point messages: ``src[k]`` sends ``nbytes[k]`` to ``dst[k]`` (arrays or
        scalars). Every rank in the round makes one call (a swap is one round with both directions)."""
        src, dst = np.atleast_1d(np.asarray(src, dtype=np.int64)), np.atleast_1d(np.asarray(dst, dtype=np.int64))
        nbytes = np.broadcast_to(np.asarray(nbytes, dtype=np.int64), src.shape)
        self._call(phase, "p2p", kind, np.concatenate([src, dst]))
        m = self._matrix(phase, kind, everyone=False)
        np.add.at(m, (src, dst), nbytes)
        self.active[(phase, kind)][src] = True
        self.active[(phase, kind)][dst] = True

    def all_to_all(self, phase: str, matrix, *, kind: str = "payload") -> None:
        """matrix[i][j] = bytes rank i addresses to rank j (the diagonal stays local)."""
        self._call(phase, "all_to_all", kind)
        add = np.array(matrix, dtype=np.int64, copy=True).reshape(self.world, self.world)
        np.fill_diagonal(add, 0)
        self._matrix(phase, kind)[...] += add

    def all_gather(self, phase: str, sizes, *, kind: str = "payload") -> None:
        """Every rank i delivers ``sizes[i]`` bytes to each other rank (an all_to_all_single underneath)."""
        self._call(phase, "all_to_all", kind)
        sizes = np.asarray(sizes, dtype=np.int64)
        add = np.repeat(sizes[:, None], self.world, axis=1)
        np.fill_diagonal(add, 0)
        self._matrix(phase, kind)[...] += add

    def ring_all_gather(self, phase: str, sizes, *, kind: str = "payload", segments: int = 1) -> None:
        """One gloo all-gather around the ring 0 -> 1 -> ... -> W-1 -> 0 (``gloo::allgather``,
        ``gloo::allgatherv``): rank i's block is ``sizes[i]`` bytes; at step s (W - 1 steps) rank r passes block
        (r - s) mod W on to rank r + 1, so every rank sends every block but its successor's and receives every block
        but its own, all of it to or from one neighbour. ``segments``: messages per step (``gloo::allgather`` sends
        each block in two halves; ``allgatherv`` in one), each paying alpha."""
        self._call(phase, "ring_all_gather", kind)
        sizes = np.asarray(sizes, dtype=np.int64).reshape(self.world)
        m = self._matrix(phase, kind)
        if self.world > 1:
            succ = (np.arange(self.world) + 1) % self.world
            m[np.arange(self.world), succ] += sizes.sum() - sizes[succ]
        self.ring_gathers.setdefault(phase, []).append((sizes.copy(), segments, kind))

    def ring_all_reduce(self, phase: str, numel: int, element_bytes: int) -> None:
        """One dense all-reduce call (timed by the ring formula, not by ``calls``)."""
        self.rank_calls.setdefault((phase, "payload"), np.zeros(self.world, dtype=np.int64))[:] += 1
        self.ring_phases[phase] = (numel, element_bytes)
        own = np.array(ring_chunk_sizes(numel, self.world), dtype=np.int64)
        self._ring_bytes[phase] = self._ring_bytes.get(phase, 0) + 2 * (numel - own) * element_bytes

    def scaled(self, factor: float) -> Traffic:
        """This traffic with every size-proportional quantity times ``factor``: payload bytes, dense all-reduces'
        elements and the local work; control messages (counts, the agreement check) and the calls stay. What a
        model run on a consistent sample of the index space (:mod:`zen_analysis.sparsity.sketch`) stands for."""
        out = Traffic(self.world, value_bytes=self.value_bytes, width=self.width)
        out._first_counts = self._first_counts
        for key, m in self.matrices.items():
            out.matrices[key] = m if key[1] == "control" else np.rint(m * factor).astype(np.int64)
        out.active = {k: v.copy() for k, v in self.active.items()}
        out.ring_phases = {p: (round(numel * factor), eb) for p, (numel, eb) in self.ring_phases.items()}
        out._ring_bytes = {p: np.rint(b * factor).astype(np.int64) for p, b in self._ring_bytes.items()}
        out.calls = defaultdict(int, self.calls)
        out.primitive = dict(self.primitive)
        out.rank_calls = {k: v.copy() for k, v in self.rank_calls.items()}
        out.work = {f: v * factor for f, v in self.work.items()}
        out.ring_gathers = {
            p: [(s if k == "control" else np.rint(s * factor).astype(np.int64), g, k) for s, g, k in calls]
            for p, calls in self.ring_gathers.items()
        }
        return out

    def sent(self) -> np.ndarray:
        """(W,) total bytes each rank sends, all phases and kinds."""
        total = sum((m.sum(1) for m in self.matrices.values()), np.zeros(self.world, dtype=np.int64))
        return total + sum(self._ring_bytes.values(), np.zeros(self.world, dtype=np.int64))

    def received(self) -> np.ndarray:
        total = sum((m.sum(0) for m in self.matrices.values()), np.zeros(self.world, dtype=np.int64))
        return total + sum(self._ring_bytes.values(), np.zeros(self.world, dtype=np.int64))

    def frame(self) -> pd.DataFrame:
        parts = []
        ranks = np.arange(self.world)
        for phase, moved in self._ring_bytes.items():
            parts.append(
                pd.DataFrame(
                    {
                        "rank": ranks,
                        "phase": phase,
                        "kind": "payload",
                        "bytes_sent": moved,
                        "bytes_received": moved,
                        "calls": self.rank_calls[(phase, "payload")],
                    }
                )
            )
        for (phase, kind), m in self.matrices.items():
            act = self.active[(phase, kind)]
            calls = self.rank_calls.get((phase, kind), np.zeros(self.world, dtype=np.int64))
            parts.append(
                pd.DataFrame(
                    {
                        "rank": ranks[act],
                        "phase": phase,
                        "kind": kind,
                        "bytes_sent": m.sum(1)[act],
                        "bytes_received": m.sum(0)[act],
                        "calls": calls[act],
                    }
                )
            )
        if not parts:
            return pd.DataFrame(columns=COLUMNS)
        return pd.concat(parts, ignore_index=True).sort_values(["rank", "phase", "kind"], ignore_index=True)[COLUMNS]


def concurrent(traffics: list[Traffic]) -> Traffic:
    """One traffic for groups that run at the same time over the same ranks (the 8 local-rank groups of a node
    summing their shards across nodes at once, each rank i of a group on node i): per phase and kind the bytes
    summed, so a rank's phase time prices its link carrying every group's bytes (a node's network link shared by
    the groups, work-conserving: a group done early leaves its share to the others); the calls those of the
    group that makes the most (the groups' messages are in flight together, each rank pays a call's latency once);
    dense ring all-reduces' elements summed (concurrent rings over one link). The groups' ring all-gathers are
    refused: they are timed step by step and concurrent ones would need a schedule of their own."""
    if not traffics:
        raise ValueError("no traffic to combine")
    first = traffics[0]
    if any(t.world != first.world for t in traffics):
        raise ValueError(f"concurrent groups must span the same ranks, got worlds {[t.world for t in traffics]}")
    if any(t.ring_gathers for t in traffics):
        raise ValueError("concurrent ring all-gathers are not modelled: price them group by group")
    out = Traffic(first.world, value_bytes=first.value_bytes, width=first.width)
    for t in traffics:
        for key, m in t.matrices.items():
            out._matrix(*key, everyone=False)[...] += m
            out.active[key] |= t.active[key]
        for phase, calls in t.calls.items():
            out.calls[phase] = max(out.calls[phase], calls)
        out.primitive.update(t.primitive)
        for key, per_rank in t.rank_calls.items():
            have = out.rank_calls.setdefault(key, np.zeros(out.world, dtype=np.int64))
            np.maximum(have, per_rank, out=have)
        for phase, (numel, element_bytes) in t.ring_phases.items():
            before = out.ring_phases.get(phase, (0, element_bytes))[0]
            out.ring_phases[phase] = (before + numel, element_bytes)
            out._ring_bytes[phase] = out._ring_bytes.get(phase, 0) + t._ring_bytes[phase]
        for feature, v in t.work.items():
            out.work[feature] = out.work.get(feature, 0) + v
    return out


def _every_pair(m: np.ndarray, nbytes: int) -> None:
    """Add ``nbytes`` from every rank to every other rank (not to itself) to the (W, W) matrix ``m``."""
    m += nbytes
    np.fill_diagonal(m, m.diagonal() - nbytes)


DDP_SPARSE = "ddp_sparse"
"""Stock DDP's sparse all-gather: what ``DistributedDataParallel`` does with an ``nn.Embedding(sparse=True)``'s
gradient on gloo (:func:`ddp_sparse`). A priced baseline, not a scheme of ``comm.schemes``."""
DDP_SPARSE_METADATA_BYTES = 9 * 8
"""Its per-rank metadata record: 9 int64 (4 sparse sizes, 4 dense sizes, nnz)."""
DDP_SPARSE_INDEX_BYTES = 8
"""Its index width: a sparse COO tensor's indices are int64, one per row of an embedding (sparse_dim 1)."""


def ddp_sparse(rows_W, width: int, *, value_bytes: int = 4, union: int | None = None) -> Traffic:
    """Stock DDP's sum of a sparse embedding gradient on gloo, for ranks holding ``rows_W[i]`` distinct rows of
    ``width`` values of ``value_bytes`` each (4: float32; 2: fp16/bf16): its three calls and their exact bytes.

    What torch 2.13 runs (``ProcessGroupGloo`` -> ``AsyncSparseAllreduceWork``, ProcessGroupGlooDetail.hpp; DDP's
    reducer gives each sparse gradient a bucket of its own and calls ``allreduce`` on it after dividing it by the
    world size): the rank's gradient is coalesced (so nnz is its distinct rows), then

    * ``metadata``: ``gloo::allgather`` of a 9-int64 record per rank (:data:`DDP_SPARSE_METADATA_BYTES`);
    * ``indices``: ``gloo::allgatherv`` of each rank's nnz int64 row indices (:data:`DDP_SPARSE_INDEX_BYTES`);
    * ``values``: ``gloo::allgatherv`` of each rank's nnz x ``width`` values at the gradient's dtype;

    then every rank adds the W sparse tensors and coalesces the result (the local work: the W blocks received and
    sorted by row, ``union`` rows written; without ``union``, none recorded). Both gloo all-gathers are rings
    (:meth:`Traffic.ring_all_gather`), so a rank sends every block but its successor's and receives every block but
    its own: its received bytes grow with W while Zen's do not. There is no count exchange and no agreement check
    of the toolkit's kind; the metadata carries the sizes (and a check that the ranks' shapes agree).

    On NCCL stock DDP cannot sum a sparse gradient at all: ``ProcessGroupNCCL::allreduce_sparse`` raises "NCCL does
    not support all_reduce with sparse tensors. Please use dense tensors instead." (outside Meta's NCCLX builds).
    A CUDA sparse gradient on gloo is copied to the host and back around this same path
    (``AsyncSparseAllreduceCUDAWork``)."""
    rows = np.asarray(rows_W, dtype=np.int64).reshape(-1)
    if width < 1:
        raise ValueError(f"ddp_sparse sums an embedding's rows: width must be >= 1 values per row, got {width}")
    if (rows < 0).any():
        raise ValueError(f"row counts must be non-negative, got {rows.tolist()}")
    W = rows.size
    t = Traffic(W, value_bytes=value_bytes * width, width=width)
    t.ring_all_gather("metadata", np.full(W, DDP_SPARSE_METADATA_BYTES), kind="control", segments=2)
    t.ring_all_gather("indices", rows * DDP_SPARSE_INDEX_BYTES)
    t.ring_all_gather("values", rows * value_bytes * width)
    if union is not None:
        t.local_work(0, union)  # the rows are given (a sparse gradient): nothing dense is scanned
    return t


__all__ = ["COLUMNS", "Traffic", "concurrent", "ddp_sparse"]
