"""The training loop's contract with a gradient synchronization, and the dense baseline.

The loop calls ``sync.attach(model)`` once and ``sync.synchronize(model)`` after the last micro-batch's backward
of every step; after it every rank holds the same averaged gradient. :class:`GradSync` declares every hook and
counter the loop reads; the default, :class:`DenseAllReduce`, is what DDP does: broadcast rank 0's parameters
once, then all-reduce flattened gradient buckets. The sparse syncs (:mod:`zen_analysis.sync.sparse`,
:mod:`zen_analysis.sync.compressed`) and local SGD (:mod:`zen_analysis.local_sgd`) derive from it;
:func:`zen_analysis.sync.registry.build_sync` is the one place a configured name becomes a sync.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from zen_analysis.comm.exchange import ring_volume
from zen_analysis.comm.rows import sparse_rows



class GradSync:
    """The loop's contract with a synchronization: every hook and counter the training loop reads, declared here
    with its default, so the loop calls methods and reads attributes instead of probing for them.

    A subclass implements :meth:`attach` and :meth:`synchronize`; the rest is optional."""

    name: str = "sync"
    local: bool = False
    """True: the loop logs rank-local losses (a per-step loss all-reduce would make every step a rendezvous)."""
    union_rows: "torch.Tensor | None" = None
    """After a sync by rows: the input embedding's rows some rank touched (every other row of its averaged gradient
    is zero), so a lazy row update needs no pass over the table; None: not known (the loop finds them)."""
    sparse_bytes_sent: int | None = None
    """Bytes the sparse path has sent so far (None: there is no sparse path, and the metrics say nothing of it)."""
    sparse_seconds: float = 0.0
    """Seconds the sparse path has spent summing so far (its scheme's runs)."""
    bytes_sent: int | None = None
    """Bytes this rank has sent in all (None where not counted)."""
    sync_seconds: float = 0.0
    """Seconds spent in syncs and rendezvous (the loop's stragglers scale compute time only)."""
    decisions: dict | None = None
    """Zen's planner: what it chose per tensor, and why (the run summary's ``planner``)."""
    log: list | tuple = ()
    """Per-sync rows the loop writes to ``local_sgd/rank<r>.jsonl`` (local SGD)."""
    delay: Callable[[int], None] | None = None
    """Under ``perturb.bandwidth_gbps``: sleeps as long as an all-reduce of n bytes takes on the slow link."""
    link_seconds: Callable[[int], float] | None = None
    """Under ``perturb.bandwidth_gbps``: seconds an all-reduce of n bytes takes on the slow link (asynchronous
    syncs keep their own link clock)."""

    def attach(self, model: nn.Module) -> None:
        raise NotImplementedError

    def synchronize(self, model: nn.Module) -> None:
        raise NotImplementedError

    def set_link(self, delay: Callable[[int], None], link_seconds: Callable[[int], float]) -> None:
        """The emulated slow link of ``perturb.bandwidth_gbps`` (before :meth:`attach`)."""
        self.delay, self.link_seconds = delay, link_seconds

    def max_local_steps(self, num_steps: int) -> int:
        """How many loop iterations this rank runs for ``num_steps`` configured steps (A-EDiT: more or fewer)."""
        return num_steps

    def should_stop(self) -> bool:
        """Whether the loop ends after the current step (A-EDiT's time budget)."""
        return False

    def finalize(self, model: nn.Module) -> None:
        """After the last step (local SGD: one last sync, so the final model is the global one)."""

    def describe(self) -> dict | None:
        """The run summary's ``sync`` entry (None: none)."""
        return None


class DenseAllReduce(GradSync):
    """Bucketed dense all-reduce of every gradient, averaged over ranks (the baseline)."""

    name = "allreduce"

    def __init__(self, *, bucket_mb: float = 25.0, group: dist.ProcessGroup | None = None) -> None:
        self.bucket_bytes = int(bucket_mb * 2**20)
        self.group = group
        self.delay = None
        """Set by the loop under ``perturb.bandwidth_gbps``: sleeps as long as an all-reduce of n bytes would take."""
        self.bytes_sent = 0
        """Bytes this rank sent in all-reduces so far (ring volume, 2 (W - 1) / W x buffer)."""
        self._buckets: list[list[nn.Parameter]] = []

    def _world(self) -> int:
        return dist.get_world_size(self.group) if dist.is_initialized() else 1

    def attach(self, model: nn.Module, params: list[nn.Parameter] | None = None) -> None:
        """Broadcast rank 0's parameters and bucket ``params`` (default: every trainable parameter)."""
        if params is None:
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
            flat_N = flatten_grads(bucket)
            dist.all_reduce(flat_N, group=self.group)
            self.bytes_sent += int(ring_volume(flat_N.numel() * flat_N.element_size(), world))
            if self.delay:
                self.delay(flat_N.numel() * flat_N.element_size())
            flat_N /= world
            unflatten_into_grads(bucket, flat_N)


def flatten_grads(bucket: list[nn.Parameter]) -> torch.Tensor:
    """The bucket's gradients (zeros where a parameter has none) as one flat tensor; a sparse one (a
    ``sparse=True`` embedding's rows) is written densified straight into its slice, its rows coalesced as the
    sparse path coalesces them (the same numbers whichever sync sums them)."""
    flat_N = torch.empty(sum(p.numel() for p in bucket), dtype=bucket[0].dtype, device=bucket[0].device)
    offset = 0
    for p in bucket:
        part = flat_N[offset : offset + p.numel()]
        if p.grad is None:
            part.zero_()
        elif p.grad.is_sparse:
            rows_K, values_KD = sparse_rows(p.grad)
            part.zero_().view(p.shape[0], -1)[rows_K] = values_KD.reshape(rows_K.numel(), -1)
        else:
            part.copy_(p.grad.reshape(-1))
        offset += p.numel()
    return flat_N


def unflatten_into_grads(bucket: list[nn.Parameter], flat_N: torch.Tensor) -> None:
    """Write consecutive slices of ``flat_N`` into the bucket's ``.grad`` (created where missing); a sparse
    gradient comes back dense, as a view of its slice (no second dense copy: ``flat_N`` must be the caller's own
    fresh buffer, as :class:`DenseAllReduce`'s is)."""
    offset = 0
    for p in bucket:
        n = p.numel()
        part = flat_N[offset : offset + n].view_as(p)
        if p.grad is not None and p.grad.is_sparse:  # the all-reduce's fresh buffer: nothing else holds it
            p.grad = part
        elif p.grad is None:
            p.grad = part.clone()
        else:
            p.grad.copy_(part)
        offset += n
