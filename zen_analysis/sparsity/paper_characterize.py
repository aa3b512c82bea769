"""The generated paper workloads characterized as the paper's section 2.1 does, beside what the paper states.

Context (Wang et al., OSDI'25, Fig. 2-3 and section 5.3): C1, the overlap ratio of two GPUs' sets is roughly normal
and spread wide; C2, the densification ratio gamma grows with the GPUs but stays below their number; C3, more than
60% of the non-zeros sit in the first of 8 contiguous partitions in all six models, and the LSTM's skewness ratio is
over 70 at 128 partitions; DeepFM's table is 5.2% dense once 8 GPUs are summed. :func:`characterize_paper_workloads`
measures the same statistics on :mod:`~zen_analysis.sparsity.paper_workloads`' sets and writes the statement beside
each. These are comparisons: no generator is tuned to them (their inputs are the paper's sizes, batches and
densities and the laws fitted on the toolkit's captures), so a row where ``agrees`` is False is a finding.

:func:`deepfm_readings` is the arithmetic behind the DeepFM generator's choice of rows: Table 1's 2.80% under each
common reading of "DeepFM on Criteo, 214M embedding parameters, 1,024 samples per GPU".

Shape suffixes: G GPUs (one row set each), P partitions of the table's rows, F embedding fields (one cardinality each).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from zen_analysis.config import DataConfig
from zen_analysis.sparsity.metrics import densification_curve, pairwise_overlap_ratios, partition_shares, union_of
from zen_analysis.sparsity.paper_workloads import PAPER_INPUTS, PAPER_WORKLOADS, PaperWorkload, paper_workload
from zen_analysis.sparsity.workload_fit import inclusion, zipf_probs
from zen_analysis.workload.ctr import CRITEO_KAGGLE_CARDINALITIES, field_cardinalities

PARTITIONS = (2, 4, 8, 16, 32, 64, 128)
C1 = "C1 (Fig. 2a): roughly normal, spread over a wide range"
C1_LEVEL = "section 2.3: practical overlap ratios are much higher than 0.05"
C2 = "C2 (Fig. 2b): gamma grows with n and stays below n"
C3 = "C3 (Fig. 3a): more than 60% of non-zeros in the first of 8 partitions, all six models"
C3_LSTM = "C3 (Fig. 3b): the LSTM's skewness ratio is over 70 at 128 partitions"
DEEPFM_8 = "section 5.3: DeepFM's table is 5.2% dense after aggregating 8 GPUs"
CRITEO_SAMPLES = 45_840_617
"""Samples in Criteo Kaggle's training set (the count :data:`~zen_analysis.workload.ctr.CRITEO_KAGGLE_CARDINALITIES`
were taken over)."""


def _row(workload: str, statistic: str, n: int | None, value: float, paper: str = "", agrees=None) -> dict:
    return {"workload": workload, "statistic": statistic, "n": n, "value": value, "paper": paper, "agrees": agrees}


def _one(w: PaperWorkload, gpus: int, step: int, seed: int, partitions: Sequence[int]) -> list[dict]:
    """The rows of one workload: density, C1's overlap distribution, C2's gamma per n, C3's shares and skewness."""
    sets = w.row_sets(gpus, step=step, seed=seed)
    R, name = w.num_rows, w.name
    rows = [
        _row(name, "density", 1, float(np.mean([s.numel() for s in sets])) / R, f"input: {w.density:.4g}",
             bool(abs(np.mean([s.numel() for s in sets]) / R / w.density - 1) <= 0.1)),
    ]  # fmt: skip
    if gpus > 1:
        pair = pairwise_overlap_ratios(sets)
        rows += [
            _row(name, "overlap_mean", 2, float(np.nanmean(pair)), C1_LEVEL, bool(np.nanmean(pair) > 0.05)),
            _row(name, "overlap_std", 2, float(np.nanstd(pair)), C1),
            _row(name, "overlap_p10", 2, float(np.nanpercentile(pair, 10)), C1),
            _row(name, "overlap_p90", 2, float(np.nanpercentile(pair, 90)), C1),
        ]
    ns = [n for n in (2**k for k in range(1, 31)) if n < gpus] + [gpus]
    prev = 1.0
    for n, gamma in zip(ns, densification_curve(sets, ns, R)):
        rows.append(_row(name, "gamma", n, gamma, C2, bool(prev <= gamma < n) if n > 1 else None))
        prev = gamma
    if gpus >= 8:
        union = union_of(sets[:8], R).numel() / R
        rows.append(_row(name, "union_density", 8, union, DEEPFM_8 if name == "deepfm" else ""))
    union = union_of(sets, R)
    for p in partitions:
        shares_GP = np.stack([partition_shares(s, R, p) for s in sets])
        union_P = partition_shares(union, R, p)
        if p == 8:
            rows.append(_row(name, "share0", 8, float(shares_GP[:, 0].mean()), C3, bool(shares_GP[:, 0].mean() > 0.6)))
            rows.append(_row(name, "share0_union", gpus, float(union_P[0]), C3, bool(union_P[0] > 0.6)))
        lstm = name == "lstm" and p == 128
        skew = float(p * shares_GP.max(axis=1).mean())
        rows.append(_row(name, "skewness", p, skew, C3_LSTM if lstm else "", bool(skew > 70) if lstm else None))
        rows.append(_row(name, "skewness_union", p, float(p * union_P.max())))
    return rows


