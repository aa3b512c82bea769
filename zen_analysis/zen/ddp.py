"""Compression sparsity: DGC top-k with error feedback per gradient bucket, then a sparse scheme (Zen by default).

Two entry points share one function, :func:`compress_and_sum`:

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
