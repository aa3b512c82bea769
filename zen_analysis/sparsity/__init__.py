"""Sparsity characterization: the Zen paper's metrics on index sets (``metrics``)."""

from zen_analysis.sparsity.metrics import (
    contiguous_owner,
    densification_ratio,
    density,
    drift,
    imbalance_ratios,
    index_set,
    jaccard,
    overlap_ratio,
    pairwise_overlap_ratios,
    partition_of,
    partition_shares,
    rows_of,
    skewness_ratio,
)

__all__ = [
    "contiguous_owner",
    "densification_ratio",
    "density",
    "drift",
    "imbalance_ratios",
    "index_set",
    "jaccard",
    "overlap_ratio",
    "pairwise_overlap_ratios",
    "partition_of",
    "partition_shares",
    "rows_of",
    "skewness_ratio",
]
