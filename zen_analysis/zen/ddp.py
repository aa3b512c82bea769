"""Zen in a user's own DDP training, and compression sparsity for the toolkit's loop.

:func:`register` is the one public entry point for DDP (``register(ddp_model, mode="natural")``):

* ``mode="natural"`` (the paper's main case): the gradients of the sparse parameters (by default every
  ``nn.Embedding``'s weight, tied ones excepted) are summed losslessly with a sparse scheme (Zen by default) over
  their non-zeros; every other gradient goes the stock all-reduce way, asynchronously, so dense buckets still
  overlap backward. A bucket holding a sparse parameter is summed inside the hook (the sparse part with the
  scheme, the rest of that bucket densely) and returns a completed future.
* ``mode="topk"``: DGC top-k per bucket with error feedback, then the scheme (:func:`comm_hook`).

Compression sparsity for the toolkit's own loop and the DDP top-k hook share :func:`compress_and_sum`:

* :func:`comm_hook` for PyTorch DDP (``ddp_model.register_comm_hook(HookState(...), comm_hook)``), as the Zen
  paper integrates with DDP: each bucket is top-k sparsified with its own residual, summed with the scheme and
  averaged. The collectives run inside the hook and it returns an already completed future: chaining them in
  future callbacks deadlocks on gloo.
* :class:`CompressedSync`, the training loop's :class:`~zen_analysis.train.sync.GradSync` (``sync.compress=topk``):
  the same per-bucket compression at the loop's synchronization point, over buckets of ``bucket_mb``.

Top-k masks are each rank's own (DGC); error feedback keeps what was not sent for the next step. Zen adds no loss
beyond the sparsifier: for the same masks the result equals AGsparse's and a dense all-reduce of the sparsified
tensors (tested).
"""

# no ``from __future__ import annotations`` here: DDP checks the hook's annotations at runtime
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from zen_analysis.capture.topk import TopKCompressor


def _compressor(ratio: float, seed: int) -> TopKCompressor:
    return TopKCompressor(ratio=ratio, exact_below=65_536, sample_ratio=0.01, error_feedback=True, seed=seed)


@dataclass
class HookState:
    """Per-rank state of the DDP hook: the scheme, the top-k ratio and the residuals (one per bucket)."""

    scheme: str = "zen"
    ratio: float = 0.05
    group: dist.ProcessGroup | None = None
    seed: int = 0
    step: int = 0
    bytes_sent: int = 0
    compressor: TopKCompressor | None = field(default=None, repr=False)
    _scheme: object = field(default=None, repr=False)

    def __post_init__(self) -> None:
        from zen_analysis.comm import build_scheme

        self.compressor = self.compressor or _compressor(self.ratio, self.seed)
        self._scheme = build_scheme(self.scheme, **({"seed": self.seed} if self.scheme in ("zen", "bp_coo") else {}))


def compress_and_sum(flat_N: torch.Tensor, state: HookState, key: str) -> torch.Tensor:
    """Top-k of ``flat_N`` (+ this key's residual) summed over the group with the state's scheme, averaged."""
    rank = dist.get_rank(state.group)
    idx_K, val_K = state.compressor.compress(flat_N, worker=rank, tensor=key, step=state.step)
    sparse_N = torch.zeros(flat_N.numel(), dtype=torch.float32, device=flat_N.device)
    sparse_N[idx_K] = val_K
    summed_N = state._scheme.run(sparse_N, group=state.group)
    state.bytes_sent += int(state._scheme.last_measured()["bytes_sent"].sum())
    return (summed_N / dist.get_world_size(state.group)).to(flat_N.dtype)


def comm_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: DGC top-k per bucket, then the state's sparse scheme."""
    out = compress_and_sum(bucket.buffer(), state, f"bucket{bucket.index()}")
    if bucket.is_last():
        state.step += 1
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(out)
    return fut


@dataclass
class NaturalState:
    """Per-rank state of the natural-sparsity hook: the scheme, the parameters whose gradients it sums (by
    identity), and what it did: bytes the scheme sent, buckets summed by the scheme / densely."""

    params: tuple = ()
    scheme: str = "zen"
    group: dist.ProcessGroup | None = None
    seed: int = 0
    bytes_sent: int = 0
    sparse_buckets: int = 0
    dense_buckets: int = 0
    _scheme: object = field(default=None, repr=False)
    _ids: frozenset = field(default=frozenset(), repr=False)

    def __post_init__(self) -> None:
        from zen_analysis.comm import build_scheme

        self._scheme = build_scheme(self.scheme, **({"seed": self.seed} if self.scheme in ("zen", "bp_coo") else {}))
        self._ids = frozenset(id(p) for p in self.params)


def _offsets(bucket: dist.GradBucket) -> list[tuple[torch.Tensor, int, int]]:
    """(parameter, start, end) of each parameter's gradient inside the bucket's flat buffer."""
    buffer = bucket.buffer()
    base, size = buffer.data_ptr(), buffer.element_size()
    out = []
    for p, g in zip(bucket.parameters(), bucket.gradients()):
        start = (g.data_ptr() - base) // size
        out.append((p, start, start + g.numel()))
    return out


