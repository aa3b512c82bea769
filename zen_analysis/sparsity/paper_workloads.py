"""The Zen paper's six workloads as generators of every GPU's sparse index set, step by step, at the paper's sizes.

Context (Wang et al., OSDI'25, Table 1, Table 2 and section 5.1; ``shared/reference/zen_paper.md``): the paper syncs
the embedding gradients of an LSTM on One Billion Word, DeepFM on Criteo and a Luong NMT on IWSLT'14 De-En, and the
DGC top-5% gradients of three LLMs. We cannot train them at that size, so :func:`paper_workload` builds each one from
what the paper states about its INPUTS (table sizes, dense sizes, per-GPU batches, per-GPU densities, the testbed's
TP = 8) and from laws fitted on the toolkit's own captures (:mod:`~zen_analysis.sparsity.workload_fit`). The paper's
RESULTS (its speedups, its Fig. 2-3 values) are never used: :mod:`~zen_analysis.sparsity.paper_characterize` sets
the generated sets beside them, for comparison.

Each workload says what is synthetic in its ``synthetic`` line. In short:

* **lstm**: 793,471 words x 512 (406M), ids from the Zipf law fitted on ``lstm-words`` (:data:`LSTM_WORDS_FIT`),
  as many independent draws per GPU as give Table 1's 1.13% of rows. Words are independent given the law: at the
  capture's vocabulary and batch this reproduces its overlap ratio, gamma and first-partition share (tested).
* **nmt**: IWSLT'14 De-En at word level, 32,011 source + 22,824 target words (:data:`IWSLT14_VOCAB`), both tables
  in one index space (source rows first), 112M / 54,835 = 2,042 values per row (the paper gives no width). Each
  side's Zipf law is fitted on 64-pair batches of IWSLT'14's own text (:data:`IWSLT14_FIT`); the draws are scaled
  by one factor to Table 1's 2.47% (at IWSLT's own sentence lengths the density is 1.6%).
* **deepfm**: Criteo's 26 fields, cardinalities in Criteo Kaggle's proportions (``workload.ctr``), smallest field
  first, ids per field from the toolkit's Criteo law (Zipf ``DataConfig.ctr_zipf``), 1,024 samples per GPU. 1,024 x
  26 lookups touch at most 26,624 rows, so 2.80% of a 214M-element table needs at most 950,857 rows of at least 225
  values even with no repeated id; with the law's repeats it needs about 107k rows of about 2,000 values. No common
  preprocessing (full Kaggle ids, min-count 10, width 16) gets near it: :func:`deepfm_readings` lists them with
  the density each reaches. The default reading keeps every stated number (214M, 1,024, 26 fields, 2.80%) and lets
  the row width, which the paper does not state, be what they imply.
* **opt / llama / gemma2**: DGC top-5% sets of one TP shard's gradient (TP = 8 in a node, so 16 data-parallel
  ranks at 16 machines, each summing its shard: ``gpus=16``), generated over 2^22 elements; ``scale`` carries the
  factor to parameters / 8. The space is the model's decoder layers, then its (tied) token embedding, in the
  shares of the paper's model (:data:`LLM_EMBEDDING`); each part has the block profile and rank correlation fitted
  on the toolkit's ``opt`` capture for its kind of bucket (:data:`OPT_TOPK_FIT`: the layers' sets overlap far less
  than the embedding's and LM head's), each part top-5% on its own as DGC selects per bucket.

Memory: natural row sets are the distinct ids of a few thousand to a few hundred thousand draws; top-k sets are
drawn at 2^22 elements. Nothing materialises a 406M-element table or a 3B-parameter gradient.

Shape suffixes: T ids drawn, N elements of a top-k workload's gradient, B blocks of a part (one keep rate each), R rows
of the vocabulary (one probability each), F embedding fields (one cardinality each).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import torch

from zen_analysis.config import DataConfig
from zen_analysis.sparsity.metrics import partition_of
from zen_analysis.sparsity.paper_fits import IWSLT14_FIT, IWSLT14_VOCAB, LSTM_WORDS_FIT, OPT_TOPK_FIT
from zen_analysis.sparsity.workload_fit import (
    TopkFit,
    ZipfFit,
    draws_for_rows,
    inclusion,
    rows_function,
    solve_draws,
    zipf_probs,
)
from zen_analysis.workload.ctr import field_cardinalities, field_layout

# Shapes: R rows of the index space (natural) or N elements (top-k), B blocks of a top-k profile, T draws.

PAPER_WORKLOADS = ("lstm", "deepfm", "nmt", "opt", "llama", "gemma2")

PAPER_INPUTS = {
    # Table 1: sparse (embedding) and dense (MLP) sizes, per-GPU embedding-gradient density; section 5.1: batches
    "lstm": {"sparse": 406e6, "dense": 20e6, "samples": 128, "density": 0.0113},
    "deepfm": {"sparse": 214e6, "dense": 68e6, "samples": 1024, "density": 0.0280},
    "nmt": {"sparse": 112e6, "dense": 31e6, "samples": 64, "density": 0.0247},
    # section 5.1: RedPajama, TP = 8, batch 1 per TP group, sequence length 1,024, DGC top-5%; sizes by name
    "opt": {"params": 2.7e9, "samples": 1, "density": 0.05},
    "llama": {"params": 3.2e9, "samples": 1, "density": 0.05},
    "gemma2": {"params": 2.6e9, "samples": 1, "density": 0.05},
}
"""What the paper states about each workload's inputs, and nothing it measured."""
LSTM_VOCAB, LSTM_WIDTH = 793_471, 512  # One Billion Word's vocabulary x 512 = 406.3M (Table 1's 406M)
LLM_TP, LLM_SEQ_LEN, LLM_ELEMENTS = 8, 1024, 2**22
"""The LLMs' tensor parallelism inside a node and sequence length (section 5.1), and the elements generated."""
LLM_EMBEDDING = {
    "llama": 128_256 * 3_072,  # meta-llama/Llama-3.2-3B: vocab_size 128,256, tied, hidden 3,072 (Table 2)
    "opt": (50_272 + 2_050) * 2_560,  # facebook/opt-2.7b: vocab 50,272 (tied) and 2,048 + 2 learned positions
    "gemma2": 256_000 * 2_304,  # google/gemma-2-2b: vocab_size 256,000, tied, hidden 2,304 (Table 2)
}
"""Embedding parameters of the paper's LLMs (their Hugging Face configs; hidden sizes as Table 2): the share of the
index space the top-k generator gives the embedding part."""


