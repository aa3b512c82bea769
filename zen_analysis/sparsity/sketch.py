"""Live sparsity statistics at a few KB: a consistent sample of a tensor's index space, every rank the same units.

The planner (:mod:`zen_analysis.comm.planner`) prices every scheme on the ranks' index sets; gathering those sets
costs what a sparse all-gather costs. Instead each rank samples its non-zero pattern at the same positions: the index
space (elements, or rows of a table) is cut into ``size`` groups of about ``stride`` units, one unit is drawn per
group (the same on every rank: the draw depends on the round only), and a rank's sketch is one bit per group, set when
its sampled unit is non-zero — a fixed-size bitmap (``units`` bits, 8 KiB by default), all-gathered in one call.

Because the sample is the same on every rank, what makes the schemes differ survives it: a unit non-zero on several
ranks is one bit set on each of them, so unions, overlaps and the densification ratio of any subset of ranks are
those of the sampled units; per-partition skew (contiguous or hashed partitions) is kept since the groups are in
index order. The sampled bits form a compact index space of ``size`` units, on which any scheme's byte model runs
unchanged; its payload then scales by ``scale`` (= units / size), its calls and counts do not
(:meth:`~zen_analysis.pricing.traffic.Traffic.scaled`). OmniReduce sends blocks: by elements a second sample, of blocks
(a bit per sampled block: any non-zero in it), keeps its block structure, which single elements would not.

Error: a sampled quantity of true share p has relative standard error about sqrt((1 - p) / (p x size)); at 65,536
units and 1% density, 4%. ``tests/unit/test_sketch.py`` checks every scheme's modelled time from the sketch against
the one from the full sets.

Shape suffixes: K non-zero units of one rank, N elements of the flat tensor, W ranks (one sketch each).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SAMPLE_UNITS = 1 << 16
"""Units sampled per tensor by default: an 8 KiB bitmap per rank."""
BLOCK_UNITS = 1 << 12
"""Blocks sampled by elements (OmniReduce's structure): 512 bytes; each sampled block is read whole."""


@dataclass(frozen=True)
class Layout:
    """Which units of an index space of ``numel`` units are sampled in round ``round``: group ``g`` holds units
    ``[ceil(g * numel / size), ceil((g + 1) * numel / size))`` (those ``u`` with ``u * size // numel == g``) and
    ``positions[g]`` is the one drawn from it."""

    numel: int
    size: int
    round: int
    positions: torch.Tensor

    @property
    def scale(self) -> float:
        """Units each sampled unit stands for."""
        return self.numel / self.size if self.size else 1.0

    def groups_of(self, units: torch.Tensor) -> torch.Tensor:
        """The group of each unit (an int64 tensor of unit indices)."""
        return torch.div(units * self.size, self.numel, rounding_mode="floor") if self.numel else units


def layout(numel: int, round: int, *, units: int = SAMPLE_UNITS) -> Layout:
    """The sample of ``numel`` units for ``round`` (every rank computes the same: a generator seeded by the round);
    ``numel`` <= ``units`` samples every unit."""
    if numel < 0 or units < 1:
        raise ValueError(f"a sketch needs numel >= 0 and units >= 1, got {numel} and {units}")
    size = min(numel, units)
    if size == numel:
        return Layout(numel, size, round, torch.arange(numel, dtype=torch.int64))
    start = -torch.div(-torch.arange(size + 1, dtype=torch.int64) * numel, size, rounding_mode="floor")  # ceil
    width = start[1:] - start[:-1]
    gen = torch.Generator().manual_seed(0x5EED_0000 + int(round))
    draw = torch.rand(size, generator=gen, dtype=torch.float64)
    return Layout(numel, size, round, start[:-1] + (draw * width).long().clamp(max=width - 1))


def sample_indices(idx_K: torch.Tensor, lay: Layout) -> torch.Tensor:
    """The sketch's bits (bool, ``lay.size``) of a rank whose non-zero units are ``idx_K`` (any order; repeats
    allowed): bit g is set when the unit drawn from group g is among them."""
    bits = torch.zeros(lay.size, dtype=torch.bool)
    if idx_K.numel() == 0 or lay.size == 0:
        return bits
    idx = idx_K.reshape(-1).long().cpu()
    g = lay.groups_of(idx)
    hit = lay.positions[g] == idx
    bits[g[hit]] = True
    return bits


def sample_dense(x: torch.Tensor, lay: Layout) -> torch.Tensor:
    """The bits of a dense tensor: ``x`` flat (units are elements) or 2-D (units are rows; a row is non-zero when
    any of its values is). Reads ``lay.size`` units, not the tensor."""
    if x.dim() == 2:
        picked = x.detach()[lay.positions.to(x.device)]
        return picked.ne(0).any(1).cpu()
    return x.detach().reshape(-1)[lay.positions.to(x.device)].ne(0).cpu()


def sample_blocks(x_N: torch.Tensor, lay: Layout, block: int) -> torch.Tensor:
    """The bits of a flat dense tensor's blocks of ``block`` elements (``lay`` samples blocks): set when any element
    of the sampled block is non-zero. Reads ``lay.size`` x ``block`` elements."""
    flat = x_N.detach().reshape(-1)
    if lay.size == 0:
        return torch.zeros(0, dtype=torch.bool)
    offs = lay.positions.to(flat.device)[:, None] * block + torch.arange(block, device=flat.device)
    inside = offs < flat.numel()
    vals = flat[offs.clamp(max=max(flat.numel() - 1, 0))]
    return (vals.ne(0) & inside).any(1).cpu()


def pack(bits: torch.Tensor) -> torch.Tensor:
    """Bits (bool) as bytes (uint8, little end first), zero-padded to a whole byte."""
    n = bits.numel()
    padded = torch.zeros(-(-n // 8) * 8, dtype=torch.uint8)
    padded[:n] = bits.to(torch.uint8)
    weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)
    return (padded.view(-1, 8) * weights).sum(1, dtype=torch.uint8)


def unpack(packed: torch.Tensor, n: int) -> torch.Tensor:
    """Inverse of :func:`pack`: the first ``n`` bits."""
    shifts = torch.arange(8, dtype=torch.uint8)
    return ((packed.reshape(-1, 1) >> shifts) & 1).reshape(-1)[:n].bool()


def compact_sets(bits_W: list[torch.Tensor]) -> list[torch.Tensor]:
    """Every rank's sketch as an index set of the compact space (sorted int64 positions of its set bits)."""
    return [torch.nonzero(b, as_tuple=True)[0] for b in bits_W]


def union_count(bits_W: list[torch.Tensor]) -> int:
    """Sampled units non-zero on at least one rank."""
    return int(torch.stack(bits_W).any(0).sum()) if bits_W else 0


def estimates(bits_W: list[torch.Tensor], lay: Layout) -> dict:
    """What a person reads off the sketches: each rank's density, the union's, and the densification ratio at
    n = 1, 2, 4, ... (the union of the first n ranks over their mean non-zeros)."""
    if not bits_W or lay.size == 0:
        return {"density": 0.0, "union_density": 0.0, "gamma": {}}
    counts = [int(b.sum()) for b in bits_W]
    gamma = {}
    n = 1
    while n <= len(bits_W):
        union = torch.stack(bits_W[:n]).any(0).sum().item()
        mean = sum(counts[:n]) / n
        gamma[n] = union / mean if mean else float("nan")
        n *= 2
    union_all = torch.stack(bits_W).any(0).sum().item()
    return {
        "density": sum(counts) / len(counts) / lay.size,
        "union_density": union_all / lay.size,
        "gamma": gamma,
    }
