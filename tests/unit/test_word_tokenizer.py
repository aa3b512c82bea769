"""The word-level tokenizer (``data.tokenizer=words``): its pre-tokenizer, frequency-ranked ids, ``[UNK]``, its
caches beside the BPE's (whose paths must not move), the config fields and the ``lstm-words`` recipes."""

import json
from collections import Counter

import numpy as np
import pytest

from zen_analysis import paths, recipes
from zen_analysis.config import DataConfig, ExperimentConfig, apply_overrides
from zen_analysis.workload.batches import prepare
from zen_analysis.workload.corpus import load_corpus
from zen_analysis.workload.tokenizer import EOS, UNK, tokenizer_path, train_word_tokenizer, word_pre_tokenizer

SMALL = DataConfig(source="stdlib", max_bytes=300_000, vocab_size=512)


def _words(text: str) -> list[str]:
    return [w for w, _ in word_pre_tokenizer().pre_tokenize_str(text)]


def test_the_pre_tokenizer_keeps_identifiers_and_numbers_whole_and_splits_punctuation_one_character_each():
    text = "def f_1(x):\n\treturn 0x1F+3.14  # héllo == _a\n"
    assert _words(text) == [
        "def",
        "f_1",
        "(",
        "x",
        ")",
        ":",
        "return",
        "0x1F",
        "+",
        "3",
        ".",
        "14",
        "#",
        "héllo",
        "=",
        "=",
        "_a",
    ]
    assert _words("  \n\t ") == []  # whitespace alone is no word
    assert _words("[UNK]<|endoftext|>") == ["[", "UNK", "]", "<", "|", "endoftext", "|", ">"]  # specials never words


def test_ids_are_frequency_ranks_after_eos_and_unk_and_rare_types_are_unk():
    texts = ["b b b a a c\n", "b a d d d d e"]  # d 4, b 4, a 3, c 1, e 1: ties by the word
    tok = train_word_tokenizer(texts, 100, min_count=2)
    assert tok.get_vocab() == {EOS: 0, UNK: 1, "b": 2, "d": 3, "a": 4}
    assert tok.encode("a c e zzz d").ids == [4, 1, 1, 1, 3]
    kept = train_word_tokenizer(texts, 100, min_count=1)
    assert kept.token_to_id("c") == 5 and kept.token_to_id("e") == 6
    capped = train_word_tokenizer(texts, 4, min_count=1)  # two specials and the two most frequent types
    assert capped.get_vocab() == {EOS: 0, UNK: 1, "b": 2, "d": 3}


def test_on_real_code_the_vocabulary_is_every_type_seen_min_count_times_in_descending_count():
    train, _ = load_corpus(SMALL).split(SMALL.val_fraction)
    counts = Counter(w for t in train for w in _words(t))
    tok = train_word_tokenizer(train, 10**7, min_count=3)
    vocab = tok.get_vocab()
    assert vocab[EOS] == 0 and vocab[UNK] == 1
    assert set(vocab) - {EOS, UNK} == {w for w, n in counts.items() if n >= 3}
    by_id = sorted(vocab, key=vocab.get)[2:]
    assert by_id == sorted(by_id, key=lambda w: (-counts[w], w))  # ids are ranks by count, ties by the word
    assert counts[by_id[0]] == max(counts.values()) and len(vocab) > 500


def test_caches_of_the_word_vocabulary_sit_beside_the_bpe_caches_whose_paths_are_unchanged():
    bpe = prepare(SMALL, progress=False)
    sha = bpe.corpus_sha256[:16]
    assert bpe.tokens_dir == paths.tokens_dir() / f"{sha}-v512-f200"
    assert (
        bpe.tokenizer_file
        == tokenizer_path(bpe.corpus_sha256, 512)
        == paths.tokenizers_dir() / f"{sha}-v512" / "tokenizer.json"
    )
    words_cfg = DataConfig(source="stdlib", max_bytes=300_000, vocab_size=512, tokenizer="words")
    words = prepare(words_cfg, progress=False)
    assert words.tokens_dir == paths.tokens_dir() / f"{sha}-words-v512-m2-f200"
    assert words.tokenizer_file == paths.tokenizers_dir() / f"{sha}-words-v512-m2" / "tokenizer.json"
    assert words.tokenizer_file.exists() and bpe.tokenizer_file.exists()
    other = prepare(
        DataConfig(source="stdlib", max_bytes=300_000, vocab_size=512, tokenizer="words", min_count=3), progress=False
    )
    assert other.tokens_dir.name == f"{sha}-words-v512-m3-f200"
    # the word stream: EOS (0) between documents, ids below the vocabulary, frequent words small
    meta = json.loads((words.tokens_dir / "meta.json").read_text())
    ids = np.fromfile(words.tokens_dir / "train.bin", dtype=meta["dtype"])
    assert words.vocab_size == 512 and ids.max() < 512 and ids[-1] == 0
    assert (ids == 0).sum() == len(load_corpus(words_cfg).split(words_cfg.val_fraction)[0])
    assert np.median(ids) < 50 and (ids == 1).any()  # frequency-ranked, and the cap leaves a tail to [UNK]


