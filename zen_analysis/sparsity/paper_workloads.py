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
  ranks at 16 machines, each summing its shard: ``gpus=16``), generated over 2^22 elements with the block profile
  and rank correlation fitted on the toolkit's ``opt`` capture (:data:`OPT_TOPK_FIT`); ``scale`` carries the
  factor to parameters / 8. One generated set stands for a bucket-shaped index space: the profile is the captured
  buckets' rates by position relative to their bucket.

Memory: natural row sets are the distinct ids of a few thousand to a few hundred thousand draws; top-k sets are
drawn at 2^22 elements. Nothing materialises a 406M-element table or a 3B-parameter gradient.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import torch

from zen_analysis.config import DataConfig
from zen_analysis.sparsity.metrics import partition_of
from zen_analysis.sparsity.workload_fit import (
    SetStatistics,
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

LSTM_WORDS_FIT = ZipfFit(
    exponent=1.1930046504409986,
    draws=303.00616798351547,
    num_rows=69071,
    tokens=512,
    fitted_on=SetStatistics(
        num_rows=69071, workers=32, steps=4, rows=138.4453125, overlap=0.26373989446856566,
        gamma=15.769083823807847, share0=0.8701968158641455,
    ),
)  # fmt: skip
"""The word LSTM's id law, fitted on ``lstm-words`` (Python 3.11 stdlib corpus: 69,071 words; 32 workers of 4 x 128
tokens) by ``zen-analysis train lstm-words --run-id fit-lstm-words --set capture.topk_scope=none --set
capture.every=1 --set train.num_steps=4`` and then ``workload_fit.fit_capture("fit-lstm-words")``. Which rows a batch
touches depends on the data only, so 4 captured steps of 32 workers suffice."""

IWSLT14_VOCAB = (32_011, 22_824)
"""IWSLT'14 De-En word vocabularies (German source, English target, 4 specials each included): pcyin/pytorch_nmt's
``data/iwslt.vocab.bin`` (commit bf28dae), built by its ``vocab.py`` (singletons dropped) on Ranzato et al.'s
(ICLR'16, MIXER) word-level preprocessing of the 153k training pairs."""
IWSLT14_FIT = {
    "src": ZipfFit(
        exponent=1.2873421455221252, draws=1942.3369698972006, num_rows=32011, tokens=1157,
        fitted_on=SetStatistics(
            num_rows=32011, workers=16, steps=20, rows=420.40625, overlap=0.3458067594588249,
            gamma=7.077500528318285, share0=0.8185994563476967,
        ),
    ),
    "tgt": ZipfFit(
        exponent=1.2924510528845712, draws=2341.544636199618, num_rows=22824, tokens=1342,
        fitted_on=SetStatistics(
            num_rows=22824, workers=16, steps=20, rows=464.721875, overlap=0.35881677114555177,
            gamma=6.775921791680682, share0=0.8045205199307549,
        ),
    ),
}  # fmt: skip
"""Each NMT side's id law: :func:`~zen_analysis.sparsity.workload_fit.fit_zipf` on 20 steps x 16 workers of 64
random sentence pairs of IWSLT'14 De-En's valid and test text in the same repository and preprocessing (13,719
pairs; 18.1 German words per sentence, 21.0 English tokens with <s> and </s>), words mapped to the vocabulary's ids.
The text is not shipped here; the fitted numbers are."""

OPT_TOPK_FIT = TopkFit(
    rates=(
        0.5848, 0.4895, 0.1285, 0.07679, 0.1948, 0.1547, 0.247, 0.2033, 0.1973, 0.1484, 0.1377, 0.1264, 0.1168,
        0.1133, 0.09957, 0.09417, 0.08325, 0.08072, 0.07908, 0.07778, 0.06838, 0.06954, 0.06483, 0.06207, 0.04327,
        0.04878, 0.04617, 0.0459, 0.0445, 0.03957, 0.03989, 0.03905, 0.03337, 0.03159, 0.03141, 0.02876, 0.02419,
        0.02441, 0.02748, 0.02332, 0.02455, 0.02458, 0.0235, 0.01836, 0.02059, 0.01951, 0.02134, 0.02207, 0.01936,
        0.01653, 0.01713, 0.0201, 0.0205, 0.02313, 0.018, 0.01817, 0.01934, 0.01613, 0.01708, 0.01703, 0.01667,
        0.0175, 0.01689, 0.01719, 0.02912, 0.03021, 0.02708, 0.02694, 0.02641, 0.02369, 0.02752, 0.0232, 0.02465,
        0.02198, 0.02542, 0.02177, 0.02256, 0.02211, 0.02402, 0.02286, 0.02591, 0.0239, 0.0225, 0.02272, 0.02379,
        0.02322, 0.0247, 0.02288, 0.02416, 0.02268, 0.02578, 0.02287, 0.02104, 0.02205, 0.02275, 0.02437, 0.0129,
        0.01295, 0.01321, 0.01124, 0.01254, 0.01518, 0.01135, 0.01293, 0.01321, 0.01165, 0.01306, 0.01132, 0.01044,
        0.01621, 0.01277, 0.0137, 0.01341, 0.01111, 0.01435, 0.01512, 0.01487, 0.01544, 0.01277, 0.01266, 0.01265,
        0.01334, 0.008237, 0.009761, 0.01266, 0.01146, 0.01176, 0.01199,
    ),
    rho=0.6737173175631228,
    fitted_on=SetStatistics(
        num_rows=5807616, workers=16, steps=2, rows=268451.15625, overlap=0.46601356011847095,
        gamma=5.813187850629718, share0=0.526139589871854,
    ),
)  # fmt: skip
"""The LLMs' top-k law, fitted on ``opt`` (8 DGC buckets of 1 MB cap, 16 workers, steps 10 and 20) by ``zen-analysis
train opt --run-id fit-opt --set train.num_steps=30 --set train.workers_per_rank=4`` (``make reproduce``'s trim) and
then ``workload_fit.fit_topk_capture("fit-opt")``."""


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
    """Top-k workloads: the block profile and rank correlation (rates rescaled to ``density``)."""

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
            return float(_rates(self).mean())
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


def _rates(w: PaperWorkload) -> torch.Tensor:
    rates_B = torch.tensor(w.topk.rates, dtype=torch.float64)
    return (rates_B * w.density / rates_B.mean()).clamp(max=1 - 1e-9)


def _topk_sets(w: PaperWorkload, gpus: int, step: int, seed: int) -> list[torch.Tensor]:
    """Rank g keeps e when sqrt(rho) z_e + sqrt(1 - rho) eps_ge > t_b(e): z fixed by the seed (the same elements
    matter at every step), eps drawn per (seed, step, g), t_b the threshold that keeps block b at its rate."""
    rho, N = w.topk.rho, w.num_rows
    rates_B = _rates(w)
    t_N = torch.special.ndtri(1 - rates_B)[partition_of(torch.arange(N), N, rates_B.numel())]
    z_N = torch.randn(N, generator=_generator(w.name, seed, _SHARED), dtype=torch.float64)
    bar_N = (t_N - rho**0.5 * z_N) / (1 - rho) ** 0.5  # eps above this keeps the element
    out = []
    for g in range(gpus):
        eps_N = torch.randn(N, generator=_generator(w.name, seed, _PER_GPU, step, g), dtype=torch.float64)
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
    """An LLM's DGC top-k sets of one TP shard, generated over ``elements``."""
    inputs = PAPER_INPUTS[name]
    return PaperWorkload(
        name=name, kind="topk", num_rows=elements, width=1, scale=inputs["params"] / LLM_TP / elements,
        dense_params=0.0, samples_per_gpu=inputs["samples"], tokens_per_gpu=LLM_SEQ_LEN, density=density,
        synthetic=f"top-k sets over {elements:,} elements standing for one TP shard's gradient (params / {LLM_TP}): "
        f"{len(fit.rates)}-block rate profile and rank correlation {fit.rho:.2f} fitted on the toolkit's opt capture "
        f"({fit.fitted_on.workers} workers); nothing of the {name} model itself but its size",
        topk=fit,
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
