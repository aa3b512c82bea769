"""A trained model loads in plain transformers (``from_pretrained``) with the run's logits and tokenizer; the LSTM
and DeepFM through ``load_exported``."""

import copy

import pytest
import torch

from zen_analysis import paths, recipes
from zen_analysis.runs.launch import launch
from zen_analysis.workload.export import load_exported
from zen_analysis.workload.models import build_model


def _train(recipe: str):
    cfg = recipes.get(recipe)
    cfg.name = cfg.run_id = f"export-{recipe}"
    cfg.dist.num_ranks = 2
    cfg.train.num_steps = 2
    cfg.capture.enabled = False
    cfg.train.save_params = True
    cfg.train.export = True
    launch(copy.deepcopy(cfg), echo=False, progress=False, overwrite=True)
    return cfg, paths.run_dir(cfg.run_id)


def _trained(cfg, run_dir, **build):
    model = build_model(cfg.model, **build)
    model.load_state_dict(torch.load(run_dir / "params.pt", weights_only=True))
    return model.eval()


@pytest.mark.parametrize(
    "recipe", [pytest.param("smoke", marks=pytest.mark.smoke), "gpt2-smoke", "opt-smoke", "gemma2-smoke"]
)
def test_an_exported_llm_loads_with_from_pretrained_and_gives_the_trained_logits(recipe):
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg, run_dir = _train(recipe)
    out = run_dir / "export"
    vocab = AutoModelForCausalLM.from_pretrained(out).config.vocab_size
    trained = _trained(cfg, run_dir, vocab_size=vocab, max_seq_len=cfg.train.seq_len)
    # the attention kernel is the loader's choice, not the checkpoint's (transformers 5.17 loads Gemma2 with sdpa,
    # later releases with eager, as the toolkit trains it): like with like, so the weights and config are compared
    attention = trained.config._attn_implementation
    loaded = AutoModelForCausalLM.from_pretrained(out, attn_implementation=attention).eval()
    ids = torch.randint(0, vocab, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, trained(ids).logits)
    text = "def main():\n    return sorted(items, key=len)\n"
    ours = Tokenizer.from_file(str(out / "tokenizer.json")).encode(text).ids
    assert AutoTokenizer.from_pretrained(out)(text)["input_ids"] == ours and len(ours) > 5


@pytest.mark.parametrize("recipe", ["lstm-words-smoke", "deepfm-smoke"])
def test_an_exported_lstm_or_deepfm_loads_with_load_exported(recipe):
    import json

    cfg, run_dir = _train(recipe)
    loaded = load_exported(run_dir / "export")
    build = json.loads((run_dir / "export" / "zen_model.json").read_text())["build"]
    trained = _trained(cfg, run_dir, **build)
    for (name, a), (_, b) in zip(loaded.state_dict().items(), trained.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
