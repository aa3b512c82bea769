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

import codecs
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
_BUILDERS = sorted(set(BUILDERS_BY_SUFFIX.values()))


def _files(cfg: DataConfig) -> list[str]:
    """``data.hf_files``, each checked: a path to a file with something in it, or a glob that matches at least one
    such file (a glob may match empty ones too: a source tree's ``__init__.py``)."""
    out = []
    for spec in cfg.hf_files:
        path = Path(spec).expanduser()
        if glob.has_magic(spec):
            matches = [m for m in glob.glob(str(path), recursive=True) if Path(m).is_file()]
            if not matches:
                raise ValueError(f"data.hf_files: no file matches {spec!r}")
            if not any(Path(m).stat().st_size for m in matches):
                raise ValueError(
                    f"data.hf_files: every file {spec!r} matches is empty ({len(matches)} of them): point the glob "
                    "at the files that hold the text"
                )
        elif not path.is_file():
            raise ValueError(f"data.hf_files: {spec!r} does not exist (or is not a file)")
        elif not path.stat().st_size:
            raise ValueError(
                f"data.hf_files: {spec!r} is empty: there is no text to train on; remove it from data.hf_files, or "
                "write the corpus there first"
            )
        out.append(str(path))
    return out


def _matched(files: list[str]) -> list[str]:
    """The files ``files`` (paths and globs, as :func:`_files` returns them) name, in order."""
    return [m for f in files for m in (sorted(glob.glob(f, recursive=True)) if glob.has_magic(f) else [f])]


def _invalid_utf8(path: str) -> tuple[int, int] | None:
    """(byte offset, line) of the first byte of ``path`` that is not UTF-8, or ``None`` where all of it is."""
    decoder, offset, line = codecs.getincrementaldecoder("utf-8")(), 0, 1
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            pending = decoder.getstate()[0]  # the start of a character the last chunk cut (no newline in it)
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:  # exc.start counts from the pending bytes
                return offset - len(pending) + exc.start, line + exc.object[: exc.start].count(b"\n")
            offset, line = offset + len(chunk), line + chunk.count(b"\n")
    pending = decoder.getstate()[0]
    return (offset - len(pending), line) if pending else None  # the file ends inside a character


def _unreadable(cfg: DataConfig, name: str, files: list[str], cause: BaseException) -> ValueError:
    """The error to raise where the ``name`` builder failed to read ``files`` with ``cause`` (``datasets`` says
    neither which file nor what to do): the file at fault, found by reading each alone, and the fix."""
    paths = _matched(files)
    if isinstance(cause, UnicodeDecodeError):
        for path in paths:
            if where := _invalid_utf8(path):
                return ValueError(
                    f"data.hf_files: {path} is not UTF-8 text (byte {where[0]}, line {where[1]}: {cause.reason}); "
                    f"re-encode it (e.g. iconv -f latin1 -t utf-8 {path} > {Path(path).stem}-utf8{Path(path).suffix})"
                    " or remove it from data.hf_files"
                )
    culprit = paths[0] if len(paths) == 1 else next((p for p in paths if _fails_alone(cfg, name, p)), None)
    what = f"{culprit}" if culprit else f"the files {', '.join(paths[:5])}" + (" ..." if len(paths) > 5 else "")
    implied = BUILDERS_BY_SUFFIX.get(Path(culprit).suffix.lower()) if culprit else None
    if cfg.hf_builder and implied and implied != cfg.hf_builder:
        fix = f"its extension says {implied}: set data.hf_builder={implied}, or leave it empty to infer it"
    else:
        fix = f"correct the file, or set data.hf_builder to the builder that reads it ({', '.join(_BUILDERS)})"
    return ValueError(f"data.hf_files: the {name} builder cannot read {what} ({type(cause).__name__}: {cause}); {fix}")


def _fails_alone(cfg: DataConfig, name: str, path: str) -> bool:
    """Whether the ``name`` builder fails on ``path`` alone (read as a stream: no cache is written)."""
    try:
        for _ in datasets.load_dataset(name, cfg.hf_config or None, data_files=[path], split="train", streaming=True):
            pass
    except Exception:  # noqa: BLE001 - whatever stops it is what we are looking for
        return True
    return False


def _read(rows: Any, cfg: DataConfig) -> Any:
    """The rows of a stream (which reads its files only as it is iterated), a data file it cannot read said as
    :func:`_unreadable` says it."""
    try:
        yield from rows
    except Exception as exc:  # noqa: BLE001 - raised by datasets while reading, not by the caller's loop
        if not cfg.hf_files:
            raise
        raise _unreadable(cfg, builder(cfg), _files(cfg), exc) from exc


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
        if files and isinstance(exc, datasets.exceptions.DatasetGenerationError):  # a file the builder cannot read
            raise _unreadable(cfg, name, files, exc.__cause__ or exc) from exc
        if files:
            raise
        raise ValueError(
            f"could not load dataset {name!r} ({type(exc).__name__}: {exc}). A dataset on the hub needs network "
            "access and HF_HUB_OFFLINE / HF_DATASETS_OFFLINE unset (or the dataset in the datasets cache); offline, "
            "point data.hf_files at local files (data.hf_builder=text data.hf_files=a.txt) or data.hf_disk at a "
            "save_to_disk folder, or use data.source=stdlib."
        ) from exc
    return loaded


def _columns(loaded: Any, cfg: DataConfig) -> list[str]:
    names = loaded.column_names
    if names is None:  # a stream whose features are not known before it is read
        first = next(iter(_read(loaded, cfg)), {})
        names = list(first)
    return list(names)


def documents(cfg: DataConfig) -> tuple[str, list[tuple[str, str]]]:
    """(the corpus's name, its non-empty documents as (id, text) in the dataset's order), read up to
    ``data.max_bytes`` (whole documents; 0: all)."""
    loaded = _load(cfg)
    columns = _columns(loaded, cfg)
    if cfg.hf_column not in columns:
        raise ValueError(f"data.hf_column={cfg.hf_column!r}: the dataset's columns are {columns}")
    name = f"hf:{cfg.hf_disk or builder(cfg)}" + (f"/{cfg.hf_config}" if cfg.hf_config else "")
    texts = _read(loaded, cfg) if cfg.hf_streaming else loaded.select_columns([cfg.hf_column])
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