@dataclass(frozen=True)
class IdLaw:
    """Ids of one vocabulary (or Criteo field) in rows [offset, offset + num_rows): ``draws`` independent draws per
    GPU and step from the Zipf law p_k ∝ (k + 1) ** -exponent (id 0 the most frequent)."""

    offset: int
    num_rows: int
    exponent: float
    draws: int


@dataclass(frozen=True)
class PaperWorkload:
    """One of the paper's workloads: its sizes, its inputs, and the generator of its GPUs' index sets."""

    name: str
    kind: str
    """``natural`` (an embedding's rows) or ``topk`` (DGC top-5% of every gradient element)."""
    num_rows: int
    """Rows of the sparse tensor as generated (natural: the table's rows; topk: elements, width 1)."""
    width: int
    scale: float
    """The paper's sparse-tensor elements / (num_rows * width): 1 for the natural workloads (generated at full size);
    > 1 for the LLMs (generated smaller, bytes scale by it)."""
    dense_params: float
    """Parameters summed densely beside the sparse tensor (natural: the MLP; topk: 0)."""
    samples_per_gpu: int
    tokens_per_gpu: int
    """Independent id draws per GPU and step (natural: the laws' draws; topk: the TP group's sequence length)."""
    density: float
    """The paper's per-GPU density (Table 1; 0.05 for DGC top-5%): an input."""
    synthetic: str
    laws: tuple[IdLaw, ...] = ()
    """Natural workloads: the id laws whose draws make a GPU's rows."""
    topk: TopkFit | None = None
    """Top-k workloads: the parts of the space in order, each with its share, block profile (rescaled to ``density``
    per part) and rank correlation."""

    def row_sets(self, gpus: int, *, step: int = 0, seed: int = 0) -> list[torch.Tensor]:
        """``gpus`` sorted, distinct int64 row sets (one per GPU) for training step ``step``. GPU g's set depends
        on (seed, step, g) only, so the first k of 16 GPUs are the k of a k-GPU call."""
        if gpus < 1 or step < 0 or seed < 0:
            raise ValueError(f"need gpus >= 1, step >= 0 and seed >= 0; got {gpus}, {step}, {seed}")
        if self.kind == "topk":
            return _topk_sets(self, gpus, step, seed)
        return [self._natural_rows(_generator(self.name, seed, _PER_GPU, step, g)) for g in range(gpus)]

    def _natural_rows(self, gen: torch.Generator) -> torch.Tensor:
        ids = [law.offset + _draw(law.num_rows, law.exponent, law.draws, gen) for law in self.laws]
        return torch.unique(torch.cat(ids))  # sorted

    def expected_density(self) -> float:
        """The laws' expected per-GPU density (natural); the rates' mean (top-k)."""
        if self.topk is not None:
            return float(_element_law(self)[0].mean())
        return _laws_density(self.laws)


