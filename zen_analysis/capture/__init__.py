"""Gradient capture: per-worker sparse gradients (natural and DGC top-k) and the Parquet trace store."""

from zen_analysis.capture.traces import SparseGrad, TraceError, TraceReader, TraceWriter

__all__ = ["SparseGrad", "TraceError", "TraceReader", "TraceWriter"]
