"""Synthetic index sets with a chosen density, skew and overlap, for sweeping schemes without a training run.

Positions are drawn from a power law over the tensor: ``floor(numel * u ** (1 + skew))`` with u uniform, so
``skew = 0`` is uniform and larger values crowd the non-zeros towards index 0, as a frequency-ordered
vocabulary crowds an embedding gradient into its first rows (the paper's C3). ``overlap`` is the fraction of
each set drawn from one shared pool (the same indices on every worker); the rest is private to the set, drawn
from the same distribution. Every set has exactly ``round(density * numel)`` distinct indices. The measured
density, overlap ratio, densification ratio and skewness ratio of the result are what to report: chance
collisions add overlap, and a strongly skewed distribution runs out of distinct head positions.
"""

from __future__ import annotations

import numpy as np
import torch

from zen_analysis.sparsity.metrics import densification_ratio, pairwise_overlap_ratios, skewness_ratio, union_of


def _draw(numel: int, k: int, skew: float, gen: torch.Generator, exclude: torch.Tensor | None = None) -> torch.Tensor:
    """k distinct indices in [0, numel) from the power law, none of them in ``exclude`` (sorted)."""
    taken = torch.zeros(numel, dtype=torch.bool)
    if exclude is not None and exclude.numel():
        taken[exclude] = True
    free = numel - int(taken.sum())
    if k > free:
        raise ValueError(f"cannot draw {k} distinct indices from the {free} left of {numel}")
    picked = torch.zeros(0, dtype=torch.long)
    for _ in range(64):
        need = k - picked.numel()
        if need == 0:
            break
        u = torch.rand(2 * need + 16, generator=gen, dtype=torch.float64)
        cand = torch.clamp((numel * u ** (1.0 + skew)).long(), max=numel - 1)
        cand = cand[~taken[cand]]
        cand = torch.unique(cand)
        cand = cand[torch.randperm(cand.numel(), generator=gen)[:need]]
        taken[cand] = True
        picked = torch.cat([picked, cand])
    if picked.numel() < k:  # the head is exhausted: take the rest uniformly from what is left
        rest = torch.nonzero(~taken, as_tuple=True)[0]
        picked = torch.cat([picked, rest[torch.randperm(rest.numel(), generator=gen)[: k - picked.numel()]]])
    return torch.sort(picked).values


def synthetic_index_sets(
    numel: int, num_sets: int, density: float, *, skew: float = 0.0, overlap: float = 0.0, seed: int = 0
) -> list[torch.Tensor]:
    """``num_sets`` sorted int64 index sets over [0, numel), each of ``round(density * numel)`` indices."""
    if numel < 1 or num_sets < 1:
        raise ValueError("numel and num_sets must be positive")
    if not 0.0 <= density <= 1.0 or not 0.0 <= overlap <= 1.0 or skew < 0:
        raise ValueError(f"need 0 <= density <= 1, 0 <= overlap <= 1 and skew >= 0; got {density}, {overlap}, {skew}")
    gen = torch.Generator().manual_seed(seed)
    k = round(density * numel)
    shared = _draw(numel, round(overlap * k), skew, gen)
    return [
        torch.sort(torch.cat([shared, _draw(numel, k - shared.numel(), skew, gen, shared)])).values
        for _ in range(num_sets)
    ]


def describe(index_sets: list[torch.Tensor], numel: int, *, num_partitions: int = 8) -> dict:
    """The measured characteristics of index sets: what a synthetic sweep should report next to its knobs."""

    sizes = [s.numel() for s in index_sets]
    union = union_of(index_sets, numel)
    pair = pairwise_overlap_ratios(index_sets) if len(index_sets) > 1 else np.array([np.nan])
    return {
        "density": float(np.mean(sizes)) / numel,
        "overlap_ratio": float(np.nanmean(pair)) if np.isfinite(pair).any() else float("nan"),
        "gamma": densification_ratio(index_sets),
        "skewness_ratio": skewness_ratio(union, numel, num_partitions),
        "union_density": union.numel() / numel,
    }
