"""From a run's traces to tidy characterization tables (``zen-analysis characterize <run>``).

For every captured tensor and step, the workers' index sets are read once (indices only, one step at a time,
so peak memory does not grow with the number of steps) and turned into the paper's metrics. Tables, written to
``data/derived/<run_id>/characterize/`` as Parquet (one row group per step; see *Where* below):

=================  ==========================================================================================
``density``        tensor, granularity, step, worker, numel, nnz, density
``overlap``        tensor, granularity, step, worker_a, worker_b, overlap  (every pair of workers)
``densification``  tensor, granularity, step, n, union_nnz, mean_nnz, gamma  (the first n workers)
``skew``           tensor, granularity, step, worker, num_partitions, skewness, shares  (worker -1: the union)
``drift``          tensor, granularity, step, next_step, worker, jaccard  (worker -1: the union)
``imbalance``      tensor, granularity, step, n, owner, push, pull  (first n workers, n partitions)
=================  ==========================================================================================

Documented choices:

* **Worker order.** "The first n workers" are the n smallest worker ids (rank-major: worker = rank * V + v).
  Every worker draws independent batches, so any fixed order is a fair sample; the ascending one is simply
  reproducible.
* **n.** Powers of two 2, 4, ..., up to the number of workers W (and W itself); partitions 2, 4, ..., 128.
* **Granularity.** Top-k tensors are analysed per element. Natural (embedding) tensors are analysed per row by
  default (``natural_granularity="row"``, numel = number of rows): a touched row has all its elements non-zero,
  so overlap and densification are identical at both granularities and row sets are ``hidden_size`` times
  smaller. ``natural_granularity="element"`` analyses flat element indices instead.
* **Where.** ``data/derived/<run_id>/characterize/<granularity>-seed<hash_seed>/``: each choice of options its
  own directory, built in a temporary directory and swapped in whole when every table is done, so a failed run
  (a corrupt shard, Ctrl-C) leaves the previous tables as they were (``zen_analysis.derived``).
* **Owners for imbalance.** ``contiguous`` (even ranges, as Sparse PS / OmniReduce) and ``hash`` (Zen's h0 with
  ``hash_seed``).

* **Incomplete traces.** Only when asked for (``allow_missing=True``, ``--allow-missing``) are the tables built
  from a store missing some of its shards: worker ids are then the records' own (not positions), "the first n
  workers" the n smallest present, and the stamp, every table's Parquet metadata (``zen_analysis.missing``) and
  each DataFrame :func:`load_tables` returns (``attrs["missing"]``) name the missing workers and steps.

Re-running reuses the tables unless the traces or this module's ``VERSION`` changed (``stamp.json``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from tqdm.auto import tqdm

from zen_analysis.atomic import atomic_dir, atomic_write_json
from zen_analysis.capture.reader import TraceReader
from zen_analysis.capture.traces import TraceError
from zen_analysis.derived import read_table
from zen_analysis.sparsity.metrics import (
    contiguous_owner,
    imbalance_ratios,
    jaccard,
    pairwise_overlap_ratios,
    partition_shares,
    rows_of,
)
from zen_analysis.zen.hashing import hash_owner

__all__ = ["CharacterizeOptions", "characterize", "load_tables"]

VERSION = 1
PARTITION_COUNTS = (2, 4, 8, 16, 32, 64, 128)
TABLES = ("density", "overlap", "densification", "skew", "drift", "imbalance")
UNION = -1
"""Worker id used for the union (aggregate) of all workers' sets."""


@dataclass(kw_only=True)
class CharacterizeOptions:
    natural_granularity: str = "row"
    """``row`` or ``element`` for natural (embedding) tensors; top-k tensors are always per element."""
    hash_seed: int = 0
    """Seed of Zen's h0 for the hash owner."""

    def __post_init__(self) -> None:
        if self.natural_granularity not in ("row", "element"):
            raise ValueError("natural_granularity must be 'row' or 'element'")


