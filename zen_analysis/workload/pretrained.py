"""Pretrained checkpoints (``model.pretrained``): a ``transformers`` checkpoint, a hub id or a folder written by
``save_pretrained``, as the model a run trains, with its own tokenizer cutting the corpus.

A causal LM (a checkpoint whose ``architectures`` are a ``...ForCausalLM`` / ``...LMHeadModel``) trains next-token,
as the models built from config do. An encoder (BERT and its kin, e.g. all-MiniLM-L6-v2, saved as ``BertModel``)
cannot: its attention sees the whole sequence, so next-token prediction would read the answer. It trains as a masked
LM (``AutoModelForMaskedLM``: the checkpoint's encoder, the masked-LM head fresh where the checkpoint has none),
the objective it was pretrained with before its sentence-embedding tuning.

Tying: most checkpoints tie the input embedding to the output layer. A tied matrix's gradient is dense (the output
layer's softmax reaches every row), so such a run has no natural sparsity, and the natural-sparsity syncs and
capture refuse it, saying so. ``model.tie_embeddings=false`` gives the output layer its own copy of the shared
matrix (the same function at step 0); then the input embedding's gradient has rows only for the batch's tokens.

:func:`resolve` makes a config's checkpoint-dependent settings explicit before a run starts (in the launcher, so a
missing checkpoint, a sequence longer than its positions, a tokenizer with more ids than the embedding table has
rows, or a tied checkpoint under a natural sync or FSDP2 is refused before any rank starts); :func:`load_model`
builds the model on each rank (every rank seeds torch first, so a fresh head is the same everywhere);
:func:`fast_tokenizer` is the tokenizer the data is cut with.
"""

from __future__ import annotations

import copy
import functools
import logging

import torch
import transformers
from torch import nn

from zen_analysis.config import AUTO, TOKENIZERS, ExperimentConfig, ModelConfig

CAUSAL = ("ForCausalLM", "LMHeadModel")
"""The ends of a causal LM's architecture names (``LlamaForCausalLM``, ``GPT2LMHeadModel``)."""


@functools.lru_cache(maxsize=8)
def checkpoint_config(spec: str) -> transformers.PretrainedConfig:
    """The checkpoint's ``config.json``, read once per process; a clear error where it cannot be read."""
    try:
        return transformers.AutoConfig.from_pretrained(spec)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"model.pretrained={spec!r}: cannot read its config ({type(exc).__name__}: {exc}). A folder must hold a "
            "save_pretrained checkpoint (config.json); a hub id needs the network or the checkpoint in the Hugging "
            "Face cache (HF_HUB_OFFLINE=1 reads the cache alone)."
        ) from exc


def is_causal(config: transformers.PretrainedConfig) -> bool:
    """Whether the checkpoint is a causal LM (by its ``architectures``)."""
    return any(name.endswith(CAUSAL) for name in (config.architectures or []))


