"""DDP-style gradient buckets: which parameters PyTorch DDP would fuse into one flat buffer, and in what order.

Context: the Zen paper sparsifies *buckets*, not tensors: gradients are fused into 128 MB DDP buckets before DGC
keeps the top 5% of each (digest section 4.8). DDP (``torch.nn.parallel.DistributedDataParallel``) assigns
parameters to buckets in reverse registration order (the order gradients become ready in backward), never splits
a parameter, and closes a bucket once it holds at least the cap; so a bucket is a run of consecutive parameters,
and a parameter larger than the cap (an embedding table) gets a bucket of its own.

Scale: Llama 3.2-3B's decoder layer holds about 100M parameters (400 MB of FP32 gradient), so a 128 MB bucket is
about a third of a layer, two or three weight matrices; the 1.5 GB embedding is a bucket alone. The toolkit's
default Llama (2 layers x 256) has 0.8M parameters (3.2 MB) per layer, so the same fraction of a layer is about
1 MB: ``capture.bucket_mb = 1`` (DDP's own first bucket is capped at 1 MB too). Differences kept on purpose:
DDP's first-bucket special case and its rebuild of buckets in the order gradients arrived in the first iteration
are left out (with one dtype and no unused parameters the rebuilt order is this one).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class Bucket:
    """One fused gradient buffer: ``parts`` are (parameter name, start, end) ranges of the flat bucket, in order."""

    name: str
    parts: tuple[tuple[str, int, int], ...]

    @property
    def numel(self) -> int:
        return self.parts[-1][2] if self.parts else 0

    def to_json(self) -> list[list]:
        return [[n, s, e] for n, s, e in self.parts]


def bucket_parameters(named: list[tuple[str, nn.Parameter]], bucket_mb: float) -> list[list[tuple[str, nn.Parameter]]]:
    """``named`` (``(name, parameter)`` in registration order) grouped into DDP's buckets of ``bucket_mb`` MiB:
    reverse registration order, a bucket closing once it holds at least the cap. The first bucket holds the
    last-registered parameters, whose gradients backward produces first."""
    if bucket_mb <= 0:
        raise ValueError("bucket_mb must be positive")
    cap = int(bucket_mb * 2**20)
    groups: list[list[tuple[str, nn.Parameter]]] = []
    current: list[tuple[str, nn.Parameter]] = []
    size = 0
    for name, p in named[::-1]:
        current.append((name, p))
        size += p.numel() * p.element_size()
        if size >= cap:
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)
    return groups


def ddp_buckets(model: nn.Module, bucket_mb: float) -> list[Bucket]:
    """The model's trainable parameters in DDP's buckets of ``bucket_mb`` MiB (:func:`bucket_parameters`). Names
    are ``bucket00``, ``bucket01``, ... in that order, so ``bucket00`` holds the last-registered parameters (the LM
    head side)."""
    groups = bucket_parameters([(n, p) for n, p in model.named_parameters() if p.requires_grad], bucket_mb)
    width = max(2, len(str(len(groups) - 1)))
    buckets = []
    for i, group in enumerate(groups):
        parts, at = [], 0
        for name, p in group:
            parts.append((name, at, at + p.numel()))
            at += p.numel()
        buckets.append(Bucket(f"bucket{i:0{width}d}", tuple(parts)))
    return buckets


def describe(parts: list | tuple) -> str:
    """A short label of a bucket's parameter ranges for figures: the first and last parameter names."""
    names = [p[0] for p in parts]
    if not names:
        return "(empty)"
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]} ({len(names)} tensors)"
