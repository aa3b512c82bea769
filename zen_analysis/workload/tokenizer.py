"""Tokenizers trained locally on the corpus: a byte-level BPE (``data.tokenizer=bpe``, cached under
``data/tokenizers/<corpus hash>-v<vocab>/``) or a word-level vocabulary (``data.tokenizer=words``, cached under
``data/tokenizers/<corpus hash>-words-v<vocab>-m<min_count>/``).

Context: no pretrained vocabulary can be downloaded offline, and training a byte-level BPE with the
``tokenizers`` library takes seconds on the default corpus. BPE ids are
assigned in merge order, so frequent pieces get small ids: the contiguous-partition skew the Zen paper reports
for frequency-sorted vocabularies (its C3) appears here for the same reason, not by construction.

The word vocabulary is what the paper's LSTM on One Billion Word has: one id per word, ids by descending corpus
frequency, and a long tail of rare types. On code a "word" is an identifier, a number or one punctuation
character (:data:`WORD_PATTERN`); whitespace is dropped. Ids past 65,535 make the token cache uint32 (the default
corpus's word vocabulary is that large).

Id 0 is ``<|endoftext|>``, appended between documents in the token stream; the word vocabulary's id 1 is
``[UNK]``.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from zen_analysis import paths
from zen_analysis.atomic import atomic_write_text, file_lock

EOS = "<|endoftext|>"
UNK = "[UNK]"
"""The word vocabulary's unknown token (id 1): every type below ``data.min_count`` or past ``data.vocab_size``."""
WORD_PATTERN = r"[\p{L}_][\p{L}\p{N}_]*|\p{N}[\p{L}\p{N}_]*|[^\s\p{L}\p{N}_]"
"""A word: an identifier (a letter or ``_``, then letters, digits, ``_``), a number (a digit, then letters, digits,
``_``, so Python literals such as ``0x1F``, ``1_000`` and ``3j`` stay whole; ``3.14`` is ``3`` ``.`` ``14``), or a
single other non-space character. Whitespace between words is dropped."""


def cache_name(corpus_sha256: str, vocab_size: int, *, kind: str = "bpe", min_count: int = 2) -> str:
    """The name both caches (tokenizer and token streams) start with: ``<hash>-v<vocab>`` for the BPE (unchanged,
    so existing caches stay valid), ``<hash>-words-v<vocab>-m<min_count>`` for the word vocabulary."""
    if kind == "words":
        return f"{corpus_sha256[:16]}-words-v{vocab_size}-m{min_count}"
    assert kind == "bpe", kind
    return f"{corpus_sha256[:16]}-v{vocab_size}"


def tokenizer_path(corpus_sha256: str, vocab_size: int, *, kind: str = "bpe", min_count: int = 2) -> Path:
    name = cache_name(corpus_sha256, vocab_size, kind=kind, min_count=min_count)
    return paths.tokenizers_dir() / name / "tokenizer.json"


def word_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """Splits text into the words of :data:`WORD_PATTERN`: the pattern marks what to keep (``invert=True``) and the
    rest, whitespace only, is removed."""
    return pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="removed", invert=True)


def train_word_tokenizer(texts: list[str], vocab_size: int, *, min_count: int = 2) -> Tokenizer:
    """A word-level tokenizer: EOS (id 0), ``[UNK]`` (id 1), then every type seen at least ``min_count`` times, most
    frequent first, up to ``vocab_size`` entries in all.

    ``WordLevelTrainer`` orders its vocabulary by descending count (ties by the word itself, so the result is
    deterministic) after the special tokens, and neither special can be a word (the pre-tokenizer splits their
    brackets off): ids are frequency ranks, as in One Billion Word's vocabulary file. A test recounts the corpus and
    checks the order."""
    tok = Tokenizer(models.WordLevel(unk_token=UNK))
    tok.pre_tokenizer = word_pre_tokenizer()
    trainer = trainers.WordLevelTrainer(
        vocab_size=vocab_size, min_frequency=min_count, special_tokens=[EOS, UNK], show_progress=False
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    assert tok.token_to_id(EOS) == 0 and tok.token_to_id(UNK) == 1
    return tok


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE with ``vocab_size`` entries (including the 256 byte symbols and EOS)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def load_or_train(
    texts: list[str], *, corpus_sha256: str, vocab_size: int, kind: str = "bpe", min_count: int = 2
) -> Tokenizer:
    """The cached tokenizer of this ``kind`` (``bpe`` or ``words``) for this corpus and size, training it on
    ``texts`` on first use."""
    path = tokenizer_path(corpus_sha256, vocab_size, kind=kind, min_count=min_count)
    with file_lock(path.with_suffix(".lock")):
        if not path.exists():
            if kind == "words":
                tok = train_word_tokenizer(texts, vocab_size, min_count=min_count)
            else:
                tok = train_tokenizer(texts, vocab_size)
            atomic_write_text(path, tok.to_str())
    return Tokenizer.from_file(str(path))
