"""The training loop's contract with a gradient synchronization, and the dense baseline.

The loop calls ``sync.attach(model)`` once and ``sync.synchronize(model)`` after the last micro-batch's backward
of every step; after it every rank holds the same averaged gradient. :class:`GradSync` declares the eight members
the loop uses (the step's counters come back as one :class:`~zen_analysis.sync.contract.SyncRecord`) and the hooks a
subclass may override; the default, :class:`DenseAllReduce`, is what DDP does: broadcast rank 0's parameters
once, then all-reduce flattened gradient buckets. The sparse syncs (:mod:`zen_analysis.sync.sparse`,
:mod:`zen_analysis.sync.compressed`) and local SGD (:mod:`zen_analysis.local_sgd`) derive from it;
:func:`zen_analysis.train.registry.build_sync` is the one place a configured name becomes a sync.

Shape suffixes: N elements of a bucket's flat gradient, K non-zero rows of a sparse gradient, D values per row (the
table's width)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable

import torch
import torch.distributed as dist
from torch import nn

from zen_analysis.capture.buckets import bucket_parameters
from zen_analysis.sync.clip import clip_grad_norm_by_rows
from zen_analysis.sync.contract import SyncRecord, SyncSummary
from zen_analysis.wire.dtypes import on_wire
from zen_analysis.wire.exchange import ring_volume
from zen_analysis.wire.inflight import hold, outside_python_tls
from zen_analysis.wire.rows import sparse_rows


class GradSync:
    """The loop's contract (:class:`~zen_analysis.sync.contract.TrainingSync`: :meth:`attach`,
    :meth:`load_state_dict`, :meth:`before_backward`, :meth:`synchronize`, :meth:`record`, :meth:`clip_grad_norm_`,
    :meth:`state_dict`, :meth:`end_run`) with its defaults, so the loop calls methods instead of probing for them.

    A subclass implements :meth:`attach` and :meth:`synchronize`; the rest is optional: the hooks the defaults call
    (:meth:`before_last_backward`, :meth:`step_counters`, :meth:`finalize`, :meth:`describe`), the slow link's
    :meth:`set_link`, and the running counters :meth:`record` reads, declared here with their defaults. What only
    some methods need comes in from outside the loop: local SGD's schedule, log and pseudo-gradients through
    :mod:`zen_analysis.train.loop_hooks`, the perturbations through :mod:`zen_analysis.train.perturbations`."""

    name: str = "sync"
    # ---- the running counters :meth:`record` takes this step's share of, and the run summary's totals
    sparse_bytes_sent: int | None = None
    """Bytes the sparse path has sent so far (None: there is no sparse path, and the metrics say nothing of it)."""
    sparse_seconds: float = 0.0
    """Seconds the sparse path has spent summing so far (its scheme's runs)."""
    bytes_sent: int | None = None
    """Bytes this rank has sent in all (None where not counted)."""
    union_rows: torch.Tensor | None = None
    """After a sync by rows: the rows of the last summed embedding gradient some rank touched (its
    :class:`~zen_analysis.sync.contract.SyncRecord`)."""
    overlap: bool = False
    """The sync starts each bucket's sum while the step's last backward still runs (:meth:`before_last_backward`)."""
    overlap_seconds: float = 0.0
    """With ``overlap``: seconds the sums started during backward took, added up over steps: a worker thread's own
    time on each bucket, or for asynchronous all-reduces (whose progress is gloo's and not observed) the span from
    a step's first launch to the moment the last was seen complete (at least the end of backward)."""
    hidden_seconds: float = 0.0
    """With ``overlap``: of ``overlap_seconds``, the seconds spent before backward ended (hidden behind it)."""
    early_buckets: int = 0
    """With ``overlap``: buckets whose sum was launched before backward ended, added up over steps (which buckets
    those are follows from the graph alone; how much of their time backward hides depends on the machine)."""
    decisions: dict | None = None
    """Zen's planner: what it chose per tensor, and why (the run summary's ``planner``)."""
    delay: Callable[[int], None] | None = None
    """Under ``perturb.bandwidth_gbps``: sleeps as long as an all-reduce of n bytes takes on the slow link."""
    link_seconds: Callable[[int], float] | None = None
    """Under ``perturb.bandwidth_gbps``: seconds an all-reduce of n bytes takes on the slow link (asynchronous
    syncs keep their own link clock)."""
    _recorded: tuple = (0, 0.0, 0.0, 0.0, 0)
    """The counters at the last :meth:`record` (zero before the first)."""

    # ---- the loop's contract (TrainingSync)
    def attach(self, model: nn.Module) -> None:
        raise NotImplementedError

    def before_backward(self, *, last: bool, capturing: bool) -> None:
        """The loop calls it before every micro-batch's backward, ``last`` for the step's last one, ``capturing`` on
        a capture step (the capture edits gradients after each backward). Default: :meth:`before_last_backward`
        before the last backward of a step that captures nothing. FSDP2 overrides it: it accumulates the earlier
        backwards unsharded and reduce-scatters at the last, capture steps included."""
        if last and not capturing:
            self.before_last_backward()

    def synchronize(self, model: nn.Module) -> None:
        raise NotImplementedError

    def record(self) -> SyncRecord:
        """What this sync did in the step it just synchronized (the loop calls it once a step, right after
        :meth:`synchronize`): each running counter less its value at the last call, and :meth:`step_counters`."""
        fields = self.step_counters()  # first: it may bring the sparse byte count up to date
        now = (self.sparse_bytes_sent, self.sparse_seconds, self.overlap_seconds, self.hidden_seconds)
        now += (self.early_buckets,)
        then, self._recorded = self._recorded, tuple(0 if v is None else v for v in now)
        return SyncRecord(
            sparse_bytes_sent=None if now[0] is None else now[0] - then[0],
            sparse_seconds=now[1] - then[1],
            overlap_seconds=now[2] - then[2] if self.overlap else None,
            hidden_seconds=now[3] - then[3],
            early_buckets=now[4] - then[4],
            union_rows=self.union_rows,
            fields=fields,
        )

    def clip_grad_norm_(
        self, parameters: Iterable[nn.Parameter], max_norm: float, rows: dict | None = None
    ) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` on the synchronized gradients; the parameters in ``rows`` (an embedding
        whose gradient lives on some rows, mapped to those sorted rows) read and scaled on those rows alone
        (:func:`~zen_analysis.sync.clip.clip_grad_norm_by_rows`). A sync whose gradients are sharded across ranks
        clips by the norm over every rank's shards. Returns the total norm."""
        if rows:
            return clip_grad_norm_by_rows(parameters, max_norm, rows)
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)

    def end_run(self, model: nn.Module) -> SyncSummary:
        """After the last step: :meth:`finalize`, then what the run summary says of the sync."""
        self.finalize(model)
        return SyncSummary(bytes_sent=self.bytes_sent, decisions=self.decisions, described=self.describe())

    def state_dict(self) -> dict:
        """This rank's state a checkpoint carries (:mod:`zen_analysis.train.checkpoint`): whatever decides later
        steps beyond the model and optimizers, such as error-feedback residuals; {} for a stateless sync."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Take back :meth:`state_dict`'s state, on a resumed run."""
        if state:
            raise ValueError(f"the {self.name} sync holds no state, but the checkpoint has {sorted(state)}")

    # ---- the hooks a subclass may override
    def before_last_backward(self) -> None:
        """Called just before the backward of a step's last micro-batch (not on capture steps: the capture edits
        gradients after backward). An overlapping sync starts summing each bucket as soon as backward has produced
        its final gradients; :meth:`synchronize` finishes. Default: nothing."""

    def step_counters(self) -> dict:
        """What the sync counted during the step that just ended, as fields of its ``metrics.jsonl`` row
        (:meth:`record` calls it once a step). Default: none."""
        return {}

    def finalize(self, model: nn.Module) -> None:
        """After the last step (local SGD: one last sync, so the final model is the global one)."""

    def describe(self) -> dict | None:
        """The run summary's ``sync`` entry (None: none)."""
        return None

    def set_link(self, delay: Callable[[int], None], link_seconds: Callable[[int], float]) -> None:
        """The emulated slow link of ``perturb.bandwidth_gbps`` (before :meth:`attach`;
        :func:`zen_analysis.train.perturbations.slow_link` sets it)."""
        self.delay, self.link_seconds = delay, link_seconds


class ReadyBuckets:
    """Starts each bucket's sum as soon as backward has produced every gradient in it, DDP's reducer's way: a
    post-accumulate-grad hook on every parameter counts its bucket down, and ``launch(b)`` runs in bucket order only
    (bucket b once it and every bucket before it are complete), so every rank issues its collectives in the same
    order whatever order autograd runs in. Live for one backward between :meth:`arm` and :meth:`disarm`; a
    parameter that got no gradient holds its bucket (and the later ones) back until :meth:`disarm` hands them over.

    Buckets come in reverse registration order (:func:`~zen_analysis.capture.buckets.bucket_parameters`), the
    order backward produces gradients, so the first launches while most of backward is still to run."""

    def __init__(self, buckets: list[list[nn.Parameter]], launch: Callable[[int], None]) -> None:
        self._sizes = [len(b) for b in buckets]
        self._launch = launch
        self._left: list[int] = []
        self._next = len(buckets)
        self.armed = False
        self.first_launch: float | None = None
        """perf_counter() of this backward's first launch (None: none yet)."""
        self.early = 0
        """Buckets the last armed backward launched itself (the rest :meth:`disarm` launched after it)."""
        for b, bucket in enumerate(buckets):
            for p in bucket:
                p.register_post_accumulate_grad_hook(functools.partial(self._ready, b))

    def arm(self) -> None:
        self._left, self._next, self.armed, self.first_launch = list(self._sizes), 0, True, None

    @outside_python_tls
    def _ready(self, b: int, _param: nn.Parameter) -> None:
        if not self.armed:
            return
        self._left[b] -= 1
        while self._next < len(self._left) and self._left[self._next] == 0:
            self._fire()

    def _fire(self) -> None:
        if self.first_launch is None:
            self.first_launch = time.perf_counter()
        self._next += 1
        self._launch(self._next - 1)

    def disarm(self) -> None:
        """Launch, in order, every bucket backward did not (all of them after a backward it was not armed for); the
        hooks rest until the next :meth:`arm`."""
        if not self.armed:
            self._next, self.first_launch = 0, None
        self.early = self._next
        while self._next < len(self._sizes):
            self._fire()
        self.armed = False


class DenseAllReduce(GradSync):
    """Bucketed dense all-reduce of every gradient, averaged over ranks (the baseline). Buckets are DDP's (reverse
    registration order, ``bucket_mb`` each); with ``overlap`` each bucket's all-reduce starts, asynchronously, as
    soon as backward has filled it (:class:`ReadyBuckets`), as DDP does; otherwise all of them after backward, one
    after the other. Either way the same buckets in the same order: the same sums, bit for bit."""

    name = "allreduce"

    def __init__(
        self,
        *,
        bucket_mb: float = 25.0,
        group: dist.ProcessGroup | None = None,
        overlap: bool = False,
        wire_dtype: torch.dtype | None = None,
    ) -> None:
        self.bucket_mb = bucket_mb
        self.group = group
        self.overlap = overlap
        self.wire_dtype = wire_dtype
        """The dtype buckets are all-reduced in (None: the gradients' own); bf16 sends a float32 model's gradients
        at 2 bytes a value, as DDP's ``bf16_compress_hook`` does, and they come back as float32."""
        self.delay = None
        """Set by the loop under ``perturb.bandwidth_gbps``: sleeps as long as an all-reduce of n bytes would take."""
        self.bytes_sent = 0
        """Bytes this rank sent in all-reduces so far (ring volume, 2 (W - 1) / W x buffer)."""
        self.overlap_seconds = 0.0
        self.hidden_seconds = 0.0
        self.early_buckets = 0
        self._buckets: list[list[nn.Parameter]] = []
        self._started = 0.0
        self._ready: ReadyBuckets | None = None
        self._inflight: list[tuple[int, torch.Tensor, dist.Work]] = []

    def _world(self) -> int:
        return dist.get_world_size(self.group) if dist.is_initialized() else 1

    def attach(self, model: nn.Module, params: list[nn.Parameter] | None = None) -> None:
        """Broadcast rank 0's parameters and bucket ``params`` (default: every trainable parameter)."""
        if params is None:
            params = [p for p in model.parameters() if p.requires_grad]
        if self._world() > 1:
            for p in params:  # identical start on every rank, whatever each rank's RNG did
                hold(p.data)
                dist.broadcast(p.data, src=0, group=self.group)
        groups = bucket_parameters([(str(i), p) for i, p in enumerate(params)], self.bucket_mb)
        self._buckets = [[p for _, p in group] for group in groups]
        if self.overlap and self._world() > 1:
            self._ready = ReadyBuckets(self._buckets, self._launch)

    def before_last_backward(self) -> None:
        if self._ready is not None:
            self._ready.arm()

    def _flat(self, b: int) -> torch.Tensor:
        return on_wire(flatten_grads(self._buckets[b]), self.wire_dtype)

    def _launch(self, b: int) -> None:
        flat_N = self._flat(b)
        hold(flat_N)
        self._inflight.append((b, flat_N, dist.all_reduce(flat_N, group=self.group, async_op=True)))

    def start(self) -> None:
        """After backward: with ``overlap``, launch the buckets backward left (asynchronously); else nothing."""
        self._started = time.perf_counter()
        if self._ready is not None:
            self._ready.disarm()
            self.early_buckets += self._ready.early

    def finish(self) -> None:
        """Every bucket summed and averaged into ``.grad``: the launched ones waited for, the rest (no
        ``overlap``) all-reduced now, one after the other."""
        world = self._world()
        if self._ready is None:
            for b, bucket in enumerate(self._buckets):
                flat_N = self._flat(b)
                hold(flat_N)
                dist.all_reduce(flat_N, group=self.group)
                self._account(flat_N, world)
                unflatten_into_grads(bucket, self._averaged(b, flat_N, world))
            return
        for b, flat_N, work in self._inflight:
            work.wait()
            self._account(flat_N, world)
            unflatten_into_grads(self._buckets[b], self._averaged(b, flat_N, world))
        if self._inflight:  # gloo's progress is not observed: the span from the first launch to seen complete
            first = self._ready.first_launch
            self.overlap_seconds += time.perf_counter() - first
            self.hidden_seconds += max(self._started - first, 0.0)
        self._inflight = []

    def _averaged(self, b: int, sum_N: torch.Tensor, world: int) -> torch.Tensor:
        """The bucket's sum back in its gradients' dtype, averaged: a fresh buffer (:func:`unflatten_into_grads`)."""
        dtype = self._buckets[b][0].dtype
        return (sum_N if sum_N.dtype == dtype else sum_N.to(dtype)).div_(world)

    def _account(self, flat_N: torch.Tensor, world: int) -> None:
        nbytes = flat_N.numel() * flat_N.element_size()
        self.bytes_sent += int(ring_volume(nbytes, world))
        if self.delay:
            self.delay(nbytes)

    def synchronize(self, model: nn.Module) -> None:
        if self._world() == 1:
            return
        self.start()
        self.finish()


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