def worker_counts(num_workers: int) -> list[int]:
    """2, 4, 8, ... up to ``num_workers``, plus ``num_workers`` itself."""
    out = [n for n in (2**k for k in range(1, 31)) if n <= num_workers]
    if num_workers >= 2 and (not out or out[-1] != num_workers):
        out.append(num_workers)
    return out


def tables_dir(reader: TraceReader, options: CharacterizeOptions) -> Path:
    """Where the tables of ``reader``'s traces under ``options`` live."""
    return reader.derived_dir / "characterize" / f"{options.natural_granularity}-seed{options.hash_seed}"


MISSING_KEY = b"zen_analysis.missing"
"""The Parquet metadata key of a table's note on missing traces (:meth:`TraceReader.missing_note`)."""


def _stamp(reader: TraceReader, options: CharacterizeOptions) -> dict:
    stamp = {"version": VERSION, "options": asdict(options), "files": reader.fingerprint()}
    if reader.missing:  # only then: the tables of a complete store keep their stamp
        stamp["missing"] = reader.missing_note()
    return stamp


class _TableWriters:
    """One Parquet writer per table in ``out`` (a temporary directory), each step appended as a row group."""

    def __init__(self, out: Path, *, missing: str = "") -> None:
        self.out = out
        self.missing = missing
        self._writers: dict[str, pq.ParquetWriter] = {}

    def append(self, name: str, rows: list[dict]) -> None:
        if not rows:
            return
        table = pa.Table.from_pylist(rows)
        if name not in self._writers:
            schema = table.schema.with_metadata({MISSING_KEY: self.missing.encode()}) if self.missing else table.schema
            self._writers[name] = pq.ParquetWriter(
                self.out / f"{name}.parquet", schema, compression="zstd", write_page_checksum=True
            )
        self._writers[name].write_table(table.cast(self._writers[name].schema))

    def close(self) -> None:
        for w in self._writers.values():
            w.close()


def _step_rows(tensor: str, gran: str, step: int, numel: int, sets: dict[int, torch.Tensor], opts) -> dict:
    workers = sorted(sets)
    ordered = [sets[w] for w in workers]
    rows: dict[str, list[dict]] = {t: [] for t in TABLES}
    base = {"tensor": tensor, "granularity": gran, "step": step}
    for w, s in zip(workers, ordered):
        rows["density"].append({**base, "worker": w, "numel": numel, "nnz": s.numel(), "density": s.numel() / numel})
    pairs = pairwise_overlap_ratios(ordered)
    iu, ju = np.triu_indices(len(workers), k=1)
    for a, b, r in zip(iu, ju, pairs):
        rows["overlap"].append({**base, "worker_a": workers[a], "worker_b": workers[b], "overlap": float(r)})
    union = torch.unique(torch.cat(ordered)) if ordered else torch.zeros(0, dtype=torch.long)
    for n in worker_counts(len(workers)):
        sub = ordered[:n]
        mean = sum(s.numel() for s in sub) / n
        u = torch.unique(torch.cat(sub)).numel()
        rows["densification"].append(
            {**base, "n": n, "union_nnz": u, "mean_nnz": mean, "gamma": u / mean if mean else float("nan")}
        )
        for owner_name, own in (("contiguous", contiguous_owner(numel, n)), ("hash", hash_owner(n, opts.hash_seed))):
            push, pull = imbalance_ratios(sub, numel, own, n)
            rows["imbalance"].append({**base, "n": n, "owner": owner_name, "push": push, "pull": pull})
    for w, s in list(zip(workers, ordered)) + [(UNION, union)]:
        for p in PARTITION_COUNTS:
            shares = partition_shares(s, numel, p)
            skew = float("nan") if np.isnan(shares).any() else float(p * shares.max())
            rows["skew"].append({**base, "worker": w, "num_partitions": p, "skewness": skew, "shares": shares.tolist()})
    return rows, union


