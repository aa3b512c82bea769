"""Text corpora read through Hugging Face ``datasets`` (``data.source=hf``): a packaged builder over local files
(``text``, ``json``, ``csv``, ``parquet``), a folder written by ``save_to_disk``, or a dataset on the hub, as a
list of documents for :mod:`zen_analysis.workload.corpus`.

Everything a user can get wrong is checked here, in the launcher's process, before any rank starts: a data file
that does not exist, a split or a text column the dataset does not have (each named, with what there is).

``datasets`` keys its Arrow cache of local data files, and the dataset's fingerprint, on the files' paths and
modification times only (``data_files._get_single_origin_metadata``: the mtime, not the size or bytes), so a file
replaced in place with its mtime set back was served from the old cache, and a fingerprint-keyed token cache was
stale even over a fresh ``datasets`` cache. Local files are therefore loaded into a cache folder named by the
sha256 of their bytes (:func:`content_sha256`): a changed byte is a new folder, read afresh. The tokenizer and token
cache are keyed by the documents read (:func:`zen_analysis.workload.corpus.load_corpus`), never by the fingerprint.
"""

from __future__ import annotations

import glob
import hashlib
import os
from pathlib import Path
from typing import Any

import datasets
from datasets.data_files import resolve_pattern

from zen_analysis.config import DataConfig

BUILDERS_BY_SUFFIX = {".txt": "text", ".text": "text", ".json": "json", ".jsonl": "json", ".csv": "csv"}
BUILDERS_BY_SUFFIX |= {".parquet": "parquet", ".arrow": "arrow"}
"""The packaged ``datasets`` builder a data file's extension implies, when ``data.hf_builder`` is left empty."""


def _files(cfg: DataConfig) -> list[str]:
    """``data.hf_files``, each checked: a path that exists, or a glob that matches at least one file."""
    out = []
    for spec in cfg.hf_files:
        path = Path(spec).expanduser()
        if glob.has_magic(spec):
            if not glob.glob(str(path), recursive=True):
                raise ValueError(f"data.hf_files: no file matches {spec!r}")
        elif not path.is_file():
            raise ValueError(f"data.hf_files: {spec!r} does not exist (or is not a file)")
        out.append(str(path))
    return out


def content_sha256(specs: list[str]) -> str:
    """The sha256 of the bytes of every local file ``specs`` name, each resolved as ``datasets`` resolves it (a glob
    through its own matcher, so the files hashed are the files it reads), streamed file by file."""
    h = hashlib.sha256()
    for spec in specs:
        for path in resolve_pattern(spec, base_path=os.getcwd()):
            with open(path, "rb") as f:
                h.update(hashlib.file_digest(f, "sha256").digest())  # fixed length: no separator needed
    return h.hexdigest()


def _content_cache_dir(files: list[str]) -> str:
    """``datasets``' cache folder for these files: one per content under ``HF_DATASETS_CACHE``, as its own key (path
    and mtime) misses a file rewritten with an old mtime."""
    return str(Path(datasets.config.HF_DATASETS_CACHE) / "zen_analysis-by-content" / content_sha256(files)[:16])


def builder(cfg: DataConfig) -> str:
    """The builder ``cfg`` loads with: ``data.hf_builder``, or the one the data files' extension implies."""
    if cfg.hf_builder:
        return cfg.hf_builder
    suffixes = {Path(f).suffix.lower() for f in cfg.hf_files}
    found = {BUILDERS_BY_SUFFIX.get(s) for s in suffixes}
    if len(found) != 1 or None in found:
        raise ValueError(
            f"data.hf_files with extensions {sorted(suffixes)}: set data.hf_builder to the builder that reads them "
            f"({', '.join(sorted(set(BUILDERS_BY_SUFFIX.values())))})"
        )
    return found.pop()


def _from_disk(cfg: DataConfig) -> datasets.Dataset:
    path = Path(cfg.hf_disk).expanduser()
    if not path.is_dir():
        raise ValueError(f"data.hf_disk: {cfg.hf_disk!r} is not a folder written by save_to_disk")
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if cfg.hf_split not in loaded:
            raise ValueError(f"data.hf_split={cfg.hf_split!r}: {cfg.hf_disk!r} has the splits {sorted(loaded)}")
        return loaded[cfg.hf_split]
    return loaded


def _load(cfg: DataConfig) -> Any:
    """The split ``cfg`` names, as a ``Dataset`` (or an ``IterableDataset`` when streaming)."""
    if cfg.hf_disk:
        return _from_disk(cfg)
    files = _files(cfg)
    name = builder(cfg)
    try:
        loaded = datasets.load_dataset(
            name,
            cfg.hf_config or None,
            data_files=files or None,
            split=cfg.hf_split,
            streaming=cfg.hf_streaming,
            cache_dir=_content_cache_dir(files) if files and not cfg.hf_streaming else None,
        )
    except ValueError as exc:
        if "split" in str(exc).lower():  # the message lists the splits there are
            raise ValueError(f"data.hf_split={cfg.hf_split!r}: {exc}") from exc
        raise
    except Exception as exc:  # noqa: BLE001 - any hub/network failure gets the same advice
        if files:
            raise
        raise ValueError(
            f"could not load dataset {name!r} ({type(exc).__name__}: {exc}). A dataset on the hub needs network "
            "access and HF_HUB_OFFLINE / HF_DATASETS_OFFLINE unset (or the dataset in the datasets cache); offline, "
            "point data.hf_files at local files (data.hf_builder=text data.hf_files=a.txt) or data.hf_disk at a "
            "save_to_disk folder, or use data.source=stdlib."
        ) from exc
    return loaded


def _columns(loaded: Any) -> list[str]:
    names = loaded.column_names
    if names is None:  # a stream whose features are not known before it is read
        first = next(iter(loaded), {})
        names = list(first)
    return list(names)


def documents(cfg: DataConfig) -> tuple[str, list[tuple[str, str]]]:
    """(the corpus's name, its non-empty documents as (id, text) in the dataset's order), read up to
    ``data.max_bytes`` (whole documents; 0: all)."""
    loaded = _load(cfg)
    columns = _columns(loaded)
    if cfg.hf_column not in columns:
        raise ValueError(f"data.hf_column={cfg.hf_column!r}: the dataset's columns are {columns}")
    name = f"hf:{cfg.hf_disk or builder(cfg)}" + (f"/{cfg.hf_config}" if cfg.hf_config else "")
    texts = loaded if cfg.hf_streaming else loaded.select_columns([cfg.hf_column])
    pairs, total = [], 0
    for i, row in enumerate(texts):
        text = row[cfg.hf_column]
        if not isinstance(text, str):
            raise ValueError(f"data.hf_column={cfg.hf_column!r} holds {type(text).__name__}, not text (row {i})")
        if not text.strip():
            continue
        pairs.append((f"{name}:{cfg.hf_split}:{i}", text))
        total += len(text.encode("utf-8"))
        if cfg.max_bytes and total >= cfg.max_bytes:
            break
    return name, pairs
