"""Token cache and seeded batches.

``prepare(cfg)`` turns the corpus into ``data/tokens/<corpus hash>-v<vocab>-f<val>/{train,val}.bin`` (the word
vocabulary's: ``<corpus hash>-words-v<vocab>-m<min_count>-f<val>/``), each a flat uint16 or uint32 token stream
(uint32 once the vocabulary has more than 65,536 ids), documents separated by EOS, plus ``meta.json``; it is
idempotent and safe to call from several processes. :class:`TokenData` reads the streams as memmaps.

Batches are a pure function of (seed, split, step, worker): worker ``w`` draws the same sequences whether it is
hosted by rank 0 of a 1-rank run or rank 1 of a 2-rank run. That is what makes runs reproducible and lets a
test compare a 2-rank run with a 1-rank run on the same global batch.

``data.source=criteo-synth`` is not text: :func:`prepare`, :func:`prepared_for_run` and :func:`open_data` hand it to
:mod:`zen_analysis.workload.ctr` (generated click-through-rate samples, batches with the same interface).

Shape suffixes: B sequences in a batch, T token positions of a sequence (one more in ``windows_BT``, before the shift).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from zen_analysis import paths
from zen_analysis.atomic import atomic_path, atomic_write_json, file_lock
from zen_analysis.config import CTR_SOURCES, TOKENIZERS, DataConfig
from zen_analysis.workload import ctr
from zen_analysis.workload.corpus import load_corpus
from zen_analysis.workload.tokenizer import EOS, cache_name, load_or_train, tokenizer_path

_ENCODE_CHUNK = 256  # documents per encode_batch call; bounds memory and drives the progress bar
_SPLIT_IDS = {"train": 0, "val": 1}
MASK_RATE, MASK_TOKEN, MASK_RANDOM = 0.15, 0.8, 0.1
"""BERT's masking (``model.objective=masked``): the share of positions chosen, and of those the shares made the mask
token and a random id (the rest are kept as they are)."""


@dataclass(frozen=True)
class PreparedData:
    """Where a prepared corpus lives and what it holds."""

    tokens_dir: Path
    tokenizer_file: Path
    corpus_name: str
    corpus_sha256: str
    corpus_bytes: int
    num_documents: int
    vocab_size: int
    num_train_tokens: int
    num_val_tokens: int

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["tokens_dir"] = str(self.tokens_dir)
        d["tokenizer_file"] = str(self.tokenizer_file)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> PreparedData:
        return cls(**{**d, "tokens_dir": Path(d["tokens_dir"]), "tokenizer_file": Path(d["tokenizer_file"])})


def prepared_for_run(cfg: DataConfig, run_dir: Path) -> PreparedData | ctr.PreparedCTR:
    """The data a launcher prepared for this run (``run_dir/data.json``), else :func:`prepare` it here."""
    if cfg.source in CTR_SOURCES:
        return ctr.prepared_for_run(cfg, run_dir)
    record = run_dir / "data.json"
    if record.exists():
        prepared = PreparedData.from_dict(json.loads(record.read_text()))
        if (prepared.tokens_dir / "meta.json").exists():
            return prepared
    return prepare(cfg, progress=False)


def _encode_to(
    path: Path, tok, texts: list[str], dtype: np.dtype, *, eos: int, desc: str, progress: bool, special: bool = True
) -> int:
    """``texts`` as one token stream in ``path``, ``eos`` after each document; ``special``: the tokenizer's own
    special tokens around each (a pretrained tokenizer's ``[CLS] ... [SEP]`` would repeat inside the stream)."""
    total = 0
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        for i in tqdm(range(0, len(texts), _ENCODE_CHUNK), desc=desc, unit="chunk", disable=not progress, leave=False):
            for enc in tok.encode_batch(texts[i : i + _ENCODE_CHUNK], add_special_tokens=special):
                ids = np.asarray(enc.ids + [eos], dtype=dtype)
                f.write(ids.tobytes())
                total += ids.size
    return total


@dataclass(frozen=True)
class _Cut:
    """How a corpus is cut into ids: the tokenizer, the separator between documents, the caches' name, where the
    tokenizer is kept (for export) and what the token cache's ``meta.json`` adds."""

    tok: Any
    eos: int
    name: str
    file: Path
    special: bool = True
    meta: dict = field(default_factory=dict)


def _cut(cfg: DataConfig, corpus, train_texts: list[str]) -> _Cut:
    """The tokenizer ``cfg`` names: trained here on the corpus's training split (``bpe``, ``words``), or a
    pretrained one, its truncation and padding off (a document is cut whole; the stream is windowed later)."""
    if cfg.tokenizer in TOKENIZERS:
        kind = {"kind": cfg.tokenizer, "min_count": cfg.min_count}
        tok = load_or_train(train_texts, corpus_sha256=corpus.sha256, vocab_size=cfg.vocab_size, **kind)
        name = cache_name(corpus.sha256, cfg.vocab_size, **kind)
        return _Cut(tok, tok.token_to_id(EOS), name, tokenizer_path(corpus.sha256, cfg.vocab_size, **kind))
    from zen_analysis.workload import pretrained  # deferred: transformers, pretrained tokenizers only

    fast = pretrained.fast_tokenizer(cfg.tokenizer)
    tok = Tokenizer.from_str(fast.backend_tokenizer.to_str())
    tok.no_truncation()
    tok.no_padding()
    key = hashlib.sha256(tok.to_str().encode()).hexdigest()[:16]
    folder = paths.tokenizers_dir() / f"pt-{key}"
    with file_lock(paths.tokenizers_dir() / f"pt-{key}.lock"):
        if not (folder / "tokenizer.json").exists():
            fast.save_pretrained(folder)
    meta = {"tokenizer": cfg.tokenizer, "mask_token_id": fast.mask_token_id}
    name = f"{corpus.sha256[:16]}-pt{key}"
    return _Cut(tok, pretrained.separator_id(fast), name, folder / "tokenizer.json", special=False, meta=meta)


def prepare(cfg: DataConfig, *, progress: bool = True) -> PreparedData | ctr.PreparedCTR:
    """Load the corpus, train (or load) its tokenizer and write the token streams, reusing every cache (a CTR
    source: generate its samples, :func:`zen_analysis.workload.ctr.prepare`)."""
    if cfg.source in CTR_SOURCES:
        return ctr.prepare(cfg, progress=progress)
    corpus = load_corpus(cfg)
    train_texts, val_texts = corpus.split(cfg.val_fraction)
    cut = _cut(cfg, corpus, train_texts)
    vocab = cut.tok.get_vocab_size()
    out = paths.tokens_dir() / f"{cut.name}-f{int(cfg.val_fraction * 1e4)}"
    meta_path = out / "meta.json"
    with file_lock(out / ".lock"):
        if not meta_path.exists():
            dtype = np.dtype(np.uint16 if vocab <= 2**16 else np.uint32)
            encode = {"eos": cut.eos, "progress": progress, "special": cut.special}
            n_train = _encode_to(out / "train.bin", cut.tok, train_texts, dtype, desc="tokenize train", **encode)
            n_val = _encode_to(out / "val.bin", cut.tok, val_texts, dtype, desc="tokenize val", **encode)
            atomic_write_json(
                meta_path,
                {
                    "dtype": dtype.name,
                    "vocab_size": vocab,
                    "num_train_tokens": n_train,
                    "num_val_tokens": n_val,
                    "corpus_name": corpus.name,
                    "corpus_sha256": corpus.sha256,
                    "corpus_bytes": corpus.num_bytes,
                    "num_documents": len(corpus.texts),
                    **cut.meta,
                },
            )
    meta = json.loads(meta_path.read_text())
    return PreparedData(
        tokens_dir=out,
        tokenizer_file=cut.file,
        corpus_name=meta["corpus_name"],
        corpus_sha256=meta["corpus_sha256"],
        corpus_bytes=meta["corpus_bytes"],
        num_documents=meta["num_documents"],
        vocab_size=meta["vocab_size"],
        num_train_tokens=meta["num_train_tokens"],
        num_val_tokens=meta["num_val_tokens"],
    )


def open_data(
    prepared: PreparedData | ctr.PreparedCTR, *, seq_len: int, seed: int, objective: str = "causal"
) -> TokenData | ctr.CTRData:
    """The training loop's batches of ``prepared``: :class:`TokenData` of ``seq_len`` tokens (next-token, or
    ``objective="masked"``), or CTR samples."""
    if isinstance(prepared, ctr.PreparedCTR):
        return ctr.CTRData(prepared, seed=seed)
    return TokenData(prepared, seq_len=seq_len, seed=seed, objective=objective)


class TokenData:
    """Seeded batches from a prepared token cache: next-token pairs, or with ``objective="masked"`` BERT's masked-LM
    pairs (:meth:`batch`)."""

    def __init__(self, prepared: PreparedData, *, seq_len: int, seed: int, objective: str = "causal") -> None:
        meta = json.loads((prepared.tokens_dir / "meta.json").read_text())
        self.prepared = prepared
        self.vocab_size = int(meta["vocab_size"])
        self.seq_len = seq_len
        self.seed = seed
        self.objective = objective
        self.mask_id = meta.get("mask_token_id")
        if objective == "masked" and self.mask_id is None:
            raise ValueError(
                f"model.objective=masked needs a mask token, and the tokenizer of {prepared.corpus_name!r}'s cache "
                "has none: a pretrained encoder's tokenizer has one (data.tokenizer)"
            )
        self._streams = {
            split: np.memmap(prepared.tokens_dir / f"{split}.bin", dtype=np.dtype(meta["dtype"]), mode="r")
            for split in _SPLIT_IDS
        }
        for split, stream in self._streams.items():
            if len(stream) <= seq_len + 1:
                raise ValueError(
                    f"the {split} split has {len(stream)} tokens, fewer than train.seq_len+2={seq_len + 2}: "
                    "use a larger corpus (data.max_bytes) or a shorter train.seq_len"
                )

    @property
    def input_dims(self) -> dict[str, int]:
        """What :func:`zen_analysis.workload.models.build_model` needs from the data besides ``vocab_size``: nothing."""
        return {}

    def batch(self, split: str, *, step: int, worker: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), each (batch_size, seq_len) int64: random windows drawn by (seed, split, step, worker).
        Causal: the targets are the inputs shifted by one. Masked: the inputs masked as BERT does (:meth:`_mask`),
        the targets the original ids at the chosen positions and -100 (ignored by the loss) elsewhere."""
        stream = self._streams[split]
        rng = np.random.default_rng([self.seed, _SPLIT_IDS[split], step, worker])
        starts_B = rng.integers(0, len(stream) - self.seq_len - 1, size=batch_size)
        windows_BT = np.stack([stream[s : s + self.seq_len + 1] for s in starts_B]).astype(np.int64)
        if self.objective == "masked":
            return self._mask(windows_BT[:, :-1], rng)
        xy = torch.from_numpy(windows_BT)
        return xy[:, :-1], xy[:, 1:]

    def _mask(self, ids_BT: np.ndarray, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """BERT's masking, drawn from the batch's own generator: each position chosen with probability
        ``MASK_RATE`` (at least one a sequence), a chosen one made the mask id (``MASK_TOKEN`` of them), a random id
        (``MASK_RANDOM``) or kept."""
        chosen_BT = rng.random(ids_BT.shape) < MASK_RATE
        chosen_BT[np.arange(len(ids_BT)), rng.integers(0, ids_BT.shape[1], size=len(ids_BT))] = True
        fate_BT = rng.random(ids_BT.shape)
        inputs_BT = ids_BT.copy()
        inputs_BT[chosen_BT & (fate_BT < MASK_TOKEN)] = self.mask_id
        swap_BT = chosen_BT & (fate_BT >= MASK_TOKEN) & (fate_BT < MASK_TOKEN + MASK_RANDOM)
        inputs_BT[swap_BT] = rng.integers(0, self.vocab_size, size=int(swap_BT.sum()))
        targets_BT = np.where(chosen_BT, ids_BT, -100)
        return torch.from_numpy(inputs_BT), torch.from_numpy(targets_BT)
