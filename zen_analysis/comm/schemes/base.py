"""The interface every synchronization scheme implements.

``run(tensor, *, group)`` sums the ranks' dense tensors with real collectives and logs the bytes it passed to
them and the calls it made per (phase, kind) in ``last_measured()``; ``traffic(index_sets, numel)`` predicts
those bytes and calls for every rank from the ranks' non-zero index sets. Values travel at their dtype's width
(:mod:`zen_analysis.wire.dtypes`: the dtype contract, what is summed in what precision), indices as int32 below
2**31 elements. Before summing, the ranks check that they agree on numel, dtype, scheme and hash seed
(``check_ranks``); a disagreement raises :class:`~zen_analysis.wire.exchange.RanksDisagreeError` on every rank.

Autograd: ``run`` bumps the tensor's version counter, as every in-place torch operation does, so autograd refuses
a backward that would read a tensor saved for it and then summed in place (``dist.all_reduce`` does not bump it,
and such a backward then silently uses the summed values).

Shape suffixes: N elements of the flat tensor, K non-zeros on this rank (rows, or flat elements), R rows of the whole
table, D values per row (the table's width).
"""

from __future__ import annotations

import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import ClassVar

import pandas as pd
import torch
import torch.distributed as dist

from zen_analysis.indices import as_index_tensor
from zen_analysis.pricing.cost import local_time, phase_times
from zen_analysis.pricing.topology import Topology
from zen_analysis.pricing.traffic import COLUMNS, Traffic
from zen_analysis.sparsity.metrics import index_set
from zen_analysis.wire.dtypes import (
    SUPPORTED,
    check_dtype,
    dtype_code,
    dtype_of_code,
    positive_zeros,
    value_bytes,
)
from zen_analysis.wire.exchange import Exchange, RanksDisagreeError
from zen_analysis.wire.rows import canonical_rows, nonzero_rows


