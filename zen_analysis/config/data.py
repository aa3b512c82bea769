"""``data``: where the training text comes from and how it is tokenized."""

from __future__ import annotations

from dataclasses import dataclass

DATA_SOURCES = ("stdlib", "files", "hub")
TOKENIZERS = ("bpe", "words")


@dataclass(kw_only=True)
class DataConfig:
    source: str = "stdlib"
    """``stdlib`` (the running interpreter's standard-library .py files, offline), ``files`` or ``hub``."""
    files: tuple[str, ...] = ()
    """With source=files: text files or directories (all files below a directory are read)."""
    hub_dataset: str = ""
    """With source=hub: a Hugging Face dataset name for ``datasets.load_dataset`` (needs network)."""
    hub_config: str = ""
    hub_split: str = "train"
    text_field: str = "text"
    max_bytes: int = 0
    """Cap on the corpus size in bytes (whole documents, in a fixed order); 0 takes everything."""
    vocab_size: int = 8192
    """``bpe``: size of the byte-level BPE trained locally on the corpus (the model's vocabulary). ``words``: the cap
    on the word vocabulary (the most frequent types, the two specials included); smaller when fewer types reach
    ``min_count``."""
    tokenizer: str = "bpe"
    """``bpe`` (byte-level BPE, ids in merge order) or ``words`` (one id per identifier, number or punctuation
    character, ids by descending training-split frequency, like One Billion Word's vocabulary: a long tail)."""
    min_count: int = 2
    """``words`` only: types seen fewer times in the training split are not in the vocabulary; they map to
    ``[UNK]``."""
    val_fraction: float = 0.02
    """Fraction of documents held out for validation (chosen by document hash, not position)."""

    def __post_init__(self) -> None:
        if self.source not in DATA_SOURCES:
            raise ValueError(f"data.source={self.source!r} is unknown; choose one of {DATA_SOURCES}")
        if self.source == "files" and not self.files:
            raise ValueError("data.source='files' needs data.files=path[,path...]")
        if self.source == "hub" and not self.hub_dataset:
            raise ValueError("data.source='hub' needs data.hub_dataset=<name on the Hugging Face hub>")
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"data.tokenizer={self.tokenizer!r} is unknown; choose one of {TOKENIZERS}")
        if self.tokenizer == "bpe" and self.vocab_size < 300:
            raise ValueError("data.vocab_size must be >= 300 (256 byte symbols plus merges and specials)")
        if self.tokenizer == "words" and self.vocab_size < 3:
            raise ValueError("data.vocab_size must be >= 3 with data.tokenizer=words (EOS, [UNK] and one word)")
        if self.min_count < 1:
            raise ValueError(f"data.min_count must be >= 1, got {self.min_count}")
        if not 0.0 < self.val_fraction < 0.5:
            raise ValueError("data.val_fraction must be in (0, 0.5)")
