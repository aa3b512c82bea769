"""``lstm-words-smoke`` on 2 gloo ranks: the word vocabulary reaches the model, training and the capture."""

import pytest
import torch

from zen_analysis import recipes
from zen_analysis.runs.launch import launch


@pytest.mark.smoke
def test_lstm_words_smoke_trains_and_captures_the_word_embedding_on_two_ranks():
    cfg = recipes.lstm_words_smoke()
    assert cfg.dist.num_ranks == 2
    result = launch(cfg, progress=False, echo=False)
    digests = {r: s["param_sha256"] for r, s in result.results.items()}
    assert len(digests) == 2 and len(set(digests.values())) == 1, digests
    reader = result.traces()
    m = reader.manifest
    assert m["finished"] and m["num_workers"] == 2 * cfg.train.workers_per_rank
    corpus = m["corpus"]
    assert "-words-v4096-m2" in corpus["tokenizer_file"] and "-words-v4096-m2-f" in corpus["tokens_dir"]
    vocab = corpus["vocab_size"]
    assert vocab == cfg.data.vocab_size  # the cap binds on the 2 MB corpus
    natural = [t for t, i in m["tensors"].items() if i["kind"] == "natural"]
    assert natural == ["embed.weight"] and m["tensors"]["embed.weight"]["shape"] == [vocab, cfg.model.hidden_size]
    assert sum(i["kind"] == "topk" for i in m["tensors"].values()) == len(recipes.LSTM_TOPK)
    rows = torch.cat([r.indices_K // cfg.model.hidden_size for r in reader.records(tensor="embed.weight")])
    assert 0 < rows.unique().numel() < vocab and int(rows.max()) < vocab
    assert (rows < vocab // 8).float().mean() > 0.5  # frequency-ranked ids: most touched rows are frequent words
    loss = result.metrics()["loss"].to_numpy()
    assert len(loss) == cfg.train.num_steps and abs(loss[-1] - loss[0]) > 1e-3  # it trained
