"""Text corpora as ordered lists of documents, with a content hash that keys every cache built from them.

Context: the toolkit must run offline. The default corpus is the Python standard-library source of the running
interpreter (about 31 MB of real code in ~1,800 files on Python 3.11): present on every machine, PSF-licensed,
and identical for a given interpreter version. The hash covers paths and contents, so a different interpreter
(or ``data.max_bytes``) yields a different tokenizer and token cache rather than a stale one.

Local text files are accepted too, and any ``datasets`` dataset (``data.source=hf``,
:mod:`zen_analysis.workload.hf_corpus`: local files through a packaged builder, a ``save_to_disk`` folder, or the
hub, contacted only when a hub dataset is named; a failure there says how to go offline instead of surfacing a
connection stack trace).
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from zen_analysis.config import DataConfig


@dataclass(frozen=True)
class Corpus:
    """Documents in a fixed order plus the hash that keys the caches built from them: the sha256 of their ids and
    texts, whatever the source (the bytes read, never a path, size or mtime)."""

    name: str
    doc_ids: tuple[str, ...]
    texts: tuple[str, ...]
    sha256: str

    @property
    def num_bytes(self) -> int:
        return sum(len(t.encode("utf-8")) for t in self.texts)

    def split(self, val_fraction: float) -> tuple[list[str], list[str]]:
        """(train texts, val texts): a document is held out by the hash of its id, so the split is stable
        under ``max_bytes`` and independent of document order. At least one document lands on each side."""
        threshold = int(val_fraction * 2**32)
        is_val = [int.from_bytes(hashlib.sha1(d.encode()).digest()[:4], "little") < threshold for d in self.doc_ids]
        if len(self.texts) >= 2 and not any(is_val):
            is_val[-1] = True
        if len(self.texts) >= 2 and all(is_val):
            is_val[0] = False
        train = [t for t, v in zip(self.texts, is_val) if not v]
        val = [t for t, v in zip(self.texts, is_val) if v]
        return train, val


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def _stdlib_documents() -> list[tuple[str, Path]]:
    """Every ``.py`` file under the stdlib dir, in ``sorted(root.rglob("*.py"))``'s order. The stdlib dir of a venv's
    base interpreter also holds site-packages (third-party code, not stdlib): the walk never enters it, which spares
    listing what is often most of the files there (every launch reads the corpus to key its caches)."""
    root = stdlib_root()
    found = []
    for folder, dirs, files in os.walk(root):  # rglob's walk: symlinked folders are not entered
        if folder == str(root):
            dirs[:] = [d for d in dirs if d not in ("site-packages", "dist-packages")]
        found += [Path(folder, name) for name in files if name.endswith(".py")]
    return [(p.relative_to(root).as_posix(), p) for p in sorted(found) if p.is_file()]


def _file_documents(specs: tuple[str, ...]) -> list[tuple[str, Path]]:
    out = []
    for spec in specs:
        path = Path(spec).expanduser()
        if path.is_dir():
            out.extend((p.as_posix(), p) for p in sorted(path.rglob("*")) if p.is_file())
        elif path.is_file():
            out.append((path.as_posix(), path))
        else:
            raise ValueError(f"data.files: {spec!r} is neither a file nor a directory")
    if not out:
        raise ValueError(f"data.files={specs!r} contains no files")
    return out


def load_corpus(cfg: DataConfig) -> Corpus:
    """Read the corpus that ``cfg`` names, truncated to whole documents within ``cfg.max_bytes``."""
    if cfg.source == "hf":
        from zen_analysis.workload import hf_corpus  # deferred: datasets is a slow import, its corpora only

        name, pairs = hf_corpus.documents(cfg)
    else:
        docs = _stdlib_documents() if cfg.source == "stdlib" else _file_documents(cfg.files)
        name = "stdlib" if cfg.source == "stdlib" else "files"
        pairs = []
        total = 0
        for doc_id, path in docs:
            text = _read_text(path)
            if not text.strip():
                continue
            pairs.append((doc_id, text))
            total += len(text.encode("utf-8"))
            if cfg.max_bytes and total >= cfg.max_bytes:
                break
    if len(pairs) < 2:
        raise ValueError(f"corpus {name!r} has {len(pairs)} non-empty document(s); need at least 2 (train and val)")
    # The documents themselves key the caches: a datasets fingerprint hashes paths and mtimes, not bytes.
    h = hashlib.sha256()
    for doc_id, text in pairs:
        h.update(doc_id.encode())
        h.update(b"\0")
        h.update(text.encode("utf-8"))
        h.update(b"\0")
    return Corpus(name=name, doc_ids=tuple(d for d, _ in pairs), texts=tuple(t for _, t in pairs), sha256=h.hexdigest())
