"""Gradient capture: per-worker sparse gradients (natural and DGC top-k) and the Parquet trace store."""

from zen_analysis.capture.reader import TraceReader
from zen_analysis.capture.traces import SparseGrad, TraceError, TraceWriter

__all__ = ["SparseGrad", "TraceError", "TraceReader", "TraceWriter"]
