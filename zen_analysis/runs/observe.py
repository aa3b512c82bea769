"""Watching a launch while it runs: the ``on_metrics`` protocol of :func:`~zen_analysis.runs.launch.launch`.

An observer is a callable taking each batch of new rows of rank 0's ``metrics.jsonl`` (one dict per step: ``step``,
``loss``, ``step_s``, ``tokens``, ``val_loss`` on evaluation steps, ...). If it also has ``finish(summary, error)``,
the launcher calls that exactly once when the run ends: with rank 0's summary (``val_loss``, ``tokens_per_s``, ...)
on success, with the exception on a failure, a timeout or a keyboard interrupt. ``launch`` takes one observer or a
list of them.

* :func:`forward` turns any ``fn(name, value, step)`` into an observer, e.g. TensorBoard's
  ``SummaryWriter.add_scalar``: ``launch(cfg, on_metrics=[LiveLoss(), forward(writer.add_scalar)])``;
* :class:`~zen_analysis.plots.training_curves.LiveLoss` draws the loss and throughput in a notebook.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["forward", "tokens_per_s"]

NOT_SCALARS = ("step", "captured", "loss_is_rank0_only")


class LineTail:
    """The lines appended to a file (rank 0's ``metrics.jsonl`` or log) since the last call; the first call reads
    from byte ``start`` (a resumed run's log: where this attempt begins)."""

    def __init__(self, path: Path, start: int = 0) -> None:
        self.path = path
        self.pos = start
        self.partial = ""

    def lines(self) -> list[str]:
        if not self.path.exists():
            return []
        with open(self.path) as f:
            f.seek(self.pos)
            chunk = f.read()
            self.pos = f.tell()
        text = self.partial + chunk
        *complete, self.partial = text.split("\n")
        return complete


def tokens_per_s(rows: list[dict]) -> list[float]:
    """Throughput of each step from its rows: the tokens it added over its wall time (``nan`` where unknown)."""
    out, before = [], None
    for row in rows:
        tokens, seconds = row.get("tokens"), row.get("step_s")
        if tokens is None or not seconds:
            out.append(math.nan)
        else:
            step_tokens = tokens - before if before is not None else tokens / (row["step"] + 1)
            out.append(step_tokens / seconds)
        before = tokens
    return out


class forward:  # noqa: N801 - used like a function: forward(writer.add_scalar)
    """An observer calling ``fn(f"{prefix}{key}", value, step)`` for every numeric value of every row (and
    ``fn(f"{final_prefix}{key}", value, last step)`` for the summary's numbers at the end); ``keys`` limits which."""

    def __init__(
        self,
        fn: Callable[[str, float, int], Any],
        *,
        keys: Iterable[str] | None = None,
        prefix: str = "train/",
        final_prefix: str = "final/",
    ) -> None:
        self.fn = fn
        self.keys = set(keys) if keys is not None else None
        self.prefix, self.final_prefix = prefix, final_prefix
        self._last_step = 0
        self._before: dict | None = None

    def _numbers(self, row: dict):
        for key, value in row.items():
            if key in NOT_SCALARS or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if self.keys is None or key in self.keys:
                yield key, value

    def __call__(self, rows: list[dict]) -> None:
        context = [self._before] if self._before is not None else []
        for row, rate in zip(rows, tokens_per_s(context + rows)[len(context) :]):
            self._last_step = row["step"]
            for key, value in self._numbers({**row, "tokens_per_s": rate}):
                if not (isinstance(value, float) and math.isnan(value)):
                    self.fn(self.prefix + key, value, row["step"])
        if rows:
            self._before = rows[-1]

    def finish(self, summary: dict | None, error: BaseException | None) -> None:
        for key, value in self._numbers(summary or {}):
            self.fn(self.final_prefix + key, value, self._last_step)
        flush = getattr(getattr(self.fn, "__self__", None), "flush", None)  # a SummaryWriter: write it out now
        if callable(flush):
            flush()


def observers(on_metrics) -> list:
    """``on_metrics`` as a list (None, one observer or several)."""
    if on_metrics is None:
        return []
    return list(on_metrics) if isinstance(on_metrics, (list, tuple)) else [on_metrics]


def notify(watchers: list, rows: list[dict]) -> None:
    for w in watchers:
        w(rows)


def finish(watchers: list, summary: dict | None, error: BaseException | None) -> None:
    """Call every observer's ``finish`` once; an observer's own failure is a warning, never the run's error."""
    for w in watchers:
        done = getattr(w, "finish", None)
        if done is None:
            continue
        try:
            done(summary, error)
        except Exception as e:  # noqa: BLE001 - the run's outcome must not be replaced by a plot's
            warnings.warn(f"{type(w).__name__}.finish failed: {e!r}", stacklevel=2)
