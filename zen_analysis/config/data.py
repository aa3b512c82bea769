"""``data``: where the training text comes from and how it is tokenized, or the synthetic CTR data DeepFM trains on."""

from __future__ import annotations

from dataclasses import dataclass, fields

DATA_SOURCES = ("stdlib", "files", "hf", "criteo-synth")
TOKENIZERS = ("bpe", "words")
CTR_SOURCES = ("criteo-synth",)
"""Sources of click-through-rate samples (``zen_analysis.workload.ctr``) rather than text: ``model.arch=deepfm``
data."""
CTR_FIELD_ORDERS = ("cardinality", "criteo")


@dataclass(kw_only=True)
class DataConfig:
    source: str = "stdlib"
    """``stdlib`` (the running interpreter's standard-library .py files, offline), ``files`` (text files) or ``hf``
    (a ``datasets`` dataset: a builder over local files, a ``save_to_disk`` folder or a hub dataset): text for the
    language models; ``criteo-synth``: Criteo-like click-through-rate samples generated offline for DeepFM
    (``zen_analysis.workload.ctr``; the ``ctr_*`` fields below, and none of the text fields, apply to it). The
    earlier ``hub`` source is ``hf`` (mapped with a notice)."""
    files: tuple[str, ...] = ()
    """With source=files: text files or directories (all files below a directory are read)."""
    hf_builder: str = ""
    """With source=hf: what ``datasets.load_dataset`` loads: a packaged builder over ``hf_files`` (``text``,
    ``json``, ``csv``, ``parquet``; left empty, inferred from the files' extension) or a dataset's name on the hub
    (needs the network unless it is in the ``datasets`` cache)."""
    hf_config: str = ""
    """With source=hf: the builder's configuration name, if it has several (``wikitext-2-raw-v1``)."""
    hf_files: tuple[str, ...] = ()
    """With source=hf: local data files for the builder (comma-separated on the command line; globs allowed)."""
    hf_disk: str = ""
    """With source=hf: a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``, read with
    ``datasets.load_from_disk`` (instead of ``hf_builder``)."""
    hf_split: str = "train"
    """With source=hf: the split to read; the toolkit holds out its own validation documents from it
    (``val_fraction``)."""
    hf_column: str = "text"
    """With source=hf: the column holding each document's text."""
    hf_streaming: bool = False
    """With source=hf: read the dataset as a stream (``streaming=True``) for corpora that do not fit in memory or
    on disk; needs ``max_bytes`` (the documents are read in order until it is reached)."""
    max_bytes: int = 0
    """Cap on the corpus size in bytes (whole documents, in a fixed order); 0 takes everything."""
    vocab_size: int = 8192
    """``bpe``: size of the byte-level BPE trained locally on the corpus (the model's vocabulary). ``words``: the cap
    on the word vocabulary (the most frequent types, the two specials included); smaller when fewer types reach
    ``min_count``."""
    tokenizer: str = "bpe"
    """``bpe`` (byte-level BPE trained on the corpus, ids in merge order), ``words`` (one id per identifier, number or
    punctuation character, ids by descending training-split frequency, like One Billion Word's vocabulary: a long
    tail), or a pretrained tokenizer: a hub id or a folder written by ``save_pretrained`` (a fast tokenizer), whose
    ids the corpus is cut into (``vocab_size`` and ``min_count`` then do not apply). With ``model.pretrained`` it
    is that checkpoint's tokenizer, always."""
    min_count: int = 2
    """``words`` only: types seen fewer times in the training split are not in the vocabulary; they map to
    ``[UNK]``."""
    val_fraction: float = 0.02
    """Fraction of documents held out for validation (chosen by document hash, not position)."""
    ctr_rows: int = 1_000_000
    """``criteo-synth``: embedding rows in all (the id space): Criteo Kaggle's 26 field cardinalities scaled down
    proportionally to about this total, each field at least 2 rows (so the total can exceed it by a few rows)."""
    ctr_zipf: float = 1.1
    """``criteo-synth``: Zipf exponent of the ids within each field (id k of a field drawn with probability
    proportional to (k + 1) ** -ctr_zipf before the ids are renumbered by frequency)."""
    ctr_dense: int = 13
    """``criteo-synth``: dense (count) features per sample, log-transformed as Criteo's 13 usually are."""
    ctr_train_samples: int = 600_000
    """``criteo-synth``: samples in the training split (batches draw from it with replacement)."""
    ctr_val_samples: int = 60_000
    """``criteo-synth``: samples in the validation split (same generator, other draws)."""
    ctr_field_order: str = "cardinality"
    """``criteo-synth``: how the 26 fields follow one another in the id space: ``cardinality`` (smallest field first)
    or ``criteo`` (C1..C26). The samples and labels are the same; only the ids' layout, and so the skew across
    contiguous partitions of the embedding, differs (see ``zen_analysis.workload.ctr``)."""
    ctr_seed: int = 0
    """``criteo-synth``: seed of the generator (the ids, dense features, teacher model and labels)."""

    def __post_init__(self) -> None:
        if self.source not in DATA_SOURCES:
            raise ValueError(f"data.source={self.source!r} is unknown; choose one of {DATA_SOURCES}")
        if self.source == "files" and not self.files:
            raise ValueError("data.source='files' needs data.files=path[,path...]")
        self._check_hf()
        if not self.tokenizer:
            raise ValueError(f"data.tokenizer is empty: {' or '.join(TOKENIZERS)}, or a pretrained tokenizer's hub id")
        if self.tokenizer == "bpe" and self.vocab_size < 300:
            raise ValueError("data.vocab_size must be >= 300 (256 byte symbols plus merges and specials)")
        if self.tokenizer == "words" and self.vocab_size < 3:
            raise ValueError("data.vocab_size must be >= 3 with data.tokenizer=words (EOS, [UNK] and one word)")
        if self.min_count < 1:
            raise ValueError(f"data.min_count must be >= 1, got {self.min_count}")
        if not 0.0 < self.val_fraction < 0.5:
            raise ValueError("data.val_fraction must be in (0, 0.5)")
        self._check_ctr()

    def _check_hf(self) -> None:
        hf = {f.name for f in fields(self) if f.name.startswith("hf_")}
        if self.source != "hf":
            changed = [f"data.{f.name}" for f in fields(self) if f.name in hf and getattr(self, f.name) != f.default]
            if changed:
                raise ValueError(
                    f"{', '.join(changed)} apply to data.source=hf only; remove them or set data.source=hf"
                )
            return
        if bool(self.hf_disk) == bool(self.hf_builder or self.hf_files):
            raise ValueError(
                "data.source=hf reads one dataset: set data.hf_builder (with data.hf_files for local files, e.g. "
                "data.hf_builder=text data.hf_files=a.txt,b.txt) or data.hf_disk=<a save_to_disk folder>, not both"
            )
        if self.hf_disk and (self.hf_config or self.hf_streaming):
            raise ValueError(
                "data.hf_disk is read whole by load_from_disk: data.hf_config and data.hf_streaming do not apply"
            )
        if self.hf_streaming and not self.max_bytes:
            raise ValueError(
                "data.hf_streaming=true reads the stream until data.max_bytes: set it (e.g. data.max_bytes=50000000)"
            )
        if not self.hf_column:
            raise ValueError("data.hf_column names the text column; it cannot be empty")

    def _check_ctr(self) -> None:
        ctr_fields = [f for f in fields(self) if f.name.startswith("ctr_")]
        if self.source not in CTR_SOURCES:
            changed = [f"data.{f.name}" for f in ctr_fields if getattr(self, f.name) != f.default]
            if changed:
                raise ValueError(
                    f"{', '.join(changed)} apply to data.source=criteo-synth only; remove them or set "
                    "data.source=criteo-synth"
                )
            return
        if self.ctr_rows < 2 * 26:
            raise ValueError(
                f"data.ctr_rows={self.ctr_rows} is too small: the 26 fields need at least 2 rows each (>= 52)"
            )
        if self.ctr_rows >= 2**31:
            raise ValueError(
                f"data.ctr_rows={self.ctr_rows} does not fit the int32 id files: use fewer than 2**31 rows"
            )
        if not 0.0 < self.ctr_zipf <= 3.0:
            raise ValueError(f"data.ctr_zipf={self.ctr_zipf} must be in (0, 3] (Criteo-like skew: about 1.1)")
        if self.ctr_dense < 1:
            raise ValueError(f"data.ctr_dense must be >= 1 (Criteo has 13), got {self.ctr_dense}")
        if self.ctr_train_samples < 1000 or self.ctr_val_samples < 100:
            raise ValueError(
                "data.ctr_train_samples must be >= 1000 and data.ctr_val_samples >= 100 (the label "
                "model is calibrated on the training split)"
            )
        if self.ctr_field_order not in CTR_FIELD_ORDERS:
            raise ValueError(
                f"data.ctr_field_order={self.ctr_field_order!r} is unknown; choose one of {CTR_FIELD_ORDERS}"
            )