def characterize(
    run: str | Path,
    *,
    options: CharacterizeOptions | None = None,
    force: bool = False,
    progress: bool = True,
    allow_missing: bool = False,
) -> Path:
    """Compute (or reuse) the characterization tables of ``run``; returns their directory,
    ``data/derived/<run_id>/characterize/<granularity>-seed<hash_seed>/`` (:func:`tables_dir`).

    The tables are computed into a temporary directory that replaces the previous one only once all are
    written: an error on the way (a corrupt shard, an interrupt) leaves the previous tables untouched.
    ``allow_missing``: of a store missing some shards, the tables of what is left, saying so (module docstring)."""

    opts = options or CharacterizeOptions()
    reader = TraceReader(run, allow_missing=allow_missing)
    out = tables_dir(reader, opts)
    stamp = _stamp(reader, opts)
    stamp_path = out / "stamp.json"
    if not force and stamp_path.exists() and json.loads(stamp_path.read_text()) == stamp:
        return out
    with atomic_dir(out) as tmp:
        _compute(reader, opts, tmp, progress=progress, tqdm=tqdm)
        atomic_write_json(tmp / "stamp.json", stamp)
    return out


def _compute(reader: TraceReader, opts: CharacterizeOptions, out: Path, *, progress: bool, tqdm) -> None:
    tensors = reader.manifest["tensors"]
    writers = _TableWriters(out, missing=reader.missing_note())
    prev: dict[str, tuple[int, dict[int, torch.Tensor], torch.Tensor]] = {}
    try:
        for step in tqdm(reader.steps(), desc=f"characterize {reader.run_id}", unit="step", disable=not progress):
            for tensor, sets in reader.worker_index_sets(step).items():  # stored sorted and unique
                info = tensors[tensor]
                row_level = info["kind"] == "natural" and opts.natural_granularity == "row"
                width = int(info["shape"][-1])
                by_worker = {w: rows_of(s, width) if row_level else s for w, s in sets.items()}
                gran = "row" if row_level else "element"
                numel = int(info["shape"][0]) if row_level else int(info["numel"])
                rows, union = _step_rows(tensor, gran, step, numel, by_worker, opts)
                if tensor in prev:
                    p_step, p_sets, p_union = prev[tensor]
                    base = {"tensor": tensor, "granularity": gran, "step": p_step, "next_step": step}
                    for w in sorted(set(p_sets) & set(by_worker)):
                        rows["drift"].append({**base, "worker": w, "jaccard": jaccard(p_sets[w], by_worker[w])})
                    rows["drift"].append({**base, "worker": UNION, "jaccard": jaccard(p_union, union)})
                prev[tensor] = (step, by_worker, union)
                for name, r in rows.items():
                    writers.append(name, r)
    finally:
        writers.close()


def load_tables(
    run: str | Path,
    *,
    options: CharacterizeOptions | None = None,
    characterize_if_missing: bool = True,
    allow_missing: bool = False,
) -> dict[str, pd.DataFrame]:
    """The characterization tables of ``run`` as DataFrames (computing them first if needed); with
    ``allow_missing`` (of a store missing some shards) each one's ``attrs["missing"]`` names what it lacks."""
    opts = options or CharacterizeOptions()
    out = (
        characterize(run, options=opts, progress=False, allow_missing=allow_missing)
        if characterize_if_missing
        else tables_dir(TraceReader(run, allow_missing=allow_missing), opts)
    )
    for attempt in range(3):
        stamp = _read_text(out / "stamp.json")
        try:
            tables = {
                name: read_table(out / f"{name}.parquet") for name in TABLES if (out / f"{name}.parquet").exists()
            }
        except (OSError, pa.ArrowException) as exc:  # a damaged table: recompute it once, if allowed
            if not characterize_if_missing or attempt:
                raise TraceError(
                    f"{out}: a table cannot be read ({exc}); run `zen-analysis characterize --force`"
                ) from None
            characterize(run, options=opts, force=True, progress=False, allow_missing=allow_missing)
            continue
        if _read_text(out / "stamp.json") == stamp:  # not swapped for a newer set while we read
            note = json.loads(stamp).get("missing", "") if stamp else ""
            for df in tables.values():
                df.attrs["missing"] = note
            return tables
    raise TraceError(f"{out}: the tables kept changing while being read (another characterize running?)")


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
