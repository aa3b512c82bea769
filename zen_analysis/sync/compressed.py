"""Compression sparsity (DGC top-k with error feedback per parameter) summed by a sparse scheme: the state and the
per-bucket step shared by the DDP hook (:func:`zen_analysis.sync.ddp.comm_hook`) and the toolkit's loop
(:class:`CompressedSync`, ``sync.method=topk``).

Zen adds no loss beyond the sparsifier: for the same masks the result equals AGsparse's and a dense all-reduce of
the sparsified tensors (tested).

Shape suffixes: N elements of a bucket's flat gradient, K entries kept by top-k, S magnitudes this rank samples for a
global threshold."""

from __future__ import annotations

import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace

import torch
import torch.distributed as dist
from torch import nn

from zen_analysis.capture.topk import TopKCompressor
from zen_analysis.comm import build_scheme
from zen_analysis.sync.grad_sync import DenseAllReduce, GradSync, ReadyBuckets, flatten_grads, unflatten_into_grads
from zen_analysis.wire.inflight import hold

THRESHOLDS = ("local", "global")


def _compressor(ratio: float, seed: int) -> TopKCompressor:
    return TopKCompressor(ratio=ratio, exact_below=65_536, sample_ratio=0.01, error_feedback=True, seed=seed)


@dataclass(frozen=True)
class Report:
    """What a DDP hook did, as plain values: what :meth:`Stats.summary` returns, as an object (a spawned rank's,
    brought back to the process that launched it: ``ZenDDPStrategy``). Read-only."""

    mode: str
    scheme: str
    hooked: bool
    sparse_names: tuple
    left_dense: dict
    step: int
    bytes_sent: int
    allreduce_bytes_sent: int
    threshold_bytes_sent: int
    sync_s: float
    exposed_s: float

    def summary(self) -> dict:
        return {k: getattr(self, k) for k in REPORT}


REPORT = tuple(f.name for f in fields(Report))
"""What both DDP hooks' states report, alike (:meth:`Stats.summary`); ``last_step`` and ``decisions`` besides."""


@dataclass
class Stats:
    """What a hook did, summed over steps, and its last step bucket by bucket; the same attributes for both hooks
    (:data:`REPORT`, :meth:`summary`)."""

    step: int = 0
    """Steps (backward passes) the hook has summed."""
    bytes_sent: int = 0
    """Bytes this rank sent through the sparse scheme (its measured bytes)."""
    allreduce_bytes_sent: int = 0
    """Bytes this rank sent in the hook's dense all-reduces, ring volume
    (:func:`~zen_analysis.wire.exchange.ring_bytes_sent`): the gradients the natural hook leaves dense (whole buckets
    and the rest of a mixed one); 0 for top-k, which sends every bucket through the scheme. Not what dense training
    would have sent: that is every gradient's."""
    threshold_bytes_sent: int = 0
    """Bytes sent to agree on top-k's global threshold (``threshold="global"``); 0 otherwise."""
    sync_s: float = 0.0
    exposed_s: float = 0.0
    last_step: list = field(default_factory=list)
    sparse_names: tuple = ()
    """The parameters whose gradients go through the sparse scheme, by name: the natural hook's sparse parameters;
    top-k's every trainable parameter. Empty when the hook stepped aside (``hooked`` False)."""
    left_dense: dict = field(default_factory=dict)
    """Natural mode's default selection: the embeddings it left to the dense all-reduce, with the reason (tied, or
    a position table; :func:`~zen_analysis.sync.selection.select_sparse`)."""
    hooked: bool = True
    """False when ``register`` found nothing to sum sparsely and left the model stock DDP (no hook)."""
    planner: object = field(default=None, repr=False)
    """With ``scheme="auto"``: the :class:`~zen_analysis.comm.planner.Planner` choosing each tensor's scheme."""
    _pending: list = field(default_factory=list, repr=False)
    _schemes: dict = field(default_factory=dict, repr=False)

    @property
    def decisions(self) -> dict:
        """``scheme="auto"``: the planner's current choice per tensor (bucket key or parameter name) and its log."""
        return self.planner.decisions if self.planner is not None else {}

    def summary(self) -> dict:
        """What the hook did, as plain values (:data:`REPORT`: the same keys for both hooks; picklable, so a
        launcher can bring a rank's back)."""
        return {k: getattr(self, k) for k in REPORT}

    def _pick(self, tensor: str, *, group=None, **sketch):
        """The scheme instance to sum ``tensor`` with this step: the fixed one, or the planner's choice
        (:meth:`~zen_analysis.comm.planner.Planner.choose`: a collective on its steps); kept in ``_scheme``."""
        if self.scheme == "auto" and self.planner is None:
            raise RuntimeError("scheme='auto' needs a planner (register() and the syncs build one)")
        if self.planner is not None:
            name = self.planner.choose(tensor, self.step, group=self.group if group is None else group, **sketch)
            if name not in self._schemes:
                self._schemes[name] = build_scheme(name, seed=self.seed)
            self._scheme = self._schemes[name]
        return self._scheme

    def _finish_bucket(self, row: dict, last: bool) -> None:
        self._pending.append(row)
        if last:
            self.last_step, self._pending = self._pending, []
            self.step += 1


