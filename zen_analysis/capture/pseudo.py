"""PseudoGradientCapture: record each worker's pseudo-gradient at every outer sync of a local-SGD run, so the
characterization, the density explorer and the scheme evaluation read them as they read gradients.

Context: local SGD (DiLoCo, EDiT) syncs a pseudo-gradient, the parameter change over a round of local steps, per
sync group (:mod:`zen_analysis.local_sgd.engine`). Whether its sparsity is skewed and partly overlapping across
workers like a gradient's (the Zen paper's C1-C3) decides which sparse scheme should sum it. Records go to the run's
trace store (:mod:`zen_analysis.capture.traces`), one per (outer sync, worker, sync group), with ``step`` the step
at which the sync ran, ``worker`` the rank (a local-SGD worker is a rank: its micro-batches accumulate) and
``tensor`` the group with its kind as prefix:

* ``pseudo/<group>``, kind ``pseudo``: the worker's pseudo-gradient before any selection or penalty (anchor minus
  local parameters, flat over the group's parameters), its exact non-zeros. Dense groups are stored whole (8 bytes
  an element a record): the before-selection records of a model of P parameters cost about 8 P bytes per worker and
  outer sync.
* ``pseudo_topk/<group>``, kind ``pseudo_topk`` (``local_sgd.compress=topk`` only): what the worker hands the sparse
  scheme: its top-k of pseudo-gradient plus error-feedback residual, scaled by its EDiT weight (the records of one
  sync sum to what the scheme sums). An anomalous worker's record is empty.

``capture.pseudo``: ``off``; ``sent`` records what each worker sends (``pseudo_topk`` under ``compress=topk``, else
``pseudo``: under ``compress=natural`` or ``none`` the whole pseudo-gradient is what is summed); ``all`` records
``pseudo`` always, and ``pseudo_topk`` too under ``compress=topk``.

The manifest lists each group as a bucket is listed: shape ``(numel,)`` and ``params`` ([name, start, end] in the
flat group); ``embedding`` marks the group holding the input embedding (where natural sparsity lives), and a
``pseudo_topk`` entry carries the ``topk_ratio`` it was selected with.

Shape suffixes: N elements of a group's flattened pseudo-gradient.
"""

from __future__ import annotations

import time

import torch

from zen_analysis.capture.traces import SparseGrad, TraceWriter
from zen_analysis.config.capture import PSEUDO_MODES

PSEUDO_KINDS = ("pseudo", "pseudo_topk")


def tensor_name(kind: str, group: str) -> str:
    """The trace tensor of ``group``'s records of ``kind``."""
    return f"{kind}/{group}"


class PseudoGradientCapture:
    """Hands one rank's pseudo-gradient records to its :class:`TraceWriter` (shared with the gradient capture).

    ``layout``: per sync group, in sync order, its parameters as (name, numel) in the order the group flattens
    them, and whether it holds the input embedding (:meth:`LocalSGD.group_layout`)."""

    def __init__(
        self,
        writer: TraceWriter,
        *,
        rank: int,
        mode: str,
        compress: str,
        topk_ratio: float,
        layout: list[tuple[str, list[tuple[str, int]], bool]],
    ) -> None:
        if mode not in PSEUDO_MODES or mode == "off":
            raise ValueError(f"capture.pseudo must be sent or all to record, got {mode!r}")
        self.writer = writer
        self.rank = rank
        self.kinds = {
            "pseudo": mode == "all" or compress != "topk",
            "pseudo_topk": compress == "topk",
        }
        self.layout = layout
        self.topk_ratio = topk_ratio
        self.seconds = 0.0
        """Wall time spent recording (the engine leaves it out of its sync time)."""
        self._pending = False

    def tensor_info(self) -> dict[str, dict]:
        """The manifest's entry of every recorded group."""
        info = {}
        for group, params, embedding in self.layout:
            spans, start = [], 0
            for name, n in params:
                spans.append([name, start, start + n])
                start += n
            for kind, on in self.kinds.items():
                if on:
                    info[tensor_name(kind, group)] = {
                        "kind": kind,
                        "shape": [start],
                        "numel": start,
                        "params": spans,
                        "embedding": embedding,
                        **({"topk_ratio": self.topk_ratio} if kind == "pseudo_topk" else {}),
                    }
        return info

    def wants(self, kind: str) -> bool:
        return self.kinds[kind]

    def record(self, kind: str, *, step: int, group: str, flat_N: torch.Tensor) -> None:
        """One record: the non-zeros of ``flat_N`` (not modified) as ``kind`` for ``group`` at outer sync ``step``."""
        if not self.kinds[kind]:
            return
        t0 = time.perf_counter()
        name = tensor_name(kind, group)
        self.writer.add(
            SparseGrad.from_dense(flat_N, step=step, worker=self.rank, rank=self.rank, tensor=name, kind=kind)
        )
        self._pending = True
        self.seconds += time.perf_counter() - t0

    def end_sync(self) -> None:
        """Close the records of an outer sync as one step of the store (after the sync's groups, before the next
        step's records)."""
        if self._pending:
            t0 = time.perf_counter()
            self.writer.end_step()
            self._pending = False
            self.seconds += time.perf_counter() - t0
