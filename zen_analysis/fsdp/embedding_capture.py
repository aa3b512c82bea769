"""The capture under FSDP2 (``dist.sharding=fsdp``): each worker's input-embedding gradient, what its rank adds to
the table's reduce-scatter, recorded in the vocabulary's row order.

Under FSDP2 the parameters are shards and the gradients of a step's micro-batches accumulate in FSDP2's unsharded
buffers until the last backward reduce-scatters them, so the DDP capture's way (isolate ``p.grad`` around each
micro-batch, :class:`~zen_analysis.capture.hooks.GradientCapture`) has nothing to read. An embedding's gradient is
a function of its forward's ids and the gradient of its output, though: row ``i`` gets the sum of the output
gradients at the positions that looked ``i`` up. :class:`FSDPCapture` keeps both for the micro-batch in a capture
step (a forward pre-hook placed before the hashed order's own, so the ids are the vocabulary's; a hook on the
output's gradient) and records that sum as the worker's ``natural`` record: the same tensor name, shape, rows and
values as the DDP capture of the same run (the values to the order repeated ids are added in), so the traces, the
reader and the characterization are the same. The records of a rank's workers add up to what it reduce-scatters
(the table in the original order). Top-k records are DDP buckets' and are not taken here
(``capture.topk_scope=none``, checked where the run starts).

Shape suffixes: N ids the micro-batch's forwards looked up (one per lookup, repeats kept), D the embedding's width.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch
from torch import nn

from zen_analysis.capture.hooks import GradientCapture
from zen_analysis.capture.topk import TopKCompressor
from zen_analysis.capture.traces import SparseGrad, TraceWriter
from zen_analysis.config import CaptureConfig
from zen_analysis.workload.models import input_embedding_name


class FSDPCapture(GradientCapture):
    """:class:`~zen_analysis.capture.hooks.GradientCapture`'s interface for an FSDP2 model: natural records only,
    from the embedding's ids and output gradients (module docstring). Build it after ``fully_shard`` (and after
    :class:`~zen_analysis.fsdp.hashed.HashedRows`, whose id mapping must run after this pre-hook)."""

    def __init__(self, cfg: CaptureConfig, model: nn.Module, writer: TraceWriter, *, rank: int, seed: int) -> None:
        self.cfg, self.writer, self.rank, self.group = cfg, writer, rank, None
        table = model.get_input_embeddings()
        self.name = input_embedding_name(model)
        self.shape = (table.num_embeddings, table.embedding_dim)
        self.natural = [self.name] if cfg.natural else []
        self.topk, self.buckets, self.params = [], [], {}
        self.compressor = TopKCompressor(  # no top-k here: it holds no residuals, for the checkpoint's state
            ratio=cfg.topk_ratio,
            exact_below=cfg.topk_exact_below,
            sample_ratio=cfg.topk_sample_ratio,
            error_feedback=False,
            seed=seed,
        )
        self._held = []
        self.seconds = 0.0
        self._armed = False
        self._ids: list[torch.Tensor] = []
        self._grads: list[torch.Tensor] = []
        self._handles = [
            table.register_forward_pre_hook(self._record_ids, prepend=True),
            table.register_forward_hook(self._watch_output),
        ]

    def _record_ids(self, module: nn.Module, args: tuple) -> None:
        if self._armed and torch.is_grad_enabled():
            self._ids.append(args[0].detach().reshape(-1))

    def _watch_output(self, module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        if self._armed and output.requires_grad:
            output.register_hook(lambda g: self._grads.append(g.detach().reshape(-1, g.shape[-1])))

    def tensor_info(self) -> dict[str, dict]:
        numel = self.shape[0] * self.shape[1]
        return {n: {"kind": "natural", "shape": list(self.shape), "numel": numel} for n in self.natural}

    @contextlib.contextmanager
    def worker(self, *, step: int, worker: int) -> Iterator[None]:
        """Wrap one micro-batch's forward and backward: its embedding gradient is recorded (training is
        untouched)."""
        self._ids, self._grads, self._armed = [], [], bool(self.natural)
        try:
            yield
        finally:
            self._armed = False
        t0 = time.perf_counter()
        if self.natural:
            if len(self._ids) != len(self._grads):
                raise RuntimeError(
                    f"{self.name}: {len(self._ids)} forwards but {len(self._grads)} output gradients in one "
                    "micro-batch: the capture needs each forward's output to reach the loss"
                )
            ids_N = torch.cat(self._ids) if self._ids else torch.zeros(0, dtype=torch.long)
            grads_ND = torch.cat(self._grads) if self._grads else torch.zeros(0, self.shape[1])
            grad = torch.sparse_coo_tensor(ids_N.unsqueeze(0), grads_ND, self.shape, check_invariants=True)
            self.writer.add(
                SparseGrad.from_dense(grad, step=step, worker=worker, rank=self.rank, tensor=self.name, kind="natural")
            )
        self._ids, self._grads = [], []
        self.seconds += time.perf_counter() - t0

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
