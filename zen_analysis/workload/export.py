"""A trained model as files other programs load: the LLM families in Hugging Face's format, the rest as a state dict.

* a pretrained checkpoint's model (``model.pretrained``): ``save_pretrained`` and the checkpoint's own tokenizer;
* Llama, GPT-2, OPT, Gemma 2: ``save_pretrained`` (``config.json`` + ``model.safetensors``) and the run's tokenizer as
  a ``PreTrainedTokenizerFast`` (``tokenizer.json`` + its config), so a plain script loads both with
  ``AutoModelForCausalLM.from_pretrained(path)`` and ``AutoTokenizer.from_pretrained(path)``;
* the word-level LSTM and DeepFM, which are this toolkit's own modules: ``model.pt`` (the state dict) and
  ``zen_model.json`` (what :func:`~zen_analysis.workload.models.build_model` needs), read back by :func:`load_exported`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from torch import nn

from zen_analysis.config import ModelConfig
from zen_analysis.workload.models import build_model
from zen_analysis.workload.tokenizer import EOS, UNK

HF_ARCHS = ("llama", "gpt2", "opt", "gemma2")
"""The architectures exported in Hugging Face's format."""
OWN_CONFIG = "zen_model.json"


def export_model(model: nn.Module, cfg: ModelConfig, out: Path, *, build: dict, tokenizer_file: Path | None) -> Path:
    """Write ``model`` (built from ``cfg`` with ``build``'s keywords: vocab_size, max_seq_len, ...) under ``out``;
    with a ``tokenizer_file`` (a ``tokenizers`` JSON) the tokenizer beside it. Returns ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if cfg.pretrained:  # the checkpoint's classes and its own tokenizer (kept beside the token cache)
        from transformers import AutoTokenizer  # deferred: slow import, export only

        # every tensor under its own name: an untied checkpoint's loader does not re-tie the aliases save_pretrained
        # would drop (BERT's decoder.bias, an alias of predictions.bias, came back fresh), so nothing is dropped
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.save_pretrained(out, safe_serialization=True, state_dict=state)
        if tokenizer_file is not None:
            AutoTokenizer.from_pretrained(Path(tokenizer_file).parent).save_pretrained(out)
        return out
    if cfg.arch in HF_ARCHS:
        model.save_pretrained(out, safe_serialization=True)
        if tokenizer_file is not None:
            from transformers import PreTrainedTokenizerFast  # deferred: slow import, export only

            tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file), eos_token=EOS)
            if tok.convert_tokens_to_ids(UNK) != tok.unk_token_id and UNK in tok.get_vocab():
                tok.unk_token = UNK  # the word vocabulary's
            tok.save_pretrained(out)
        return out
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, out / "model.pt")
    (out / OWN_CONFIG).write_text(json.dumps({"model": dataclasses.asdict(cfg), "build": build}, indent=2) + "\n")
    if tokenizer_file is not None:
        (out / "tokenizer.json").write_text(Path(tokenizer_file).read_text())
    return out


def load_exported(path: str | Path) -> nn.Module:
    """An exported model back: a Hugging Face directory through ``AutoModelForCausalLM`` (``AutoModelForMaskedLM`` for a
    masked LM), this toolkit's own
    (``zen_model.json``) through :func:`build_model` and its state dict."""
    path = Path(path)
    if not (path / OWN_CONFIG).exists():
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM  # deferred: export only

        masked = any(a.endswith("ForMaskedLM") for a in AutoConfig.from_pretrained(path).architectures or [])
        return (AutoModelForMaskedLM if masked else AutoModelForCausalLM).from_pretrained(path)
    spec = json.loads((path / OWN_CONFIG).read_text())
    model_cfg = ModelConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in spec["model"].items()})
    model = build_model(model_cfg, **spec["build"])
    model.load_state_dict(torch.load(path / "model.pt", weights_only=True))
    return model.eval()