_PER_GPU, _SHARED = 0, 1  # streams: one GPU's draws at a step; what every GPU shares (top-k's z)


def _generator(name: str, *keys: int) -> torch.Generator:
    """A generator seeded from the workload's name and ``keys`` (seed, stream, step, GPU), all mixed."""
    state = np.random.SeedSequence([zlib.crc32(name.encode()), *keys]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 31 ^ int(state[1]))


@lru_cache(maxsize=64)
def _cdf(num_rows: int, exponent: float) -> torch.Tensor:
    return torch.cumsum(zipf_probs(num_rows, exponent), 0)


def _draw(num_rows: int, exponent: float, draws: int, gen: torch.Generator) -> torch.Tensor:
    """(T,) int64 ids drawn from the Zipf law by inverting its CDF."""
    u_T = torch.rand(draws, generator=gen, dtype=torch.float64)
    return torch.searchsorted(_cdf(num_rows, exponent), u_T).clamp_(max=num_rows - 1)


def _element_law(w: PaperWorkload) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) each element's keep rate and rank correlation: the parts laid out in order by share, each part's blocks
    over its range, each part's rates scaled to mean ``density`` (DGC keeps its ratio of every bucket)."""
    N, parts = w.num_rows, w.topk.parts
    ends = np.rint(np.cumsum([p.share for p in parts]) / sum(p.share for p in parts) * N).astype(int)
    rate_N = torch.empty(N, dtype=torch.float64)
    rho_N = torch.empty(N, dtype=torch.float64)
    for part, start, end in zip(parts, [0, *ends[:-1]], ends):
        rates_B = torch.tensor(part.rates, dtype=torch.float64)
        rates_B = (rates_B * w.density / rates_B.mean()).clamp(max=1 - 1e-9)
        rate_N[start:end] = rates_B[partition_of(torch.arange(end - start), end - start, rates_B.numel())]
        rho_N[start:end] = part.rho
    return rate_N, rho_N


def _topk_sets(w: PaperWorkload, gpus: int, step: int, seed: int) -> list[torch.Tensor]:
    """Rank g keeps e when sqrt(rho) z_e + sqrt(1 - rho) eps_ge > t(e): z fixed by the seed (the same elements
    matter at every step), eps drawn per (seed, step, g), t(e) the threshold that keeps e's block at its rate."""
    rate_N, rho_N = _element_law(w)
    z_N = torch.randn(w.num_rows, generator=_generator(w.name, seed, _SHARED), dtype=torch.float64)
    bar_N = (torch.special.ndtri(1 - rate_N) - rho_N.sqrt() * z_N) / (1 - rho_N).sqrt()  # eps above it keeps e
    out = []
    for g in range(gpus):
        eps_N = torch.randn(w.num_rows, generator=_generator(w.name, seed, _PER_GPU, step, g), dtype=torch.float64)
        out.append(torch.nonzero(eps_N > bar_N).view(-1))
    return out


# ---- the six workloads