def max_positions(config: transformers.PretrainedConfig) -> int | None:
    """The longest sequence the checkpoint's position embeddings cover, where it has such a bound."""
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def resolve(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` with what the checkpoint decides made explicit: ``model.tie_embeddings`` (``auto``: the
    checkpoint's), ``model.objective`` (``auto``: causal for a causal LM, masked for an encoder) and
    ``data.tokenizer`` (the checkpoint's), then validated again (a tied checkpoint under a natural sync or FSDP2 is
    refused there). Unchanged without ``model.pretrained``."""
    m = cfg.model
    if not m.pretrained:
        return cfg
    config = checkpoint_config(m.pretrained)
    out = copy.deepcopy(cfg)
    if m.tie_embeddings == AUTO:
        out.model.tie_embeddings = bool(getattr(config, "tie_word_embeddings", True))
    if m.objective == AUTO:
        out.model.objective = "causal" if is_causal(config) else "masked"
    elif m.objective == "causal" and not is_causal(config):
        raise ValueError(
            f"model.objective=causal: {m.pretrained!r} is an encoder ({', '.join(config.architectures or [])}), "
            "whose attention sees the whole sequence; train it with model.objective=masked (or auto)"
        )
    if cfg.data.tokenizer == "words" or cfg.data.tokenizer not in (*TOKENIZERS, m.pretrained):
        raise ValueError(
            f"data.tokenizer={cfg.data.tokenizer!r}: a pretrained model reads its own tokenizer's ids; leave "
            f"data.tokenizer unset (or set it to {m.pretrained!r})"
        )
    out.data.tokenizer = m.pretrained
    rows, num_ids = getattr(config, "vocab_size", None), len(fast_tokenizer(m.pretrained))
    if isinstance(rows, int) and num_ids > rows:  # else an id past the table is an IndexError on every rank
        raise ValueError(
            f"model.pretrained={m.pretrained!r}: its tokenizer has {num_ids} ids but its embedding table has "
            f"{rows} rows (config.json vocab_size), so ids {rows}..{num_ids - 1} have no row; save the "
            "tokenizer the model was trained with beside it, or resize the model's embeddings to the tokenizer "
            "(model.resize_token_embeddings(len(tokenizer)), then save_pretrained)"
        )
    limit = max_positions(config)
    if limit is not None and cfg.train.seq_len > limit:
        raise ValueError(f"train.seq_len={cfg.train.seq_len} exceeds {m.pretrained!r}'s {limit} positions")
    out.validate()
    return out


def _set_tie(model: nn.Module, tie: bool) -> None:
    """Tie or untie the input embedding and the output layer as asked (untying copies the shared matrix)."""
    inp, head = model.get_input_embeddings(), model.get_output_embeddings()
    if head is None or (head.weight is inp.weight) == tie:
        return
    model.config.tie_word_embeddings = tie
    head.weight = inp.weight if tie else nn.Parameter(inp.weight.detach().clone())


def load_model(cfg: ModelConfig, log=None) -> nn.Module:
    """The checkpoint as ``cfg`` (resolved: :func:`resolve`) asks: a causal or masked LM in float32, tied or not.
    ``log`` (a ``print``-like function) hears which parameters are fresh (not in the checkpoint)."""
    if cfg.tie_embeddings == AUTO or cfg.objective == AUTO:
        raise ValueError("load_model takes a resolved config: zen_analysis.workload.pretrained.resolve")
    auto = transformers.AutoModelForCausalLM if cfg.objective == "causal" else transformers.AutoModelForMaskedLM
    quiet = logging.getLogger("transformers.modeling_utils")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the missing-keys report: said once below, in the run's log
    transformers.utils.logging.disable_progress_bar()  # every rank's "Loading weights" bar, in every rank's log
    try:
        model, info = auto.from_pretrained(cfg.pretrained, dtype=torch.float32, output_loading_info=True)
    finally:
        quiet.setLevel(level)
        transformers.utils.logging.enable_progress_bar()
    _set_tie(model, cfg.tie_embeddings is True)
    fresh = sorted(info.get("missing_keys", ()))
    if log is not None and fresh:
        log(f"{cfg.pretrained}: {len(fresh)} parameters fresh (not in the checkpoint), e.g. {', '.join(fresh[:3])}")
    return model


def fast_tokenizer(spec: str) -> transformers.PreTrainedTokenizerFast:
    """The checkpoint's tokenizer, which must be a fast one (a ``tokenizer.json``: the corpus is cut with the
    ``tokenizers`` library, as the toolkit's own tokenizers are)."""
    try:
        tok = transformers.AutoTokenizer.from_pretrained(spec)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"data.tokenizer={spec!r}: neither bpe, words nor a pretrained tokenizer that loads ({type(exc).__name__}: "
            f"{exc}); a pretrained one is a hub id (in the Hugging Face cache when offline) or a save_pretrained folder"
        ) from exc
    if not tok.is_fast:
        raise ValueError(f"data.tokenizer={spec!r} has no fast tokenizer (tokenizer.json), which the data needs")
    return tok


def separator_id(tok: transformers.PreTrainedTokenizerFast) -> int:
    """The id put between documents in the token stream: the end-of-text token, else the separator (BERT's)."""
    for token_id in (tok.eos_token_id, tok.sep_token_id):
        if token_id is not None:
            return int(token_id)
    raise ValueError(f"tokenizer {tok.name_or_path!r} has neither an end-of-text nor a separator token")
