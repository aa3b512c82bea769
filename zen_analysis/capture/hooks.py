"""GradientCapture: record each virtual worker's gradient of selected tensors, before any synchronization.

Context: the Zen paper analyses the gradients every GPU holds *before* aggregation. With fewer processors than
the paper's GPUs we simulate W = ranks x V workers: each rank splits its batch into V micro-batches (one per
worker) and, on capture steps, isolates each micro-batch's gradient of the captured tensors. The optimizer still
sees the full batch: the isolated gradient is added back into the accumulated ``.grad``.

What is recorded per (step, worker, tensor):

* ``natural``: the non-zeros of the input-embedding gradient (element granularity; a row with a gradient has all
  its ``hidden_size`` elements non-zero). A sparse COO gradient (``model.sparse_embedding``) is read coalesced: the
  same indices, and values up to the order backward summed a row's repeated ids in.
* ``topk``: the DGC top-k selection (after error feedback) of each DDP-style gradient bucket
  (``capture.topk_scope=bucket``, the default: every trainable parameter, :mod:`zen_analysis.capture.buckets`;
  records named ``bucket00``, ... with shape ``(numel,)``), or of each matched dense tensor (``tensor``).

Values are the worker's contribution to its rank's accumulated gradient (the micro-batch loss is scaled by 1/V),
so summing the records of a rank's workers gives exactly what that rank passes to synchronization.

With ``capture.topk_threshold=global`` a bucket's threshold comes from every worker's samples, gathered across
ranks at the end of the step (``end_step``, a collective): each worker's accumulated bucket is held until then.

The residual of error feedback is per (worker, tensor or bucket) and carried between *captured* steps: with
``capture.every=1`` this is DGC exactly; with sparser capture the residual holds the mass left unsent at the
previous captured step (training itself uses the dense gradient, so no other step compresses anything).

Shape suffixes: K entries kept by top-k (indices and values), N elements of a flattened bucket, S magnitudes this rank
samples for a global threshold, P the samples pooled from every rank.
"""

from __future__ import annotations

import contextlib
import fnmatch
import time
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn

from zen_analysis.capture.buckets import Bucket, ddp_buckets
from zen_analysis.capture.topk import TopKCompressor
from zen_analysis.capture.traces import SparseGrad, TraceWriter
from zen_analysis.config import CaptureConfig
from zen_analysis.wire.inflight import hold
from zen_analysis.workload.models import input_embedding_name


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


def _dense(grad: torch.Tensor) -> torch.Tensor:
    """``grad`` as a dense tensor: a sparse COO one (``nn.Embedding(sparse=True)``) coalesced and placed, for the
    top-k selections, which read every element."""
    return grad.coalesce().to_dense() if grad.is_sparse else grad