def _lstm(*, vocab: int = LSTM_VOCAB, width: int = LSTM_WIDTH, density: float = 0.0113, fit: ZipfFit = LSTM_WORDS_FIT,
          draws: float | None = None) -> PaperWorkload:  # fmt: skip
    """The word LSTM: ``fit``'s law over ``vocab`` words, ``draws`` per GPU (default: as many as give ``density``)."""
    q_R = zipf_probs(vocab, fit.exponent)
    if draws is None:
        draws = draws_for_rows(q_R, density * vocab)
    law = IdLaw(offset=0, num_rows=vocab, exponent=fit.exponent, draws=round(draws))
    inputs = PAPER_INPUTS["lstm"]
    return PaperWorkload(
        name="lstm", kind="natural", num_rows=vocab, width=width, scale=inputs["sparse"] / (vocab * width),
        dense_params=inputs["dense"], samples_per_gpu=inputs["samples"], tokens_per_gpu=law.draws, density=density,
        synthetic=f"word ids: {law.draws:,} independent draws per GPU from the Zipf law (exponent {fit.exponent:.3f}) "
        f"fitted on lstm-words' capture ({fit.num_rows:,} words, {fit.tokens} tokens -> {fit.draws:.0f} draws per "
        "worker), the draws chosen for the density; the vocabulary and width are One Billion Word's",
        laws=(law,),
    )  # fmt: skip


def _nmt(*, vocab: tuple[int, int] = IWSLT14_VOCAB, density: float = 0.0247, factor: float | None = None,
         fit: dict[str, ZipfFit] = IWSLT14_FIT) -> PaperWorkload:  # fmt: skip
    """The NMT: source then target rows, each side's law and draws from ``fit`` times one ``factor`` (default: the
    factor that gives ``density`` over both tables)."""
    sides = list(zip((0, vocab[0]), vocab, (fit["src"], fit["tgt"])))
    per_side = [(rows_function(zipf_probs(rows, f.exponent)), f.draws) for _, rows, f in sides]

    def rows_at(c: float) -> float:
        return sum(rows(c * draws) for rows, draws in per_side)

    if factor is None:
        factor = solve_draws(rows_at, density * sum(vocab))
    laws = tuple(IdLaw(offset=o, num_rows=r, exponent=f.exponent, draws=round(factor * f.draws)) for o, r, f in sides)
    inputs = PAPER_INPUTS["nmt"]
    width = round(inputs["sparse"] / sum(vocab))
    tokens = factor * (fit["src"].tokens + fit["tgt"].tokens) / inputs["samples"]
    return PaperWorkload(
        name="nmt", kind="natural", num_rows=sum(vocab), width=width, scale=inputs["sparse"] / (sum(vocab) * width),
        dense_params=inputs["dense"], samples_per_gpu=inputs["samples"], tokens_per_gpu=sum(w.draws for w in laws),
        density=density,
        synthetic=f"source and target ids: Zipf laws fitted on IWSLT'14 De-En's own 64-pair batches, draws x "
        f"{factor:.2f} for the density (sentence pairs of {tokens:.0f} tokens, IWSLT's are "
        f"{(fit['src'].tokens + fit['tgt'].tokens) / inputs['samples']:.0f}); the width ({width}) is 112M / rows",
        laws=laws,
    )  # fmt: skip


def _criteo_laws(rows: int, exponent: float, samples: int, layout: str) -> tuple[IdLaw, ...]:
    """One law per Criteo field: Kaggle's cardinalities scaled to ``rows`` in all, fields in ``layout`` order."""
    cards_F = field_cardinalities(rows)
    order = field_layout(cards_F, layout)
    offsets = np.concatenate([[0], np.cumsum(cards_F[order])[:-1]])
    return tuple(IdLaw(int(o), int(cards_F[f]), exponent, samples) for o, f in zip(offsets, order))


def _laws_density(laws: tuple[IdLaw, ...]) -> float:
    rows = sum(float(inclusion(zipf_probs(w.num_rows, w.exponent), w.draws).sum()) for w in laws)
    return rows / sum(w.num_rows for w in laws)


