"""A stand-in for the paper-scale workload generator (``zen_analysis.sparsity.paper_workloads``, not in this tree yet):
objects of the same shape as its ``PaperWorkload``, whose row sets are synthetic.

:func:`stand_in` returns, for the natural workloads the toolkit models at the paper's size (the LSTM and DeepFM of
:mod:`~zen_analysis.experiments.paper_compute`), the paper's inputs as data (Table 1's sizes and per-GPU density,
section 5.1's batches) and draws each GPU's rows with
:func:`~zen_analysis.sparsity.synthetic.synthetic_index_sets`: exactly the paper's per-GPU density, a power-law
(Zipf-like) crowding towards row 0 as a frequency-sorted vocabulary has (``skew``), and a share of every set drawn
from one pool common to all GPUs (``overlap``). The skew and overlap knobs are our choice, not fitted to the paper's
Fig. 2-3; the sets' measured overlap ratio, densification ratio and skewness ratio are what to report
(:func:`~zen_analysis.sparsity.synthetic.describe`). Nothing of the paper's results goes in.

:func:`zen_analysis.experiments.lab_check.lab_workload` is the one place that picks this stand-in or the generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zen_analysis import recipes
from zen_analysis.sparsity.synthetic import synthetic_index_sets


@dataclass(frozen=True)
class StandInWorkload:
    """The fields of ``PaperWorkload`` (the generator's), plus the two knobs the synthetic sets are drawn with."""

    name: str
    kind: str
    """``natural`` (an embedding's rows) or ``topk`` (elements, width 1)."""
    num_rows: int
    width: int
    scale: float
    """The paper's sparse-tensor elements / (num_rows x width) as generated: 1 here (full size)."""
    dense_params: float
    """Parameters summed densely beside the sparse tensor (the MLP, Table 1)."""
    samples_per_gpu: int
    tokens_per_gpu: int
    density: float
    """The paper's per-GPU density of the table's rows (Table 1): an input."""
    synthetic: str
    skew: float
    """:func:`~zen_analysis.sparsity.synthetic.synthetic_index_sets`' power-law exponent (0: uniform)."""
    overlap: float
    """The share of each GPU's set drawn from a pool common to all GPUs."""

    def row_sets(self, gpus: int, *, step: int = 0, seed: int = 0) -> list[torch.Tensor]:
        """``gpus`` sorted, distinct int64 row sets (one per GPU) for training step ``step``: each of
        ``round(density x num_rows)`` rows, drawn afresh per (step, seed)."""
        return synthetic_index_sets(
            self.num_rows, gpus, self.density, skew=self.skew, overlap=self.overlap, seed=seed * 1_000_003 + step
        )


_KNOBS = "synthetic rows (power law, skew {skew:g}, {overlap:.0%} of each set shared): our knobs, not fitted"

STAND_INS = {
    # AWD-LSTM on One Billion Word: 793,471 words x 512 (406M), 20M dense, 128 sequences per GPU of the seq_len the
    # toolkit's paper_compute times (recipes.lstm_words'); 1.13% of the rows per GPU
    "lstm": dict(
        kind="natural",
        num_rows=793_471,
        width=512,
        dense_params=20e6,
        samples_per_gpu=128,
        tokens_per_gpu=128 * recipes.lstm_words().train.seq_len,
        density=0.0113,
        skew=3.0,
        overlap=0.5,
    ),
    # DeepFM on Criteo: 12,588,235 rows x 17 (214M; paper_compute's split), 68M dense, 1,024 samples per GPU; 2.80%
    "deepfm": dict(
        kind="natural",
        num_rows=12_588_235,
        width=17,
        dense_params=68e6,
        samples_per_gpu=1024,
        tokens_per_gpu=1024,
        density=0.028,
        skew=2.0,
        overlap=0.5,
    ),
}
"""The stand-in's workloads: the paper's sizes, batches and densities (inputs), our skew and overlap knobs."""


def stand_in(name: str) -> StandInWorkload:
    """The stand-in workload ``name`` (one of :data:`STAND_INS`); an unknown name raises ``ValueError`` naming
    them (the LLMs' top-k workloads wait for the generator)."""
    if name not in STAND_INS:
        raise ValueError(
            f"the stand-in generator has {sorted(STAND_INS)}, not {name!r} (the paper-scale generator adds the rest)"
        )
    fields = STAND_INS[name]
    return StandInWorkload(name=name, scale=1.0, synthetic=_KNOBS.format(**fields), **fields)
