"""Stand-in workloads with the shape of :mod:`zen_analysis.sparsity.paper_workloads` (issue 58, part 1), for
:mod:`~zen_analysis.experiments.paper_figures` until that generator lands: the paper's table sizes, batches and
per-GPU densities (its INPUTS: Table 1, section 5.1), with index laws chosen here, not fitted on anything.

* Natural workloads (``lstm``, ``deepfm``, ``nmt``): row r of the table has Zipf(1) probability p_r = 1 / ((r + 1)
  H_R) per token (a frequency-sorted vocabulary, Zipf's law of word frequencies); a GPU's batch is T independent
  tokens, T chosen so that the expected share of rows touched, sum_r 1 - (1 - p_r)^T over R, equals Table 1's
  density; each row is then in a GPU's set independently with that chance. GPUs share nothing but the law (no
  common topic or step-to-step drift), so their overlap is the Zipf head's alone.
* LLMs (``opt``, ``llama``, ``gemma2``): DGC top-5% sets drawn uniformly and independently per rank over
  :data:`TOPK_ELEMENTS` elements (no skew, overlap by chance alone), ``scale`` carrying them to the paper's parameter
  count. Uniform 5% sets touch almost every 256-element block (1 - 0.95^256), so OmniReduce moves nearly the dense
  gradient here, and their union grows as fast as independent sets can.

The geometries the paper does not state are this module's choices: DeepFM's 214M elements as 12,588,235 rows x 17
(:data:`~zen_analysis.experiments.paper_compute.SHAPES`' 16-dim fields plus the FM column) under one Zipf law (no
per-field structure, and a density 1,024 samples x 26 fields could not reach: the law meets Table 1's all the same);
NMT's 112M as 112,000 rows x 1,000 (Luong et al.'s embedding width; source and target vocabularies not told apart).
Each workload's ``synthetic`` line says which parts are stand-ins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from zen_analysis.experiments.paper_scale import PAPER_SIZE
from zen_analysis.sparsity.synthetic import synthetic_index_sets

PAPER_WORKLOADS = ("lstm", "deepfm", "nmt", "opt", "llama", "gemma2")
TOPK_ELEMENTS = 1 << 22
"""Elements an LLM's top-k sets are drawn over (``scale`` = the paper's parameters / this)."""
TOPK_DENSITY = 0.05
"""DGC's top 5% (section 5.1)."""

# name: (rows, width, dense parameters, samples per GPU, Table 1's per-GPU density); paper Table 1 and section 5.1
_NATURAL = {
    "lstm": (793_471, 512, 20e6, 128, 0.0113),
    "deepfm": (12_588_235, 17, 68e6, 1024, 0.0280),
    "nmt": (112_000, 1000, 31e6, 64, 0.0247),
}


@lru_cache(maxsize=8)
def _zipf_tokens(num_rows: int, density: float) -> tuple[torch.Tensor, float]:
    """(log(1 - p_R), T): the Zipf(1) row law's log miss chances per token and the tokens T per GPU whose expected
    share of rows touched is ``density`` (bisection on log T)."""
    p_R = 1.0 / torch.arange(1, num_rows + 1, dtype=torch.float64)
    p_R /= p_R.sum()
    log_miss_R = torch.log1p(-p_R)
    lo, hi = 0.0, math.log(num_rows * 1e3)
    for _ in range(60):
        mid = (lo + hi) / 2
        touched = float((-torch.expm1(math.exp(mid) * log_miss_R)).mean())
        lo, hi = (mid, hi) if touched < density else (lo, mid)
    return log_miss_R, math.exp((lo + hi) / 2)


@dataclass(frozen=True)
class StandInWorkload:
    """A paper workload's stand-in, field for field the shape of the generator's ``PaperWorkload``."""

    name: str
    kind: str
    num_rows: int
    width: int
    scale: float
    dense_params: float
    samples_per_gpu: int
    tokens_per_gpu: int
    density: float
    synthetic: str

    def row_sets(self, gpus: int, *, step: int = 0, seed: int = 0) -> list[torch.Tensor]:
        """``gpus`` sorted, distinct int64 row sets (one per GPU) for training step ``step``: GPUs exchangeable, so
        the first k of n sets are distributed as k sets."""
        mixed = seed * 1_000_003 + step
        if self.kind == "topk":
            return synthetic_index_sets(self.num_rows, gpus, self.density, seed=mixed)
        log_miss_R, tokens = _zipf_tokens(self.num_rows, self.density)
        hit_R = (-torch.expm1(tokens * log_miss_R)).float()
        gen = torch.Generator().manual_seed(mixed)
        return [torch.nonzero(torch.rand(self.num_rows, generator=gen) < hit_R).view(-1) for _ in range(gpus)]


def paper_workload(name: str, *, elements: int = TOPK_ELEMENTS) -> StandInWorkload:
    """The stand-in for ``name`` (:data:`PAPER_WORKLOADS`); LLM sets are drawn over ``elements`` elements."""
    if name in _NATURAL:
        rows, width, dense, samples, density = _NATURAL[name]
        tokens = round(_zipf_tokens(rows, density)[1])
        line = (
            f"stand-in: {rows:,} rows x {width} (Table 1's size), each row touched with the chance {tokens:,} Zipf(1) "
            f"tokens per GPU touch it (Table 1's {density:.2%} density); GPUs independent"
        )
        return StandInWorkload(name, "natural", rows, width, 1.0, dense, samples, tokens, density, line)
    if name in PAPER_WORKLOADS:
        params = PAPER_SIZE[name]["dense"]
        line = (
            f"stand-in: DGC top-{TOPK_DENSITY:.0%} sets uniform and independent per rank over {elements:,} elements, "
            f"scaled to the paper's {params / 1e9:g}B parameters"
        )
        return StandInWorkload(name, "topk", elements, 1, params / elements, 0.0, 1, 1024, TOPK_DENSITY, line)
    raise ValueError(f"unknown paper workload {name!r}; choose from {PAPER_WORKLOADS}")