def _deepfm(*, rows: int | None = None, density: float = 0.0280, exponent: float = DataConfig().ctr_zipf,
            layout: str = "cardinality") -> PaperWorkload:  # fmt: skip
    """DeepFM: 26 Criteo fields over ``rows`` rows (default: the rows at which the law gives ``density``)."""
    inputs = PAPER_INPUTS["deepfm"]
    samples = inputs["samples"]
    if rows is None:  # the density falls as the rows grow: bisect on a log scale, to the row
        lo, hi = 10_000, 33_762_577
        while hi - lo > 1:
            mid = round((lo * hi) ** 0.5)
            lo, hi = (mid, hi) if _laws_density(_criteo_laws(mid, exponent, samples, layout)) > density else (lo, mid)
        rows = hi
    laws = _criteo_laws(rows, exponent, samples, layout)
    num_rows = sum(w.num_rows for w in laws)
    width = max(1, round(inputs["sparse"] / num_rows))
    return PaperWorkload(
        name="deepfm", kind="natural", num_rows=num_rows, width=width, scale=inputs["sparse"] / (num_rows * width),
        dense_params=inputs["dense"], samples_per_gpu=samples, tokens_per_gpu=samples * len(laws), density=density,
        synthetic=f"Criteo ids: per field Zipf (exponent {exponent}, the toolkit's criteo-synth law) over Criteo "
        f"Kaggle's cardinalities scaled to {num_rows:,} rows, {layout} order; {width} values per row, what 214M and "
        "2.80% at 1,024 samples imply (no common preprocessing reaches 2.80%: deepfm_readings)",
        laws=laws,
    )  # fmt: skip


def _llm(
    name: str, *, elements: int = LLM_ELEMENTS, density: float = 0.05, fit: TopkFit = OPT_TOPK_FIT
) -> PaperWorkload:
    """An LLM's DGC top-k sets of one TP shard, generated over ``elements``: ``fit``'s parts in the model's shares."""
    inputs = PAPER_INPUTS[name]
    embedding = LLM_EMBEDDING[name] / inputs["params"]
    shares = {"layers": 1 - embedding, "embedding": embedding}
    parts = tuple(replace(p, share=shares.get(p.kind, p.share)) for p in fit.parts)
    return PaperWorkload(
        name=name, kind="topk", num_rows=elements, width=1, scale=inputs["params"] / LLM_TP / elements,
        dense_params=0.0, samples_per_gpu=inputs["samples"], tokens_per_gpu=LLM_SEQ_LEN, density=density,
        synthetic=f"top-k sets over {elements:,} elements standing for one TP shard's gradient (params / {LLM_TP}): "
        f"decoder layers then the embedding ({embedding:.1%} of {name}'s parameters), each with the block profile and "
        "rank correlation fitted on the toolkit's opt capture for its kind of bucket; of the model only its sizes",
        topk=TopkFit(parts=parts),
    )  # fmt: skip


_BUILDERS = {"lstm": _lstm, "deepfm": _deepfm, "nmt": _nmt}


def paper_workload(name: str, **options) -> PaperWorkload:
    """The paper's workload ``name`` (:data:`PAPER_WORKLOADS`). Options, each defaulting to the paper's inputs:
    ``lstm``: vocab, width, density, fit, draws; ``nmt``: vocab, density, factor, fit; ``deepfm``: rows, density,
    exponent, layout; ``opt``, ``llama``, ``gemma2``: elements, density, fit."""
    if name not in PAPER_WORKLOADS:
        raise ValueError(f"unknown paper workload {name!r}; choose from {PAPER_WORKLOADS}")
    build = _BUILDERS.get(name)
    allowed = (build or _llm).__kwdefaults__
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"{name} takes options {sorted(allowed)}, not {unknown}")
    try:
        return _cached(name, tuple(sorted(options.items())))
    except TypeError:  # an unhashable option (a dict of fits): built each time
        return build(**options) if build else _llm(name, **options)


@lru_cache(maxsize=64)
def _cached(name: str, options: tuple) -> PaperWorkload:
    """A workload built once per options (the draws and DeepFM's rows are solved by bisection)."""
    build = _BUILDERS.get(name)
    return build(**dict(options)) if build else _llm(name, **dict(options))


def lstm_words_workload(fit: ZipfFit = LSTM_WORDS_FIT) -> PaperWorkload:
    """The LSTM generator at the capture's own vocabulary and batch (``fit.draws`` per worker): what must show the
    capture's overlap ratio, gamma and first-partition share."""
    return replace(paper_workload("lstm", vocab=fit.num_rows, fit=fit, draws=fit.draws), density=fit.fitted_on.density)