class CommScheme(ABC):
    """A synchronization scheme: the sum over ranks of one tensor, with real collectives (:meth:`run`, by rows
    :meth:`sum_rows` and :meth:`run_rows`) and, from the ranks' index sets alone, the bytes and calls it makes
    (:meth:`traffic`). A subclass sets ``name`` and implements ``_run`` and ``_traffic`` (and ``_sum_rows`` to sum
    by rows), every collective through the :class:`~zen_analysis.wire.exchange.Exchange` it is given, which counts
    them; ``tests/multirank`` then checks that it equals ``dist.all_reduce`` and its model is exact."""

    name: ClassVar[str]
    scans_dense: ClassVar[bool] = True
    """Whether ``run`` does local work per element (finds the non-zeros, writes the sum); the dense all-reduce
    leaves everything to the collective."""
    hashed: ClassVar[bool] = False
    """Whether the scheme places indices by Zen's hash h0 (takes a ``seed``; :func:`build_scheme` passes it)."""
    sync_collectives: bool = False
    """Benchmarks set this: a barrier before each collective, so measured wire time excludes peer skew."""
    folds_agreement: ClassVar[bool] = False
    """Whether the scheme's first collective is a count exchange, which then carries the ranks' agreement check
    (no call of its own); else the check is one call of its own (phase ``agree``) before the sum."""
    check_ranks: bool = True
    """Check that every rank passed the same numel, dtype, scheme and seed (``bench zen`` measures its cost); set
    False on an instance to skip it."""
    AGREEMENT = ("numel", "dtype", "scheme", "seed", "width")

    def __init__(self) -> None:
        self._records: list = []
        self._rank = 0

    def check(self, world: int, numel: int) -> None:  # noqa: B027
        """Raise ``ValueError`` if this scheme cannot run on ``world`` ranks (default: any)."""

    def run(self, tensor: torch.Tensor, *, group: dist.ProcessGroup | None = None) -> torch.Tensor:
        """The sum over ranks of ``tensor`` (any shape, a dtype of :data:`~zen_analysis.wire.dtypes.SUPPORTED`),
        **in place** like ``dist.all_reduce``, in the tensor's own dtype: afterwards ``tensor`` holds the sum,
        identical on every rank, and is returned. Pass a copy to keep the input.

        A contiguous tensor is worked on directly (no dense copy, no fresh dense allocation); a strided one goes
        through a contiguous copy of its dtype that is written back. Another dtype raises ``TypeError``; ranks that
        passed different numels, dtypes, schemes or seeds raise ``RanksDisagreeError``, all of them."""
        ex, t0 = self._begin(group, tensor.numel(), tensor.dtype)
        # a strided view must not be summed through (a collective reads numel contiguous values), nor an inference
        # tensor outside inference mode (torch refuses the write, after the collectives): both through a copy
        direct = tensor.is_contiguous() and not _inference_outside(tensor)
        if direct:
            work_N = tensor.detach().view(-1)
        else:
            work_N = tensor.detach().reshape(-1).clone(memory_format=torch.contiguous_format)
        self._run(work_N, ex)
        if self.scans_dense:
            positive_zeros(work_N)
        self._end(ex, t0)
        if not direct:  # written back only once the sum is whole: a failure above leaves the input as it was
            with writable(tensor):
                tensor.detach().copy_(work_N.view(tensor.shape))
        bump_version(tensor)
        return tensor

    def sum_rows(
        self, rows_K: torch.Tensor, values_KD: torch.Tensor, num_rows: int, *, group: dist.ProcessGroup | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The row-granular sum over ranks (:mod:`zen_analysis.wire.rows`): this rank passes the rows of a
        ``num_rows`` x D table it holds (1-D integer rows; duplicates are summed) and their (K, D) values; returns
        (rows, values) of the sum, identical on every rank: every row some rank passed, each once, with its sum
        over ranks in the values' dtype (the union, in the scheme's order). Invalid rows raise ``ValueError`` on
        the rank that passed them and ``RanksDisagreeError`` on the others (none waits). The index space is the
        rows: one index and D values travel per entry, and the byte model is :meth:`model` with ``width=D``.
        ``allreduce`` sums the dense table and returns its non-zero rows. Equal to ``all_reduce`` of the dense
        tables, bit for bit on integer-valued inputs."""
        try:
            rows_K, values_KD = canonical_rows(rows_K, values_KD.detach(), num_rows)
            bad, width = None, values_KD.shape[1]
        except ValueError as exc:  # still joins the agreement check, as an invalid width: no rank waits for it
            bad, width = exc, INVALID_ROWS
        try:
            ex, t0 = self._begin(group, num_rows, values_KD.dtype, width=width)
            if bad is not None:
                ex.agree()  # the call a folded check rides on (a no-op once checked): the others raise
        except RanksDisagreeError:
            if bad is None:
                raise
        if bad is not None:  # every rank raises: this one its own error, the others RanksDisagreeError
            raise bad
        out = self._sum_rows(rows_K, values_KD, num_rows, ex)
        self._end(ex, t0)
        return out

    def run_rows(
        self, tensor_RD: torch.Tensor, *, rows: torch.Tensor | None = None, group: dist.ProcessGroup | None = None
    ) -> torch.Tensor:
        """:meth:`run` by rows for a 2-D table (an embedding's dense ``.grad``), in place: the rows that may be
        non-zero on this rank (``rows``, e.g. the batch's token ids; a superset is fine, a row outside it must be
        zero: it is not read) or, without ``rows``, those a row-wise pass finds, summed by :meth:`sum_rows` and
        written back; every other row is zero on every rank already and stays untouched. ``allreduce`` takes
        :meth:`run` (nothing to gain by rows)."""
        if tensor_RD.dim() != 2:
            raise ValueError(f"run_rows sums a 2-D table (rows, dim), got shape {tuple(tensor_RD.shape)}")
        if not self.scans_dense:
            return self.run(tensor_RD, group=group)
        t = tensor_RD.detach()
        rows_K = nonzero_rows(t) if rows is None else torch.unique(as_index_tensor(rows, name="rows").to(t.device))
        u_rows, u_values = self.sum_rows(rows_K, t[rows_K], t.shape[0], group=group)
        with writable(tensor_RD):  # every write after the last collective: a failed sum leaves the table as it was
            t.index_fill_(0, rows_K, 0)  # a row this rank held that the union does not carry (allreduce) is zero
            t[u_rows.to(t.device)] = u_values.to(t.device)
            if rows is None:  # a row of zeros of either sign was not found: +0.0 on every rank, as in run
                positive_zeros(t)
        bump_version(tensor_RD)
        return tensor_RD

    def _begin(
        self, group: dist.ProcessGroup | None, numel: int, dtype: torch.dtype, *, width: int = 0
    ) -> tuple[Exchange, float]:
        """The run's exchange and start time, after the ranks' agreement check (which is part of the run's time)."""
        if not self.check_ranks:
            check_dtype(dtype)
        ex = Exchange(group, sync=self.sync_collectives)
        t0 = time.perf_counter()
        if self.check_ranks:
            ex.expect_agreement(
                self.agreement_fields(numel, dtype, width),
                {"dtype": dtype_of_code, "scheme": _scheme_of_code, "width": _width},
            )
            if not (self.folds_agreement and dtype in SUPPORTED):
                ex.agree()  # an unsupported dtype still takes part: the other ranks must not wait for it
            check_dtype(dtype)  # every rank passed it (else the check raised): all refuse alike
        self.check(ex.world, numel)
        return ex, t0

    def _end(self, ex: Exchange, t0: float) -> None:
        """Record the run's calls, bytes and seconds (``last_measured``, ``last_times``, ``last_local``)."""
        total = time.perf_counter() - t0
        if ex.agreement_pending:
            raise AssertionError(f"{self.name} declares folds_agreement but made no count exchange")
        self._records = list(ex.records.values())
        self._local = dict(ex.local_seconds)
        wire = sum(r.wire_seconds for r in self._records)
        self._times = {
            "total": total,
            "wire": wire,
            "wait": ex.wait_seconds,
            "local": max(0.0, total - wire - ex.wait_seconds),
        }
        self._rank = ex.rank

    def agreement_fields(self, numel: int, dtype: torch.dtype, width: int = 0) -> dict[str, int]:
        """What every rank must agree on before this scheme sums: numel (rows, by rows), dtype, scheme, (for a
        ``hashed`` scheme) the hash seed, and the row width (0: elements)."""
        seed = int(getattr(self, "seed", 0)) & 0xFFFFFFFF if self.hashed else -1
        return {"numel": numel, "dtype": dtype_code(dtype), "scheme": _code(self.name), "seed": seed, "width": width}

    def last_times(self) -> dict[str, float]:
        """Seconds of this rank's last ``run``: ``total`` (the agreement check and ``_run``), ``wire`` (inside
        collective calls), ``wait`` (barriers of ``sync_collectives``) and ``local`` (the rest: this rank's own work,
        what the time model's local term prices)."""
        return dict(getattr(self, "_times", {}))

    def last_local(self) -> dict[str, float]:
        """Seconds of the named local steps of this rank's last ``run`` (those the scheme times; may be empty)."""
        return dict(getattr(self, "_local", {}))

    def last_measured(self) -> pd.DataFrame:
        """Bytes (and phase seconds) this rank's last ``run`` passed to collectives."""
        rows = [
            (self._rank, r.phase, r.kind, r.bytes_sent, r.bytes_received, r.calls, r.seconds, r.wire_seconds)
            for r in self._records
        ]
        return pd.DataFrame(rows, columns=COLUMNS + ["seconds", "wire_seconds"])

    def traffic(
        self, index_sets: Sequence[torch.Tensor], numel: int, *, dtype: torch.dtype = torch.float32, width: int = 0
    ) -> pd.DataFrame:
        """Bytes sent and received per (rank, phase, kind), from each rank's non-zero index set alone, for values
        of ``dtype`` (``width`` > 0: by rows, as :meth:`sum_rows` sums them; the sets hold rows, ``numel`` counts
        rows)."""
        return self.model(index_sets, numel, dtype=dtype, width=width).frame()

    def time(
        self,
        index_sets: Sequence[torch.Tensor],
        numel: int,
        topology: Topology,
        *,
        dtype: torch.dtype = torch.float32,
        width: int = 0,
    ) -> pd.DataFrame:
        """Modelled seconds per phase (alpha-beta on ``topology``) with the bottleneck rank of each phase, and a
        ``local`` row for the ranks' own work when ``topology`` is calibrated for this scheme's
        (:func:`~zen_analysis.pricing.cost.local_time`)."""
        traffic = self.model(index_sets, numel, dtype=dtype, width=width)
        out = phase_times(traffic, topology)
        local = local_time(traffic, topology, self.name)
        if local is not None:
            out = pd.concat(
                [out, pd.DataFrame([{"phase": "local", "seconds": local[0], "bottleneck_rank": local[1]}])],
                ignore_index=True,
            )
        return out

    def model(
        self, index_sets: Sequence[torch.Tensor], numel: int, *, dtype: torch.dtype = torch.float32, width: int = 0
    ) -> Traffic:
        """The full traffic model (per-rank bytes, per-pair bytes, calls) that ``traffic`` and ``time`` read: the
        scheme's messages for values of ``dtype``, and the ranks' agreement check when ``check_ranks``. ``width``
        > 0 models :meth:`sum_rows`: ``index_sets`` are row sets of a ``numel``-row table, each entry an index and
        ``width`` values (``allreduce`` all-reduces the dense table)."""
        if numel < 0:
            raise ValueError(f"numel must be non-negative, got {numel}")
        sets = [index_set(s, numel) for s in index_sets]
        self.check(len(sets), numel)
        t = Traffic(len(sets), value_bytes=value_bytes(dtype) * max(width, 1), width=width)
        self._traffic(sets, numel, t)
        if self.check_ranks:  # riding on a count: the values; a call of its own: a zero count and the values
            t.agreement(8 * (len(self.AGREEMENT) + (not self.folds_agreement)), folded=self.folds_agreement)
        if self.scans_dense:  # by rows: nothing scanned (the rows are given), a written row counts once
            t.local_work(0 if width else numel, union_size(sets))
        return t

    @abstractmethod
    def _run(self, x_N: torch.Tensor, ex: Exchange) -> None:
        """Overwrite the flat contiguous ``x_N`` (any supported dtype) with the sum over ranks, in that dtype."""

    @abstractmethod
    def _traffic(self, sets: list[torch.Tensor], numel: int, t: Traffic) -> None:
        """Model the scheme's messages into ``t`` (``t.width`` > 0: by rows, ``t.value_bytes`` per row)."""

    def _sum_rows(
        self, rows_K: torch.Tensor, values_KD: torch.Tensor, num_rows: int, ex: Exchange
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows, values) of the sum over ranks of this rank's row set (sorted, distinct) and (K, D) values."""
        raise NotImplementedError(f"{self.name} has no row-granular sum")


def _inference_outside(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` was made under ``torch.inference_mode()`` and we are outside it now: torch then refuses
    every in-place write to it ("Inplace update to inference tensor outside InferenceMode"), which ``dist.all_reduce``
    makes from C++ all the same."""
    return tensor.is_inference() and not torch.is_inference_mode_enabled()


def writable(tensor: torch.Tensor) -> AbstractContextManager:
    """Where ``tensor`` may be written in place: an inference tensor inside inference mode, as ``dist.all_reduce``
    writes it; any other tensor anywhere. Only the final write-back runs there: a scheme's own work inside inference
    mode would make its cached buffers (the workspace, Zen's hash sets) inference tensors, which later runs outside
    it could not write."""
    return torch.inference_mode() if _inference_outside(tensor) else nullcontext()


def bump_version(tensor: torch.Tensor) -> None:
    """Bump ``tensor``'s autograd version counter, as any in-place op does (an inference tensor has none)."""
    if not tensor.is_inference():
        torch.autograd.graph.increment_version(tensor)


INVALID_ROWS = -1
"""The row width a rank sends in the agreement check when its rows are invalid (it raises their ``ValueError``)."""


def _width(width: int) -> str:
    return "(invalid rows)" if width == INVALID_ROWS else str(width)


def _code(name: str) -> int:
    return zlib.crc32(name.encode())


def _scheme_of_code(code: int) -> str:
    """The scheme name behind an agreement code (for the disagreement message)."""
    stack = list(CommScheme.__subclasses__())
    while stack:
        cls = stack.pop()
        stack += cls.__subclasses__()
        if getattr(cls, "name", None) and _code(cls.name) == code:
            return cls.name
    return f"<scheme code {code}>"


def union_size(sets: Sequence[torch.Tensor]) -> int:
    """Elements non-zero on at least one rank: what every scheme writes into the output."""
    nonempty = [s for s in sets if s.numel()]
    return int(torch.unique(torch.cat(nonempty)).numel()) if nonempty else 0


def coo_of(x_N: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices int64 sorted, values) of the non-zeros of ``x_N``."""
    idx_K = torch.nonzero(x_N, as_tuple=True)[0]
    return idx_K, x_N[idx_K]