def characterize_paper_workloads(
    gpus: int = 128,
    *,
    workloads: Sequence[str | PaperWorkload] = PAPER_WORKLOADS,
    step: int = 0,
    seed: int = 0,
    partitions: Sequence[int] = PARTITIONS,
) -> pd.DataFrame:
    """One row per workload, statistic and ``n`` (GPUs for overlap and gamma, partitions for skewness), with the
    paper's statement beside it where there is one and ``agrees`` where the statement is an inequality.

    Statistics: ``density`` (mean per GPU; the paper's is an input), ``overlap_mean`` / ``_std`` / ``_p10`` / ``_p90``
    (all pairs of the ``gpus`` sets), ``gamma`` (the first n GPUs, n = 2, 4, ..., ``gpus``), ``union_density`` (8
    GPUs summed), ``share0`` (mean per GPU, 8 partitions) and ``share0_union`` (all GPUs summed), ``skewness`` (mean
    per GPU) and ``skewness_union`` per partition count. The LLMs' sets are one TP shard's, generated at 2^22
    elements: their statistics are those of the generated space. ``workloads`` takes names or built workloads
    (``paper_workload(name, **options)``)."""
    built = [paper_workload(w) if isinstance(w, str) else w for w in workloads]
    return pd.DataFrame(
        [r for w in built for r in _one(w, gpus, step, seed, partitions)],
        columns=["workload", "statistic", "n", "value", "paper", "agrees"],
    )


def _fields_density(cards_F: Sequence[int], exponent: float, samples: int) -> float:
    rows = sum(float(inclusion(zipf_probs(int(c), exponent), samples).sum()) for c in cards_F)
    return rows / float(sum(cards_F))


def _kaggle_densities(min_count: int, exponent: float, samples: int) -> tuple[float, int, float]:
    """(density with every Kaggle id a row; rows and density when each field keeps a row for the ids expected
    ``min_count`` times in Criteo's samples and maps the rest to one out-of-vocabulary row, Criteo_x4_001's
    rare-feature filter under the law)."""
    full = rows = filtered = 0.0
    for card in CRITEO_KAGGLE_CARDINALITIES:
        q = zipf_probs(card, exponent)
        full += float(inclusion(q, samples).sum())
        kept = int((q * CRITEO_SAMPLES >= min_count).sum())
        q = torch.cat([q[:kept], q[kept:].sum().view(1)]) if kept < card else q
        rows += q.numel()
        filtered += float(inclusion(q, samples).sum())
    return full / sum(CRITEO_KAGGLE_CARDINALITIES), int(rows), filtered / rows


def deepfm_readings(*, exponent: float = DataConfig().ctr_zipf) -> pd.DataFrame:
    """Table 1's DeepFM (214M embedding elements, 2.80% per GPU at 1,024 samples of 26 fields) under each reading of
    its rows: ``rows``, the ``width`` that makes 214M, and the expected per-GPU density with the per-field Zipf law
    of ``exponent`` (``zipf``) and if no id repeated (``no_repeats``: 26,624 rows at most)."""
    sparse, samples = PAPER_INPUTS["deepfm"]["sparse"], PAPER_INPUTS["deepfm"]["samples"]
    lookups = samples * len(CRITEO_KAGGLE_CARDINALITIES)
    kaggle = sum(CRITEO_KAGGLE_CARDINALITIES)
    kaggle_density, mc_rows, mc_density = _kaggle_densities(10, exponent, samples)
    paper = paper_workload("deepfm", exponent=exponent)
    readings = [
        ("Criteo Kaggle's ids, a row each", kaggle, kaggle_density),
        ("width 16 (Criteo_x4_001's embedding size)", round(sparse / 16), None),
        ("min-count 10 (Criteo_x4_001's filter), one OOV row per field", mc_rows, mc_density),
        ("the most rows 2.80% allows, no id repeated", round(lookups / PAPER_INPUTS["deepfm"]["density"]), None),
        ("Table 1's 2.80% under the law (the generator's reading)", paper.num_rows, paper.expected_density()),
    ]
    out = []
    for reading, rows, density in readings:
        if density is None:
            density = _fields_density(field_cardinalities(rows), exponent, samples)
        out.append(
            {"reading": reading, "rows": rows, "width": sparse / rows, "density_zipf": density,
             "density_no_repeats": min(1.0, lookups / rows)}
        )  # fmt: skip
    return pd.DataFrame(out)
