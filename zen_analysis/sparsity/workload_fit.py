"""Fitting the paper workloads' generators (:mod:`zen_analysis.sparsity.paper_workloads`) on captured index sets.

Context: the Zen paper (Wang et al., OSDI'25, section 2.1) characterizes six workloads we cannot run at their size.
Their generators draw every GPU's index set from two small laws, and this module fits the laws on what the toolkit
captures, so that only the paper's inputs (sizes, batches, densities) are taken from the paper:

* **An embedding's rows** (LSTM, NMT, DeepFM): each GPU draws ``draws`` ids independently from a Zipf law of
  ``exponent`` over the vocabulary (id 0 the most frequent, as a frequency-ordered vocabulary is); its row set is
  the distinct ids. Two numbers fix the law at a capture's vocabulary: the mean rows per worker and the mean
  overlap ratio of two workers (a steeper law puts more of a set in the shared head). Real text repeats its words
  (a file's identifiers, a document's topic), so ``draws`` comes out below the tokens a worker saw: the ratio is
  the capture's burstiness, and only the law and the draws are carried to the paper's vocabulary. The densification
  ratio and the first-partition share are not fitted: they check the law (:func:`zipf_statistics`).
* **DGC top-k sets** (the LLMs), one part per kind of bucket (:func:`tensor_kind`: the decoder layers', the
  embeddings' and LM head's, whose sets overlap far more): ``blocks`` contiguous blocks, each selected at its own
  rate (the skew: the kind's buckets' rate profile, positions taken relative to each bucket), and a rank-to-rank
  correlation ``rho`` of a Gaussian score: rank r keeps element e when ``sqrt(rho) z_e + sqrt(1 - rho) eps_re``
  exceeds its block's threshold, ``z`` shared by all ranks (the elements whose gradients are large everywhere),
  ``eps`` a rank's own. ``rho`` is fitted to the kind's overlap ratio; each block's rate is its mean. Gamma and
  the first-partition share check the part (the embedding part's gamma comes out low: a captured embedding bucket
  holds the LM head and the token table, whose union grows faster than one correlation gives).

Statistics are expectations (:func:`zipf_statistics`, :func:`topk_overlap`): the overlap ratio as E|I_1 ∩ I_2| /
E|I| (the metric divides by the smaller set, which a few per cent more), gamma as E|∪ I_i| / E|I|.

Shape suffixes: R rows of the table (one id's probability each), B blocks of a tensor (one rate each; ``bounds_B1``
holds one more bound), Z points of the quadrature over the shared normal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from zen_analysis.capture.reader import TraceReader
from zen_analysis.sparsity.metrics import (
    densification_ratio,
    pairwise_overlap_ratios,
    partition_of,
    partition_shares,
    rows_of,
    union_of,
)

# Shapes: R rows (or elements) of the index space, B blocks of the top-k profile, Z quadrature points.


@dataclass(frozen=True)
class SetStatistics:
    """What a run's (or a generator's) index sets show, averaged over steps: the numbers a fit matches or checks."""

    num_rows: int
    """Size of the index space (an embedding's rows; a top-k tensor's elements)."""
    workers: int
    steps: int
    rows: float
    """Mean distinct rows (elements) per worker and step."""
    overlap: float
    """Mean pairwise overlap ratio (paper Def. 3)."""
    gamma: float
    """Densification ratio of all ``workers`` at a step (Def. 4)."""
    share0: float
    """Mean per-worker share of the non-zeros in the first of 8 contiguous partitions (Fig. 3a)."""

    @property
    def density(self) -> float:
        return self.rows / self.num_rows


def set_statistics(steps: Sequence[Sequence[torch.Tensor]], num_rows: int) -> SetStatistics:
    """:class:`SetStatistics` of index sets given per step (``steps[t][w]``: worker w's set at step t)."""
    rows, overlap, gamma, share0 = [], [], [], []
    for sets in steps:
        rows += [s.numel() for s in sets]
        overlap.append(float(np.nanmean(pairwise_overlap_ratios(sets))) if len(sets) > 1 else np.nan)
        gamma.append(densification_ratio(sets))
        share0 += [partition_shares(s, num_rows, 8)[0] for s in sets]
    return SetStatistics(
        num_rows=num_rows,
        workers=len(steps[0]),
        steps=len(steps),
        rows=float(np.mean(rows)),
        overlap=float(np.nanmean(overlap)),
        gamma=float(np.nanmean(gamma)),
        share0=float(np.nanmean(share0)),
    )


# ---- Zipf law of an embedding's rows


@dataclass(frozen=True)
class ZipfFit:
    """A Zipf law fitted on a capture: ``draws`` independent ids per worker from p_k ∝ (k + 1) ** -exponent over
    ``num_rows`` ids reproduce the capture's mean rows per worker and mean overlap ratio (``fitted_on``)."""

    exponent: float
    draws: float
    num_rows: int
    tokens: int
    """Tokens per worker and step in the capture: ``tokens / draws`` is its burstiness (repeated words)."""
    fitted_on: SetStatistics


def zipf_probs(num_rows: int, exponent: float) -> torch.Tensor:
    """(R,) float64 probabilities of ids 0..R-1 under p_k ∝ (k + 1) ** -exponent."""
    q_R = torch.arange(1, num_rows + 1, dtype=torch.float64) ** -exponent
    return q_R / q_R.sum()


def inclusion(q_R: torch.Tensor, draws: float) -> torch.Tensor:
    """(R,) probability that ``draws`` independent ids from ``q_R`` include each id: 1 - (1 - q) ** draws."""
    return -torch.expm1(draws * _log_miss(q_R))


def _log_miss(q_R: torch.Tensor) -> torch.Tensor:
    """(R,) log(1 - q): one draw's log-probability of missing each id."""
    return torch.log1p(-q_R.clamp(max=1 - 1e-16))


def rows_function(q_R: torch.Tensor):
    """draws -> expected distinct ids of that many draws from ``q_R`` (log(1 - q) computed once, for solving)."""
    miss_R = _log_miss(q_R)
    return lambda draws: float(-torch.expm1(draws * miss_R).sum())


def draws_for_rows(q_R: torch.Tensor, rows: float) -> float:
    """The draws from ``q_R`` whose expected distinct ids are ``rows``, by Newton's method: rows(T) is increasing
    and concave and rows(T) <= T, so from T = rows every step stays below the root and climbs to it."""
    if not 0 < rows < q_R.numel():
        raise ValueError(f"rows must lie in (0, {q_R.numel()}), got {rows}")
    miss_R = _log_miss(q_R)
    draws = rows
    for _ in range(200):
        kept_R = torch.exp(draws * miss_R)  # P(an id is missed by all draws)
        gap = rows - float((1 - kept_R).sum())
        if gap <= rows * 1e-12:
            break
        draws += gap / float(-(kept_R * miss_R).sum())
    return draws


def solve_draws(expected_rows, target: float, *, hi: float = 1e12) -> float:
    """The draws at which the increasing function ``expected_rows(draws)`` equals ``target`` (geometric bisection)."""
    lo = 1e-3
    if expected_rows(hi) < target:
        raise ValueError(f"{target:.4g} rows are out of reach: {hi:.3g} draws give {expected_rows(hi):.4g}")
    for _ in range(60):  # (hi / lo) ** (2 ** -60): a relative error below 1e-16
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if expected_rows(mid) < target else (lo, mid)
    return (lo * hi) ** 0.5


def zipf_statistics(num_rows: int, exponent: float, draws: float, *, workers: int) -> dict:
    """Expected rows per worker, overlap ratio, gamma of ``workers`` and first-of-8 share under the law."""
    q_R = zipf_probs(num_rows, exponent)
    p_R = inclusion(q_R, draws)
    rows = float(p_R.sum())
    return {
        "rows": rows,
        "overlap": float((p_R**2).sum()) / rows,
        "gamma": float(inclusion(q_R, workers * draws).sum()) / rows,
        "share0": float(p_R[: num_rows // 8].sum()) / rows,  # partition 0 = [0, R // 8), partition_of's split
    }


def fit_zipf(stats: SetStatistics, *, tokens: int) -> ZipfFit:
    """The Zipf law whose independent draws give ``stats``' mean rows per worker and mean overlap ratio: the
    overlap grows with the exponent at fixed rows, so bisect the exponent, solving the draws for the rows at each."""
    R = stats.num_rows

    def law(exponent: float) -> tuple[float, float]:
        q_R = zipf_probs(R, exponent)
        draws = draws_for_rows(q_R, stats.rows)
        p_R = inclusion(q_R, draws)
        return draws, float((p_R**2).sum() / p_R.sum())

    lo, hi = 0.01, 4.0
    if not law(lo)[1] <= stats.overlap <= law(hi)[1]:
        raise ValueError(f"no Zipf exponent in [{lo}, {hi}] gives overlap {stats.overlap:.3f} at {stats.rows:.0f} rows")
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if law(mid)[1] < stats.overlap else (lo, mid)
    exponent = (lo + hi) / 2
    return ZipfFit(exponent=exponent, draws=law(exponent)[0], num_rows=R, tokens=tokens, fitted_on=stats)


def natural_row_sets(run: str | Path, *, tensor: str | None = None) -> tuple[list[list[torch.Tensor]], int]:
    """Every captured step's worker row sets of ``run``'s natural (embedding) tensor, and its rows: element
    indices // width."""
    reader = TraceReader(run)
    natural = {t: i for t, i in reader.manifest["tensors"].items() if i["kind"] == "natural"}
    if tensor is None:
        if len(natural) != 1:
            raise ValueError(f"{reader.run_id} has natural tensors {sorted(natural)}: name one (tensor=...)")
        tensor = next(iter(natural))
    num_rows, width = natural[tensor]["shape"]
    steps = [[rows_of(s, width) for s in reader.index_sets(step)[tensor]] for step in reader.steps(tensor)]
    return steps, num_rows


def fit_capture(run: str | Path, *, tensor: str | None = None) -> ZipfFit:
    """:func:`fit_zipf` on ``run``'s natural tensor (a word LSTM's input embedding): the law, its draws, and the
    capture's statistics it was fitted on. ``tokens`` is the run's ``batch_per_worker * seq_len``."""
    steps, num_rows = natural_row_sets(run, tensor=tensor)
    train = TraceReader(run).manifest["config"]["train"]
    return fit_zipf(set_statistics(steps, num_rows), tokens=train["batch_per_worker"] * train["seq_len"])


# ---- DGC top-k sets: a block profile and a rank-to-rank correlation


@dataclass(frozen=True)
class TopkPart:
    """Top-k sets of one kind of tensor: each of ``len(rates)`` contiguous blocks kept at its rate (their mean is
    the density), ranks correlated by ``rho`` (module docstring); ``fitted_on`` pools the captured tensors."""

    kind: str
    """``layers`` (the decoder's matrices) or ``embedding`` (the token embeddings and LM head)."""
    share: float
    """Fraction of the index space this kind holds (in the capture, the fitted tensors' share of its elements)."""
    rates: tuple[float, ...]
    rho: float
    fitted_on: SetStatistics


@dataclass(frozen=True)
class TopkFit:
    """A model's top-k sets as consecutive parts of its index space, one per kind of tensor."""

    parts: tuple[TopkPart, ...]


def _pair_probability(rates_B: torch.Tensor, rho: float) -> torch.Tensor:
    """(B,) P(two ranks both keep an element of each block) under the Gaussian score with correlation ``rho``."""
    z_Z = torch.linspace(-9, 9, 4001, dtype=torch.float64)
    w_Z = torch.exp(-(z_Z**2) / 2) / (2 * torch.pi) ** 0.5 * (z_Z[1] - z_Z[0])
    t_B = torch.special.ndtri(1 - rates_B.clamp(1e-12, 1 - 1e-12))
    rho = min(max(rho, 0.0), 0.9999)
    keep_BZ = torch.special.ndtr((rho**0.5 * z_Z[None, :] - t_B[:, None]) / (1 - rho) ** 0.5)
    return (keep_BZ**2 * w_Z).sum(1)


def topk_overlap(rates_B: torch.Tensor, rho: float) -> float:
    """Expected overlap ratio of two ranks' sets: sum over blocks of P(both keep) / P(one keeps) (equal blocks)."""
    return float(_pair_probability(rates_B, rho).sum() / rates_B.sum())


def fit_topk(
    steps: Sequence[Sequence[Sequence[torch.Tensor]]],
    numels: Sequence[int],
    *,
    kind: str = "layers",
    share: float = 1.0,
    blocks: int = 128,
) -> TopkPart:
    """Fit on top-k sets of tensors of one kind: ``steps[t][j]`` holds the worker sets of tensor j (``numels[j]``
    elements) at step t. Block b of a tensor is its b-th of ``blocks`` equal parts. Rates: each block's kept fraction
    pooled over tensors, workers and steps; ``rho``: bisected to the pooled overlap ratio.

    ``fitted_on`` pools the tensors as one bucket-shaped space would show them: rows per worker summed over
    tensors, overlap as the sum of intersections over the sum of the smaller sets, gamma as the sum of unions over
    the sum of mean set sizes, the first-of-8 share from the pooled kept counts."""
    kept_B = torch.zeros(blocks, dtype=torch.float64)
    size_B = torch.zeros(blocks, dtype=torch.float64)
    inter = smaller = union = mean = rows = 0.0
    for tensors in steps:
        for sets, numel in zip(tensors, numels):
            bounds_B1 = torch.tensor([b * numel // blocks for b in range(blocks + 1)], dtype=torch.float64)
            for s in sets:
                kept_B += torch.bincount(partition_of(s, numel, blocks), minlength=blocks).double()
                size_B += bounds_B1[1:] - bounds_B1[:-1]
            sizes = np.array([s.numel() for s in sets])
            iu, ju = np.triu_indices(len(sets), k=1)
            mins = np.minimum(sizes[iu], sizes[ju])
            inter += float(np.nansum(pairwise_overlap_ratios(sets) * mins))
            smaller += float(mins.sum())
            union += float(union_of(sets, numel).numel())
            mean += float(sizes.mean())
            rows += float(sizes.sum()) / len(sets)
    rates_B = kept_B / size_B
    target = inter / smaller
    lo, hi = 0.0, 0.9999
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if topk_overlap(rates_B, mid) < target else (lo, mid)
    stats = SetStatistics(
        num_rows=int(sum(numels)),
        workers=len(steps[0][0]),
        steps=len(steps),
        rows=rows / len(steps),
        overlap=target,
        gamma=union / mean,
        share0=float(kept_B[: blocks // 8].sum() / kept_B.sum()),
    )
    rates = tuple(float(r) for r in rates_B)
    return TopkPart(kind=kind, share=share, rates=rates, rho=(lo + hi) / 2, fitted_on=stats)


EMBEDDING_NAMES = ("embed", "lm_head")
"""A tensor (a DGC bucket) is of kind ``embedding`` when most of its elements are parameters named with one of these
(token and position embeddings, the LM head), else ``layers``."""


def tensor_kind(params: Sequence[Sequence]) -> str:
    """``embedding`` or ``layers`` for a bucket holding ``params`` ((name, start, end) as the manifest lists them)."""
    embedding = sum(end - start for name, start, end in params if any(k in name for k in EMBEDDING_NAMES))
    return "embedding" if 2 * embedding > sum(end - start for _, start, end in params) else "layers"


def fit_topk_capture(run: str | Path, *, blocks: int = 128, skip_first: bool = True) -> TopkFit:
    """:func:`fit_topk` on ``run``'s top-k tensors (a DGC run's buckets), one part per kind (:func:`tensor_kind`;
    a tensor without a parameter list is ``layers``), at every captured step but the first when ``skip_first`` and
    there are others: at step 0 error feedback holds no residual yet."""
    reader = TraceReader(run)
    topk = {t: i for t, i in reader.manifest["tensors"].items() if i["kind"] == "topk"}
    if not topk:
        raise ValueError(f"{reader.run_id} has no top-k records (capture.topk_scope=none?)")
    captured = sorted({s for t in topk for s in reader.steps(t)})
    if skip_first and len(captured) > 1:
        captured = captured[1:]
    sets = [reader.index_sets(step) for step in captured]
    kinds = {t: tensor_kind(i.get("params", [])) for t, i in topk.items()}
    total = sum(i["numel"] for i in topk.values())
    parts = []
    for kind in ("layers", "embedding"):
        names = sorted(t for t in topk if kinds[t] == kind)
        if names:
            numels = [topk[t]["numel"] for t in names]
            steps = [[step_sets[t] for t in names] for step_sets in sets]
            parts.append(fit_topk(steps, numels, kind=kind, share=sum(numels) / total, blocks=blocks))
    return TopkFit(parts=tuple(parts))
