"""Where a run's numbers come from: the package versions and git commit its trace manifest records, the parameter
digest its summary records (equal digests: bit-identical replicas), and the final parameters gathered whole where
the ranks hold shards of them (FSDP2), as the digest, ``params.pt`` and the export read them."""

from __future__ import annotations

import hashlib
import platform
import subprocess
from importlib import metadata

import torch
from torch.distributed.tensor import DTensor

from zen_analysis import paths


def git_commit() -> str:
    """The repository's HEAD commit, or ``unknown`` (no git, not a checkout)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(paths.REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("zen_analysis", "torch", "transformers", "tokenizers", "datasets", "pyarrow", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def parameter_digest(model: torch.nn.Module, full: dict[str, torch.Tensor] | None = None) -> str:
    """sha256 over every parameter's bytes: equal digests mean bit-identical replicas. ``full``: the values by name
    where the model's own are shards (FSDP2: its gathered state dict, tables in the original row order)."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        value = full[name] if full is not None else p
        h.update(value.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether the ranks hold shards of the model's parameters (DTensors: FSDP2's ``fully_shard``) rather than
    replicas: its checkpoints then go through ``torch.distributed.checkpoint``, and its final parameters are gathered
    (:func:`full_state_dict`) before rank 0 writes them."""
    return any(isinstance(p, DTensor) for p in model.parameters())


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict, every sharded tensor gathered whole, on the CPU, hashed tables in the original row
    order (a collective: every rank calls it and gets the same)."""
    out = {}
    for name, value in model.state_dict().items():
        if isinstance(value, DTensor):
            value = value.full_tensor()
        out[name] = value.detach().cpu()
    return out
