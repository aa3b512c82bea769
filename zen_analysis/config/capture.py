"""``capture``: which gradients are recorded to Parquet traces, and how often."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)
class CaptureConfig:
    enabled: bool = True
    every: int = 10
    """Capture steps 0, every, 2*every, ..."""
    natural: bool = True
    """Record the input-embedding gradient (natural sparsity) of every worker."""
    topk_tensors: tuple[str, ...] = (
        "*layers.0.self_attn.q_proj.weight",
        "*layers.0.mlp.down_proj.weight",
        "*layers.1.mlp.up_proj.weight",
    )
    """fnmatch patterns of dense parameters recorded after DGC top-k compression."""
    topk_ratio: float = 0.05
    """Fraction of elements kept by top-k (the paper uses 5%)."""
    topk_exact_below: int = 65536
    """Tensors with fewer elements use exact ``torch.topk``; larger ones DGC's sampled threshold."""
    topk_sample_ratio: float = 0.01
    """Fraction of elements sampled to estimate the top-k threshold (DGC)."""
    error_feedback: bool = True
    """Add each worker's unsent residual to its next captured gradient before selection (DGC)."""
    steps_per_shard: int = 5
    """Captured steps per Parquet shard; a shard is written atomically once full."""

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError("capture.every must be >= 1")
        if not 0.0 < self.topk_ratio <= 1.0:
            raise ValueError("capture.topk_ratio must be in (0, 1]")
        if not 0.0 < self.topk_sample_ratio <= 1.0:
            raise ValueError("capture.topk_sample_ratio must be in (0, 1]")
        if self.steps_per_shard < 1:
            raise ValueError("capture.steps_per_shard must be >= 1")


LEGACY_FIELDS = ("planner_topology", "gpus_per_node", "planner_steps")
"""Fields ``capture`` once had (copies of ``sync``'s that nothing read; removed). Configs stored by older runs
(``data/runs/<id>/config.json``, trace manifests) still hold them: loading drops them (``config.overrides``)."""