def natural_hook(state: NaturalState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook of natural sparsity: the state's parameters' gradients summed with its sparse
    scheme (lossless), the rest of the bucket all-reduced densely; averaged over the group, as DDP does."""
    buffer = bucket.buffer()
    world = dist.get_world_size(state.group)
    parts = _offsets(bucket)
    sparse = [(s, e) for p, s, e in parts if id(p) in state._ids]
    if not sparse:  # the stock path, asynchronous: overlaps the rest of backward
        state.dense_buckets += 1
        work = dist.all_reduce(buffer, group=state.group, async_op=True)
        return work.get_future().then(lambda fut: fut.value()[0].div_(world))
    state.sparse_buckets += 1
    for s, e in sparse:
        state._scheme.run(buffer[s:e], group=state.group)  # in place, over the non-zeros only
        state.bytes_sent += int(state._scheme.last_measured()["bytes_sent"].sum())
    dense = [(s, e) for p, s, e in parts if id(p) not in state._ids]
    if dense:  # the bucket's other gradients: one dense all-reduce of them packed together
        packed = torch.cat([buffer[s:e] for s, e in dense])
        dist.all_reduce(packed, group=state.group)
        at = 0
        for s, e in dense:
            buffer[s:e].copy_(packed[at : at + e - s])
            at += e - s
    buffer.div_(world)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buffer)
    return fut


def sparse_parameters(module: nn.Module) -> tuple[nn.Parameter, ...]:
    """The parameters natural sparsity applies to: every ``nn.Embedding``'s weight whose gradient is row-sparse,
    i.e. not also used elsewhere (a weight tied to an output layer gets a dense gradient: skipped, with a
    warning naming it)."""
    import warnings

    embeddings = [(name, m.weight) for name, m in module.named_modules() if isinstance(m, nn.Embedding)]
    owners: dict[int, list[str]] = {}
    for name, m in module.named_modules():
        for pname, p in m.named_parameters(recurse=False):
            owners.setdefault(id(p), []).append(f"{name}.{pname}" if name else pname)
    out = []
    for name, w in embeddings:
        if len(owners.get(id(w), [])) > 1:
            warnings.warn(f"{name}.weight is tied to {[o for o in owners[id(w)] if o != name + '.weight']}: its gradient "
                          "is dense, so it goes the dense way", stacklevel=3)  # fmt: skip
            continue
        if w.requires_grad:
            out.append(w)
    return tuple(out)


def register(ddp_model: nn.Module, *, mode: str = "natural", scheme: str = "zen", params=None, group=None, seed: int = 0,
             ratio: float = 0.05):  # fmt: skip
    """Put Zen (or another scheme of :mod:`zen_analysis.comm`) into a ``DistributedDataParallel`` model; returns the
    hook's state (bytes sent, buckets by path).

    ``mode="natural"``: the gradients of ``params`` (default :func:`sparse_parameters`: the untied embeddings) are
    summed losslessly by ``scheme``, everything else by DDP's own all-reduce. ``mode="topk"``: DGC top-``ratio``
    of every bucket with error feedback, then ``scheme`` (lossy as the sparsifier is; :func:`comm_hook`).

    At the end, delete the DDP model before ``dist.destroy_process_group()`` (``scripts/ddp_transformers.py``): a
    Python hook's last asynchronous gloo all-reduce may still be releasing its tensors on gloo's worker thread,
    which needs the GIL; a process group whose last reference is the model's Reducer joins that thread from the
    model's destructor, GIL held, and the process hangs at exit (2 runs in 5 here before the script did so)."""
    module = getattr(ddp_model, "module", None)
    if module is None:
        raise ValueError("register() takes a torch.nn.parallel.DistributedDataParallel model")
    if mode == "natural":
        chosen = tuple(params) if params is not None else sparse_parameters(module)
        if not chosen:
            raise ValueError("natural mode found no untied nn.Embedding to sum sparsely; pass params=[...]")
        if any(getattr(m, "sparse", False) for m in module.modules() if isinstance(m, nn.Embedding)):
            raise ValueError("nn.Embedding(sparse=True) is not supported by the natural hook yet; use dense gradients")
        state = NaturalState(params=chosen, scheme=scheme, group=group, seed=seed)
        ddp_model.register_comm_hook(state, natural_hook)
        return state
    if mode == "topk":
        state = HookState(scheme=scheme, ratio=ratio, group=group, seed=seed)
        ddp_model.register_comm_hook(state, comm_hook)
        return state
    raise ValueError(f"mode must be 'natural' or 'topk', got {mode!r}")


class CompressedSync:
    """Every gradient, flattened into buckets of ``bucket_mb``, top-k sparsified per bucket (error feedback)
    and summed with a sparse scheme; the training loop's counterpart of :func:`comm_hook`."""

    def __init__(self, scheme: str = "zen", *, ratio: float = 0.05, bucket_mb: float = 25.0, seed: int = 0,
                 group: dist.ProcessGroup | None = None) -> None:  # fmt: skip
        from zen_analysis.train.sync import DenseAllReduce

        self.name = f"topk-{scheme}"
        self.state = HookState(scheme=scheme, ratio=ratio, group=group, seed=seed)
        self._layout = DenseAllReduce(bucket_mb=bucket_mb, group=group)  # parameter broadcast and bucketing
        self.group = group

    @property
    def sparse_bytes_sent(self) -> int:
        return self.state.bytes_sent

    def attach(self, model: nn.Module) -> None:
        self._layout.attach(model)

    def synchronize(self, model: nn.Module) -> None:
        if self._layout._world() == 1:
            return
        from zen_analysis.train.sync import flatten_grads, unflatten_into_grads

        for b, bucket in enumerate(self._layout._buckets):
            unflatten_into_grads(bucket, compress_and_sum(flatten_grads(bucket), self.state, f"bucket{b}"))
        self.state.step += 1