@dataclass
class HookState(Stats):
    """Per-rank state of the top-k hook: the scheme, the top-k ratio, the threshold kind and the residuals, one per
    parameter (:meth:`residual`)."""

    scheme: str = "zen"
    ratio: float = 0.05
    group: dist.ProcessGroup | None = None
    seed: int = 0
    threshold: str = "local"
    overlap: bool = False
    wire_dtype: torch.dtype | None = None
    """The dtype the kept values are summed in (None: the gradient's own); bf16 halves a float32 model's value
    bytes, and error feedback keeps what rounding to it left out."""
    mode: str = "topk"
    names: dict = field(default_factory=dict, repr=False)
    compressor: TopKCompressor | None = field(default=None, repr=False)
    _residuals: dict = field(default_factory=dict, repr=False)
    _scheme: object = field(default=None, repr=False)
    _executor: ThreadPoolExecutor | None = field(default=None, repr=False)
    _worker_group: dist.ProcessGroup | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.threshold not in THRESHOLDS:
            raise ValueError(f"threshold must be one of {THRESHOLDS}, got {self.threshold!r}")
        self.compressor = self.compressor or _compressor(self.ratio, self.seed)
        if self.planner is not None and self.scheme != "auto":
            raise ValueError(f"a planner chooses the scheme: pass scheme='auto', not {self.scheme!r}")
        self._scheme = build_scheme("allreduce" if self.scheme == "auto" else self.scheme, seed=self.seed)
        if self.overlap:
            # collectives issued from the worker go over a group of their own: the main thread may use the
            # user's group meanwhile (DDP's own collectives, a loss all-reduce)
            ranks = None if self.group is None else dist.get_process_group_ranks(self.group)
            self._worker_group = dist.new_group(ranks=ranks, backend=dist.get_backend(self.group))
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zen-ddp")  # keeps bucket order

    def residual(self, param: nn.Parameter) -> torch.Tensor | None:
        """What error feedback holds back for ``param`` (flat, float32 or float64), or None before its first step."""
        return self._residuals.get(id(param))

    def residual_norm(self) -> float:
        """The L2 norm of every residual of this rank together."""
        return float(sum(r.double().pow(2).sum() for r in self._residuals.values()) ** 0.5)

    def close(self) -> None:
        """Stop the worker thread (``overlap=True``); the state takes no more buckets."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


def _sparsify(state: HookState, flat_N: torch.Tensor, parts, key: str, step: int, group) -> tuple[torch.Tensor, int]:
    """Top-k of ``flat_N`` plus its parameters' residuals (``parts``: (parameter, start, end)); the unsent rest
    becomes their new residuals. Returns the sparse tensor to sum, in the state's ``wire_dtype`` or else
    ``flat_N``'s dtype (a bf16 model's values travel at 2 bytes), and the count kept. Residuals are float32 (float64
    for a float64 model) and keep what the rounding to that dtype left out of the sent values."""
    rank = dist.get_rank(group)
    acc_N = flat_N.detach().to(torch.promote_types(flat_N.dtype, torch.float32), copy=True).reshape(-1)
    for p, s, e in parts:
        r = state._residuals.get(id(p))
        if r is not None:
            acc_N[s:e] += r
    gather = None
    if state.threshold == "global":

        def gather(sample_S):
            pieces = [torch.empty_like(sample_S) for _ in range(dist.get_world_size(group))]
            hold(sample_S, *pieces)
            dist.all_gather(pieces, sample_S, group=group)
            state.threshold_bytes_sent += sample_S.numel() * sample_S.element_size() * (len(pieces) - 1)
            return torch.cat(pieces)

    gen = state.compressor.generator(worker=rank, tensor=key, step=step, device=acc_N.device)
    idx_K = state.compressor.select(acc_N, generator=gen, gather=gather)
    wire = state.wire_dtype or flat_N.dtype
    sparse_N = torch.zeros(acc_N.numel(), dtype=wire, device=acc_N.device)
    sparse_N[idx_K] = acc_N[idx_K].to(wire)
    acc_N[idx_K] -= sparse_N[idx_K].to(acc_N.dtype)  # zero, unless rounding to the wire's dtype left a rest
    for p, s, e in parts:  # views of one tensor per bucket: freed once every parameter has a newer residual
        state._residuals[id(p)] = acc_N[s:e]
    return sparse_N, int(idx_K.numel())


def compress_and_sum(
    flat_N: torch.Tensor, state: HookState, key: str, parts, *, step: int | None = None, group=None
) -> tuple[torch.Tensor, dict]:
    """Top-k of ``flat_N`` (+ its parameters' residuals) summed over the group with the state's scheme and
    averaged, in ``flat_N``'s dtype; and the bucket's row for ``last_step``."""
    group = state.group if group is None else group
    t0 = time.perf_counter()
    sparse_N, kept = _sparsify(state, flat_N, parts, key, state.step if step is None else step, group)
    scheme = state._pick(key, group=group, dense=sparse_N, dtype=sparse_N.dtype)
    summed_N = scheme.run(sparse_N, group=group)
    sent = int(scheme.last_measured()["bytes_sent"].sum())
    state.bytes_sent += sent
    seconds = time.perf_counter() - t0
    state.sync_s += seconds
    row = {
        "key": key,
        "params": [state.names.get(id(p), "?") for p, _, _ in parts],
        "numel": flat_N.numel(),
        "path": f"topk+{scheme.name}",
        "kept": kept,
        "bytes_sent": sent,
        "seconds": seconds,
    }
    return (summed_N / dist.get_world_size(group)).to(flat_N.dtype).view(flat_N.shape), row


def bucket_key(state: Stats, parts) -> str:
    """A bucket's name from its parameters: the same after DDP rebuilds its buckets, unlike ``bucket.index()``."""
    names = ",".join(state.names.get(id(p), f"{tuple(p.shape)}@{s}") for p, s, _ in parts)
    return f"bucket-{zlib.crc32(names.encode()):08x}"


class CompressedSync(GradSync):
    """Every gradient, flattened into DDP's buckets of ``bucket_mb``, top-k sparsified per bucket (error feedback per
    parameter) and summed with a sparse scheme; the training loop's counterpart of
    :func:`zen_analysis.sync.ddp.comm_hook`. With ``overlap`` a worker thread compresses and sums each bucket (over
    a process group of its own) as soon as backward has filled it (:class:`~zen_analysis.sync.grad_sync.ReadyBuckets`),
    while backward computes the next; the same buckets, keys and steps as inline, so the same sums bit for bit."""

    def __init__(
        self,
        scheme: str = "zen",
        *,
        ratio: float = 0.05,
        bucket_mb: float = 25.0,
        seed: int = 0,
        group: dist.ProcessGroup | None = None,
        overlap: bool = False,
        wire_dtype: torch.dtype | None = None,
        planner=None,
    ) -> None:
        self.name = f"topk-{scheme}"
        self.overlap = overlap
        self._planner = planner
        """``scheme="auto"``: a :class:`~zen_analysis.comm.planner.Planner`, or a function of the world size that
        builds one at ``attach``."""
        self.state = HookState(
            scheme=scheme,
            ratio=ratio,
            group=group,
            seed=seed,
            wire_dtype=wire_dtype,
            planner=planner if hasattr(planner, "decide") else None,  # a builder: at attach
        )
        self._layout = DenseAllReduce(bucket_mb=bucket_mb, group=group)  # parameter broadcast and bucketing
        self.group = group
        self.overlap_seconds = 0.0
        self.hidden_seconds = 0.0
        self.early_buckets = 0
        self._parts: list[list[tuple[nn.Parameter, int, int]]] = []
        self._ready: ReadyBuckets | None = None
        self._inflight: list[tuple[int, Future]] = []

    @property
    def sparse_bytes_sent(self) -> int:
        return self.state.bytes_sent

    @property
    def decisions(self) -> dict:
        return self.state.decisions if hasattr(self.state.planner, "decisions") else {}

    def attach(self, model: nn.Module) -> None:
        self._layout.attach(model)
        if self._planner is not None and not hasattr(self._planner, "decide"):
            self.state.planner = self._planner(self._layout._world())
        self.state.names = {id(p): n for n, p in model.named_parameters()}
        self.state.sparse_names = tuple(n for n, p in model.named_parameters() if p.requires_grad)
        self._parts = []
        for bucket in self._layout._buckets:
            parts, at = [], 0
            for p in bucket:
                parts.append((p, at, at + p.numel()))
                at += p.numel()
            self._parts.append(parts)
        if self.overlap and self._layout._world() > 1:
            self.state = replace(self.state, overlap=True)  # its own process group and worker thread
            self._ready = ReadyBuckets(self._layout._buckets, self._submit)

    def before_last_backward(self) -> None:
        if self._ready is not None:
            self._ready.arm()

    def state_dict(self) -> dict:
        """The step counter (it seeds the threshold's sampling), every parameter's error-feedback residual and,
        with ``auto``, the planner's choices."""
        names = self.state.names
        out = {"step": self.state.step, "residuals": {names[k]: r.clone() for k, r in self.state._residuals.items()}}
        if self.state.planner is not None:
            out["planner"] = self.state.planner.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        params = {self.state.names[id(p)]: p for bucket in self._layout._buckets for p in bucket}
        self.state.step = int(state["step"])
        self.state._residuals = {id(params[name]): r for name, r in state["residuals"].items()}
        if ("planner" in state) != (self.state.planner is not None):
            raise ValueError("the checkpoint's planner state does not match this sync's scheme")
        if self.state.planner is not None:
            self.state.planner.load_state_dict(state["planner"])

    def _sum_bucket(self, b: int, step: int, group) -> tuple[torch.Tensor, dict, float]:
        """Bucket ``b`` compressed and summed: (the average, its ``last_step`` row, when the work began)."""
        t0 = time.perf_counter()
        summed_N, row = compress_and_sum(
            flatten_grads(self._layout._buckets[b]), self.state, f"bucket{b}", self._parts[b], step=step, group=group
        )
        return summed_N, row, t0

    def _submit(self, b: int) -> None:
        self._inflight.append(
            (b, self.state._executor.submit(self._sum_bucket, b, self.state.step, self.state._worker_group))
        )

    def synchronize(self, model: nn.Module) -> None:
        if self._layout._world() == 1:
            return
        last = len(self._layout._buckets) - 1
        if self._ready is None:
            for b, bucket in enumerate(self._layout._buckets):
                summed_N, row, _ = self._sum_bucket(b, self.state.step, None)
                unflatten_into_grads(bucket, summed_N)
                self.state._finish_bucket(row, b == last)
            return
        backward_end = time.perf_counter()
        self._ready.disarm()
        self.early_buckets += self._ready.early
        for b, fut in self._inflight:
            summed_N, row, t0 = fut.result()
            unflatten_into_grads(self._layout._buckets[b], summed_N)
            self.state._finish_bucket(row, b == last)
            self.overlap_seconds += row["seconds"]  # the worker's own time on the bucket: compression and sum
            self.hidden_seconds += min(max(backward_end - t0, 0.0), row["seconds"])
        self._inflight = []

    def finalize(self, model: nn.Module) -> None:
        self.state.close()