class GradientCapture:
    """Isolates per-worker gradients on capture steps and hands sparse records to a :class:`TraceWriter`."""

    def __init__(
        self,
        cfg: CaptureConfig,
        model: nn.Module,
        writer: TraceWriter,
        *,
        rank: int,
        seed: int,
        group: dist.ProcessGroup | None = None,
    ) -> None:
        self.cfg = cfg
        self.writer = writer
        self.rank = rank
        self.group = group
        params = dict(model.named_parameters())
        self.natural = [input_embedding_name(model)] if cfg.natural else []
        self.buckets: list[Bucket] = []
        if cfg.topk_scope == "bucket":
            self.buckets = ddp_buckets(model, cfg.bucket_mb)
            self.topk = []
            isolated = self.natural + [n for b in self.buckets for n, _, _ in b.parts if n not in self.natural]
        else:
            topk = match_tensors(model, cfg.topk_tensors) if cfg.topk_scope == "tensor" else []
            self.topk = [n for n in topk if n not in self.natural]
            isolated = self.natural + self.topk
        self.params = {n: params[n] for n in isolated}
        self.compressor = TopKCompressor(
            ratio=cfg.topk_ratio,
            exact_below=cfg.topk_exact_below,
            sample_ratio=cfg.topk_sample_ratio,
            error_feedback=cfg.error_feedback,
            seed=seed,
        )
        self._held: list[tuple[int, int, Bucket, torch.Tensor]] = []
        """Global threshold: (step, worker, bucket, accumulated gradient) awaiting ``end_step``."""
        self.seconds = 0.0
        """Wall time spent capturing (isolation, selection, buffering, writing)."""

    def state_dict(self) -> dict:
        """What the next steps depend on, at a step boundary: error feedback's residuals per (worker, tensor), the
        seconds spent so far and the writer's position (its buffered steps written out first: a checkpoint's
        shards end at its step, in the interrupted run and the uninterrupted one alike)."""
        if self._held:
            raise RuntimeError("GradientCapture.state_dict() inside a step (global-threshold buckets held)")
        self.writer.flush()
        residuals = {f"{w}|{t}": r for (w, t), r in self.compressor._residuals.items()}
        return {"residuals": residuals, "seconds": self.seconds, "writer": self.writer.state_dict()}

    def load_state_dict(self, state: dict) -> list[str]:
        """Continue from :meth:`state_dict`'s ``state``; returns the trace shards deleted (written after it)."""
        self.compressor._residuals = {
            (int(key.split("|", 1)[0]), key.split("|", 1)[1]): r for key, r in state["residuals"].items()
        }
        self.seconds = state["seconds"]
        return self.writer.load_state_dict(state["writer"])

    def tensor_info(self) -> dict[str, dict]:
        """Captured tensors with their kind, shape and numel (for the run manifest); buckets also list their
        parameter ranges (``params``: [name, start, end] in the flat bucket)."""
        info = {
            n: {"kind": "natural" if n in self.natural else "topk", "shape": list(p.shape), "numel": p.numel()}
            for n, p in self.params.items()
            if n in self.natural or n in self.topk
        }
        for b in self.buckets:
            info[b.name] = {"kind": "topk", "shape": [b.numel], "numel": b.numel, "params": b.to_json()}
        return info

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
        got = {name: p.grad for name, p in self.params.items()}
        micro = {}
        for name, p in self.params.items():
            micro[name] = got[name] if got[name] is not None else torch.zeros_like(p)  # unused by it: zero
        for name in self.natural:
            self.writer.add(
                SparseGrad.from_dense(
                    micro[name], step=step, worker=worker, rank=self.rank, tensor=name, kind="natural"
                )
            )
        for name in self.topk:
            idx_K, val_K = self.compressor.compress(_dense(micro[name]), worker=worker, tensor=name, step=step)
            self._add_topk(step, worker, name, tuple(micro[name].shape), idx_K, val_K)
        for b in self.buckets:
            flat_N = torch.cat([_dense(micro[n]).reshape(-1) for n, _, _ in b.parts])
            if self.cfg.topk_threshold == "global":
                self._held.append((step, worker, b, self.compressor.accumulate(flat_N, worker=worker, tensor=b.name)))
            else:
                idx_K, val_K = self.compressor.compress(flat_N, worker=worker, tensor=b.name, step=step)
                self._add_topk(step, worker, b.name, (b.numel,), idx_K, val_K)
        for name, p in self.params.items():  # a sparse gradient accumulates as autograd would accumulate it
            if stash[name] is None:
                p.grad = micro[name]
            else:
                p.grad = stash[name] if got[name] is None else stash[name].add_(got[name])
        self.seconds += time.perf_counter() - t0

    def _add_topk(
        self, step: int, worker: int, tensor: str, shape: tuple, idx_K: torch.Tensor, val_K: torch.Tensor
    ) -> None:
        self.writer.add(SparseGrad(step, worker, self.rank, tensor, "topk", shape, idx_K.cpu(), val_K.cpu()))

    def _select_held(self) -> None:
        """Global threshold: per bucket, every worker's sample gathered from every rank, then each held worker's
        selection against the pooled threshold (a collective: every rank calls it at the same step)."""
        world = dist.get_world_size(self.group) if dist.is_initialized() else 1
        for b in self.buckets:
            held = [(step, worker, acc_N) for step, worker, hb, acc_N in self._held if hb is b]
            if not held:
                continue
            local_S = torch.cat(
                [self.compressor.sample(acc_N, worker=w, tensor=b.name, step=s) for s, w, acc_N in held]
            )
            if world > 1:
                pieces = [torch.empty_like(local_S) for _ in range(world)]
                hold(local_S, *pieces)
                dist.all_gather(pieces, local_S, group=self.group)
                pool_P = torch.cat(pieces)
            else:
                pool_P = local_S
            for step, worker, acc_N in held:
                gen = self.compressor.generator(worker=worker, tensor=b.name, step=step, device=acc_N.device)
                idx_K = self.compressor.select(acc_N, generator=gen, gather=lambda _s: pool_P)  # noqa: B023
                val_K = self.compressor.keep(acc_N, idx_K, worker=worker, tensor=b.name)
                self._add_topk(step, worker, b.name, (b.numel,), idx_K, val_K)
        self._held = []

    def end_step(self) -> None:
        """Close a captured step (every rank calls it: with a global threshold it gathers samples)."""
        t0 = time.perf_counter()
        if self.buckets and self.cfg.topk_threshold == "global":  # on every rank, so the all-gathers pair up
            self._select_held()
        self.writer.end_step()
        self.seconds += time.perf_counter() - t0

    def close(self) -> None:
        t0 = time.perf_counter()
        self.writer.close()
        self.seconds += time.perf_counter() - t0