def test_a_vocabulary_past_65536_ids_is_stored_as_uint32(tmp_path):
    words = [f"w{i}" for i in range(70_000)]
    (tmp_path / "a.txt").write_text(" ".join(words * 2))  # every word twice: all reach min_count
    (tmp_path / "b.txt").write_text(" ".join(words[::-1] * 2))
    cfg = DataConfig(source="files", files=(str(tmp_path),), tokenizer="words", vocab_size=10**6, val_fraction=0.4)
    p = prepare(cfg, progress=False)  # one file trains, the other is held out
    meta = json.loads((p.tokens_dir / "meta.json").read_text())
    assert p.vocab_size == 70_002 and meta["dtype"] == "uint32"
    ids = np.fromfile(p.tokens_dir / "train.bin", dtype=np.uint32)
    assert ids.max() == 70_001 and len(set(ids[:-1].tolist())) == 70_000  # ids past 65535 kept, none wrapped


def test_config_fields_are_checked_and_old_configs_without_them_still_load():
    assert DataConfig().tokenizer == "bpe" and DataConfig().min_count == 2
    with pytest.raises(ValueError, match="data.tokenizer is empty"):
        DataConfig(tokenizer="")
    with pytest.raises(ValueError, match="data.min_count must be >= 1"):
        DataConfig(tokenizer="words", min_count=0)
    with pytest.raises(ValueError, match="data.vocab_size must be >= 300"):
        DataConfig(vocab_size=100)
    assert DataConfig(tokenizer="words", vocab_size=100).vocab_size == 100  # no byte alphabet to hold
    with pytest.raises(ValueError, match="data.vocab_size must be >= 3"):
        DataConfig(tokenizer="words", vocab_size=2)
    chars = apply_overrides(recipes.smoke(), ["data.tokenizer=chars"])  # not bpe or words: a pretrained one's name
    with pytest.raises(ValueError, match="data.tokenizer='chars': neither bpe, words nor a pretrained tokenizer"):
        prepare(chars.data, progress=False)  # in the launcher, before any rank starts
    cfg = apply_overrides(recipes.smoke(), ["data.tokenizer=words", "data.min_count=5"])
    assert (cfg.data.tokenizer, cfg.data.min_count) == ("words", 5)
    old = recipes.smoke().to_dict()
    del old["data"]["tokenizer"], old["data"]["min_count"]  # a config.json written before the fields existed
    assert ExperimentConfig.from_dict(old) == recipes.smoke()


def test_lstm_words_recipes_are_the_lstm_recipes_on_the_word_vocabulary():
    for words, base in ((recipes.lstm_words(), recipes.lstm()), (recipes.lstm_words_smoke(), recipes.lstm_smoke())):
        assert words.data.tokenizer == "words" and base.data.tokenizer == "bpe"
        assert words.model.arch == "lstm" and words.model.hidden_size == base.model.hidden_size
        assert words.capture == base.capture and words.train == base.train and words.dist == base.dist
        assert words.sync == base.sync
        assert words.model.adaptive_cutoffs and max(words.model.adaptive_cutoffs) < words.data.vocab_size
    assert recipes.get("lstm-words").data.vocab_size > 65536 and recipes.get("lstm-words").data.min_count == 2
    smoke = recipes.get("lstm-words-smoke")
    assert 0 < smoke.data.max_bytes <= 2_000_000 and smoke.train.num_steps <= 6
