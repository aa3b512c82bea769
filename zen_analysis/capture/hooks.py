"""GradientCapture: record each virtual worker's gradient of selected tensors, before any synchronization.

Context: the Zen paper analyses the gradients every GPU holds *before* aggregation. On a 2-core machine we
simulate W = ranks x V workers: each rank splits its batch into V micro-batches (one per worker) and, on capture
steps, isolates each micro-batch's gradient of the captured tensors. The optimizer still sees the full batch:
the isolated gradient is added back into the accumulated ``.grad``.

What is recorded per (step, worker, tensor):

* ``natural``: the non-zeros of the input-embedding gradient (element granularity; a row with a gradient has all
  its ``hidden_size`` elements non-zero).
* ``topk``: the DGC top-k selection (after error feedback) of each matched dense tensor.

Values are the worker's contribution to its rank's accumulated gradient (the micro-batch loss is scaled by 1/V),
so summing the records of a rank's workers gives exactly what that rank passes to synchronization.

The residual of error feedback is per (worker, tensor) and carried between *captured* steps: with
``capture.every=1`` this is DGC exactly; with sparser capture the residual holds the mass left unsent at the
previous captured step (training itself uses the dense gradient, so no other step compresses anything).
"""

from __future__ import annotations

import contextlib
import fnmatch
import time
from collections.abc import Iterator

import torch
from torch import nn

from zen_analysis.sparsity.topk import TopKCompressor
from zen_analysis.capture.traces import SparseGrad, TraceWriter
from zen_analysis.config import CaptureConfig
from zen_analysis.train.model import input_embedding_name


def match_tensors(model: nn.Module, patterns: tuple[str, ...]) -> list[str]:
    """Parameter names matched by the fnmatch ``patterns``; a pattern matching nothing is an error."""
    names = [n for n, _ in model.named_parameters()]
    out: list[str] = []
    for pat in patterns:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pat)]
        if not hits:
            raise ValueError(f"capture.topk_tensors pattern {pat!r} matches no parameter; parameters are: {names}")
        out.extend(h for h in hits if h not in out)
    return out


class GradientCapture:
    """Isolates per-worker gradients on capture steps and hands sparse records to a :class:`TraceWriter`."""

    def __init__(self, cfg: CaptureConfig, model: nn.Module, writer: TraceWriter, *, rank: int, seed: int) -> None:
        self.cfg = cfg
        self.writer = writer
        self.rank = rank
        params = dict(model.named_parameters())
        self.natural = [input_embedding_name(model)] if cfg.natural else []
        self.topk = [n for n in match_tensors(model, cfg.topk_tensors) if n not in self.natural]
        self.params = {n: params[n] for n in self.natural + self.topk}
        self.compressor = TopKCompressor(
            ratio=cfg.topk_ratio,
            exact_below=cfg.topk_exact_below,
            sample_ratio=cfg.topk_sample_ratio,
            error_feedback=cfg.error_feedback,
            seed=seed,
        )
        self.seconds = 0.0
        """Wall time spent capturing (isolation, selection, buffering, writing)."""

    def tensor_info(self) -> dict[str, dict]:
        """Captured tensors with their kind, shape and numel (for the run manifest)."""
        return {
            n: {"kind": "natural" if n in self.natural else "topk", "shape": list(p.shape), "numel": p.numel()}
            for n, p in self.params.items()
        }

    def is_capture_step(self, step: int) -> bool:
        return step % self.cfg.every == 0

    @contextlib.contextmanager
    def worker(self, *, step: int, worker: int) -> Iterator[None]:
        """Wrap one micro-batch's backward: its gradient of the captured tensors is recorded, then re-accumulated."""
        t0 = time.perf_counter()
        stash = {}
        for name, p in self.params.items():
            stash[name] = p.grad
            p.grad = None
        self.seconds += time.perf_counter() - t0
        yield
        t0 = time.perf_counter()
        for name, p in self.params.items():
            micro = p.grad
            if micro is None:  # tensor unused by this micro-batch: an all-zero gradient
                micro = torch.zeros_like(p)
            if name in self.natural:
                self.writer.add(SparseGrad.from_dense(micro, step=step, worker=worker, rank=self.rank, tensor=name, kind="natural"))
            else:
                idx_K, val_K = self.compressor.compress(micro, worker=worker, tensor=name, step=step)
                self.writer.add(SparseGrad(step, worker, self.rank, name, "topk", tuple(p.shape), idx_K.cpu(), val_K.cpu()))
            p.grad = micro if stash[name] is None else stash[name].add_(micro)
        self.seconds += time.perf_counter() - t0

    def end_step(self) -> None:
        t0 = time.perf_counter()
        self.writer.end_step()
        self.seconds += time.perf_counter() - t0

    def close(self) -> None:
        t0 = time.perf_counter()
        self.writer.close()
        self.seconds += time.perf_counter() - t0
