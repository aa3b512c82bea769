"""The training loop's contract with a synchronization: :class:`TrainingSync`, the eight members the loop uses, and
the records a sync hands it — :class:`SyncRecord`, one a step (what it sent and spent, the rows it found), and
:class:`SyncSummary`, one a run. The loop writes the records out without knowing which sync made them.
:class:`~zen_analysis.sync.grad_sync.GradSync` implements the contract with defaults; a test follows every use of the
sync object through the loop's modules and fails on any member not declared here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import nn


@dataclass
class SyncRecord:
    """What a sync did in one step, as :meth:`~zen_analysis.sync.grad_sync.GradSync.record` returns it: this step's
    share of the running counters a sync keeps (:class:`~zen_analysis.sync.grad_sync.GradSync`'s counter attributes),
    the rows a sync by rows found, and the sync's own fields. :meth:`row` gives the fields of the step's
    ``metrics.jsonl`` row."""

    sparse_bytes_sent: int | None = None
    """Bytes the sparse path sent this step (None: the sync has no sparse path, and the row says nothing of it)."""
    sparse_seconds: float = 0.0
    """Seconds the sparse path spent summing this step."""
    overlap_seconds: float | None = None
    """With ``overlap``: seconds this step's sums started during backward took (None: no overlap)."""
    hidden_seconds: float = 0.0
    """With ``overlap``: of ``overlap_seconds``, those spent before backward ended (hidden behind it)."""
    early_buckets: int = 0
    """With ``overlap``: buckets this step launched before backward ended."""
    union_rows: torch.Tensor | None = None
    """After a sync by rows: the input embedding's rows some rank touched (every other row of its averaged gradient
    is zero), so a lazy row update needs no pass over the table; None: not known (the loop finds them)."""
    fields: dict = field(default_factory=dict)
    """The sync's own fields for the row (:meth:`~zen_analysis.sync.grad_sync.GradSync.step_counters`: FSDP2's
    collectives' seconds and bytes)."""

    def row(self) -> dict:
        """The ``metrics.jsonl`` fields: ``sparse_bytes_sent_rank0`` and ``sparse_s`` where there is a sparse path,
        ``overlap_s``, ``hidden_s`` and ``early_buckets`` with ``overlap``, then the sync's own."""
        row = {}
        if self.sparse_bytes_sent is not None:
            row["sparse_bytes_sent_rank0"], row["sparse_s"] = self.sparse_bytes_sent, self.sparse_seconds
        if self.overlap_seconds is not None:
            row.update(overlap_s=self.overlap_seconds, hidden_s=self.hidden_seconds, early_buckets=self.early_buckets)
        return {**row, **self.fields}


@dataclass
class SyncSummary:
    """What a sync says of the whole run once it is over (:meth:`~zen_analysis.sync.grad_sync.GradSync.end_run`), for
    the run summary."""

    bytes_sent: int | None
    """Bytes this rank sent in all (None where not counted): the summary's ``sync_bytes_rank``."""
    decisions: dict | None
    """Zen's planner: what it chose per tensor, and why (the summary's ``planner``; empty or None: no planner)."""
    described: dict | None
    """The summary's ``sync`` entry (:meth:`~zen_analysis.sync.grad_sync.GradSync.describe`; None: none)."""


class TrainingSync(Protocol):
    """What ``train/loop.py`` and its setup call on their sync, in the order a run calls them."""

    def attach(self, model: nn.Module) -> None:
        """Once, before the first step: take hold of the model (broadcast rank 0's parameters, bucket, shard)."""

    def load_state_dict(self, state: dict) -> None:
        """On a resumed run, after :meth:`attach`: the state :meth:`state_dict` saved."""

    def before_backward(self, *, last: bool, capturing: bool) -> None:
        """Before every micro-batch's backward; ``last``: the step's last one; ``capturing``: a capture step."""

    def synchronize(self, model: nn.Module) -> None:
        """After the step's last backward: every rank then holds the same averaged gradient."""

    def record(self) -> SyncRecord:
        """Right after :meth:`synchronize`: what this step's sync sent and spent, and the rows it found."""

    def clip_grad_norm_(
        self, parameters: Iterable[nn.Parameter], max_norm: float, rows: dict | None = None
    ) -> torch.Tensor:
        """Under ``train.grad_clip``: clip the synchronized gradients by their global norm, wherever they live."""

    def state_dict(self) -> dict:
        """At a checkpoint: this rank's state beyond the model and the optimizers."""

    def end_run(self, model: nn.Module) -> SyncSummary:
        """After the last step: the sync's last work, and what the run summary says of it."""
