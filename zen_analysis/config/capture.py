"""``capture``: which gradients are recorded to Parquet traces, and how often."""

from __future__ import annotations

from dataclasses import dataclass

TOPK_SCOPES = ("bucket", "tensor", "none")
TOPK_THRESHOLDS = ("local", "global")
PSEUDO_MODES = ("off", "sent", "all")


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
    """With ``topk_scope=tensor``: fnmatch patterns of dense parameters recorded, each after DGC top-k on its own."""
    topk_scope: str = "bucket"
    """``bucket``: every trainable parameter's gradient fused into DDP-style buckets of ``bucket_mb`` (reverse
    registration order, :mod:`zen_analysis.capture.buckets`) and DGC top-k applied per bucket, as the Zen paper
    does; traces are keyed by bucket (``bucket00``, ...) and the manifest lists each bucket's parameter ranges.
    ``tensor``: top-k of each ``topk_tensors`` matrix separately. ``none``: no top-k records."""
    bucket_mb: float = 1.0
    """With ``topk_scope=bucket``: the bucket cap in MiB. The paper's 128 MB is about a third of a Llama 3.2-3B
    decoder layer; 1 MB is the same fraction of the default 2 x 256 Llama's layer (3.2 MB)."""
    topk_threshold: str = "local"
    """With ``topk_scope=bucket``: ``local``, each worker's top-k threshold from its own sample of the bucket (DGC);
    ``global``, one threshold per bucket and step from every worker's samples gathered (all ranks' workers), which
    each worker then applies to its own gradient, uncapped (the paper's gathered-sample threshold)."""
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
    pseudo: str = "off"
    """Local-SGD methods: record every worker's pseudo-gradient at each outer sync, per sync group
    (:mod:`zen_analysis.capture.pseudo`). ``sent``: what each worker sends (its top-k selection under
    ``local_sgd.compress=topk``, else the whole pseudo-gradient); ``all``: the pseudo-gradient before selection as
    well (about 8 bytes per parameter per worker and sync: dense groups are stored whole)."""

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError("capture.every must be >= 1")
        if not 0.0 < self.topk_ratio <= 1.0:
            raise ValueError("capture.topk_ratio must be in (0, 1]")
        if not 0.0 < self.topk_sample_ratio <= 1.0:
            raise ValueError("capture.topk_sample_ratio must be in (0, 1]")
        if self.topk_scope not in TOPK_SCOPES:
            raise ValueError(f"capture.topk_scope must be one of {TOPK_SCOPES}, got {self.topk_scope!r}")
        if self.topk_threshold not in TOPK_THRESHOLDS:
            raise ValueError(f"capture.topk_threshold must be one of {TOPK_THRESHOLDS}, got {self.topk_threshold!r}")
        if self.bucket_mb <= 0:
            raise ValueError("capture.bucket_mb must be positive")
        if self.topk_threshold == "global" and self.topk_scope != "bucket":
            raise ValueError("capture.topk_threshold=global needs capture.topk_scope=bucket")
        if self.pseudo not in PSEUDO_MODES:
            raise ValueError(f"capture.pseudo must be one of {PSEUDO_MODES}, got {self.pseudo!r}")
        if self.steps_per_shard < 1:
            raise ValueError("capture.steps_per_shard must be >= 1")


LEGACY_FIELDS = ("planner_topology", "gpus_per_node", "planner_steps")
"""Fields ``capture`` once had (copies of ``sync``'s that nothing read; removed). Configs stored by older runs
(``data/runs/<id>/config.json``, trace manifests) still hold them: loading drops them (``config.overrides``)."""
