"""Reading the trace store (:mod:`zen_analysis.capture.traces` writes it): a run's directory found by id or path,
its manifest and shards checked, records streamed one row group at a time and filtered by tensor / step / worker /
rank / kind; every damage reported as a :class:`~zen_analysis.capture.schema.TraceError` naming the file.

**Complete, or says what it lacks.** A finished run's manifest lists every shard it wrote (``shards``: size, sha256,
rank, steps, workers). :class:`TraceReader` checks each one before reading anything: a listed shard that is absent,
of another size or of another sha256 is an error naming it, as is a shard in the directory the list does not hold.
Analysing what is left is possible only when asked for, ``TraceReader(run, allow_missing=True)`` (``--allow-missing``
on the command line): the reader then skips the shards that fail and :attr:`TraceReader.missing` /
:meth:`TraceReader.missing_note` name the workers and steps they held, for every table built from it to carry.

**Stores without a shard list** (captured before shard lists existed, or a run that has not finished: the list is
merged into the manifest at the end) are read as before, every shard present, with a :class:`UserWarning` that
they cannot be checked for missing shards; a shard that cannot be opened is still an error naming it.

Shape suffixes: K non-zeros of one record.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from zen_analysis import paths
from zen_analysis.atomic import file_sha256
from zen_analysis.capture.schema import SUPPORTED_SCHEMA_VERSIONS, TraceError, check_manifest, check_records, one_chunk
from zen_analysis.capture.traces import SparseGrad
from zen_analysis.paths import RUN_ID

_SCALAR_COLUMNS = ["step", "worker", "rank", "tensor", "kind", "numel", "nnz"]


def resolve_trace_dir(run: str | Path) -> Path:
    """A run id (looked up under data/traces first) or a path to a trace directory."""
    candidate = None
    if RUN_ID.fullmatch(str(run)):
        try:
            candidate = paths.trace_dir(str(run))
        except ValueError as exc:
            raise TraceError(str(exc)) from None
        if candidate.is_dir():
            return candidate
    p = Path(run)
    if p.is_dir():
        return p
    known = sorted(d.name for d in paths.traces_dir().glob("*") if d.is_dir()) if paths.traces_dir().is_dir() else []
    where = f" (looked in {candidate})" if candidate else ""
    raise TraceError(f"no trace directory for run {str(run)!r}{where}; known runs: {known or 'none'}")


def span(ids: list[int]) -> str:
    """Sorted ids for a person: runs of consecutive ids as ``a-b`` (``4-7, 12``), past 8 parts the first and last
    few around the count (a capture every 5 steps has no runs)."""
    parts: list[str] = []
    for i in ids:
        if parts and int(parts[-1].rsplit("-", 1)[-1]) == i - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{i}"
        else:
            parts.append(str(i))
    if len(parts) > 8:
        return f"{', '.join(parts[:3])}, ..., {', '.join(parts[-2:])} ({len(ids)} in all)"
    return ", ".join(parts)


class TraceReader:
    """Streams the records of one run, filtered by tensor / step / worker / rank / kind.

    ``allow_missing``: read a store whose manifest lists shards that are absent or damaged, skipping them (see the
    module's docstring); without it such a store is a :class:`TraceError` naming every such shard."""

    def __init__(self, run: str | Path, *, allow_missing: bool = False) -> None:
        self.directory = resolve_trace_dir(run)
        manifest_path = self.directory / "manifest.json"
        if not manifest_path.exists():
            raise TraceError(
                f"{manifest_path}: missing. Every trace directory has a manifest written at the start of the run; "
                "this directory is not a complete zen_analysis run (re-run the capture, or point at the right run)."
            )
        try:
            manifest = json.loads(manifest_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceError(f"{manifest_path}: not valid JSON ({exc}); the run directory is damaged") from None
        version = manifest.get("schema_version") if isinstance(manifest, dict) else None
        if isinstance(manifest, dict) and "schema_version" in manifest and version not in SUPPORTED_SCHEMA_VERSIONS:
            raise TraceError(
                f"{manifest_path}: schema_version {version!r} is not supported by this zen_analysis "
                f"(it reads {SUPPORTED_SCHEMA_VERSIONS}); upgrade zen_analysis or re-capture the run"
            )
        self.manifest = check_manifest(manifest, manifest_path)
        self.missing: list[dict] = []
        """The listed shards skipped under ``allow_missing``, each its manifest entry plus ``file`` and ``why``."""
        self.checked = "shards" in self.manifest
        """Whether the store lists its shards (and was checked against the list); False for an old store."""
        self.files = self._check_shards(manifest_path, allow_missing)
        self._summary: pd.DataFrame | None = None
        under_traces = self.directory.resolve().parent == paths.traces_dir().resolve()
        self.run_id = self.directory.resolve().name
        """The name the run is known by here: its directory's (a copied run is its copy, whatever its manifest's
        ``run_id`` says: that is where it was captured)."""
        if under_traces:
            self.derived_dir = paths.derived_run_dir(self.run_id)
        else:  # a trace directory elsewhere: its own corner, which no run id can name (ids never start with '_')
            key = hashlib.sha256(str(self.directory.resolve()).encode()).hexdigest()[:12]
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in self.run_id)
            self.derived_dir = paths.derived_dir() / "_external" / f"{safe}-{key}"
        """Where tables derived from these traces go: ``data/derived/<run_id>/``, keyed by the directory read."""

    def _check_shards(self, manifest_path: Path, allow_missing: bool) -> list[Path]:
        """The shards to read: every listed one that is there with its size and sha256 (a listed shard that is not,
        or an unlisted one, is a TraceError unless ``allow_missing`` lets a listed one go into :attr:`missing`);
        every shard present when the manifest lists none."""
        present = sorted(self.directory.glob("rank*-shard*.parquet"))
        if not self.checked:
            unfinished = self.manifest.get("finished") is False  # a training run's, until its end
            why = "the run has not finished" if unfinished else "it was captured before stores listed them"
            warnings.warn(
                f"{manifest_path}: lists no trace shards ({why}), so the store cannot be checked for missing or "
                f"damaged shards: the {len(present)} present are read as they are",
                UserWarning,
                stacklevel=3,
            )
            return present
        listed: dict[str, dict] = self.manifest["shards"]
        unlisted = [p for p in present if p.name not in listed]
        if unlisted:
            raise TraceError(
                f"{unlisted[0]}: not among the {len(listed)} shards {manifest_path} lists"
                + (f" (nor are {len(unlisted) - 1} more)" if len(unlisted) > 1 else "")
                + "; it is not part of this capture: move it out of the directory, or re-capture the run"
            )
        files, bad = [], []
        for name, entry in listed.items():
            path = self.directory / name
            if not path.exists():
                why = "missing"
            elif path.stat().st_size != entry["bytes"]:
                why = f"{path.stat().st_size} bytes where the manifest says {entry['bytes']} (truncated or replaced)"
            elif file_sha256(path) != entry["sha256"]:
                why = "its sha256 differs from the manifest's (corrupt or replaced)"
            else:
                files.append(path)
                continue
            bad.append({**entry, "file": name, "why": why})
        if bad and not allow_missing:
            lines = "\n".join(
                f"  {self.directory / b['file']}: {b['why']} (rank {b['rank']}: workers {span(b['workers'])} at "
                f"steps {span(b['steps'])})"
                for b in bad
            )
            raise TraceError(
                f"{self.directory}: {len(bad)} of the {len(listed)} trace shards its manifest lists cannot be read:\n"
                f"{lines}\nRe-capture the run; or, to analyse what is left, pass allow_missing=True (--allow-missing "
                "on the command line): every table then names the workers and steps it lacks."
            )
        self.missing = bad
        return sorted(files)

    def missing_note(self) -> str:
        """One line naming what the analysis of this store lacks ("" when nothing): the workers and steps of each
        shard skipped under ``allow_missing``. Every table, figure and summary built from an incomplete store
        carries it."""
        if not self.missing:
            return ""
        total = len(self.manifest["shards"])
        parts = "; ".join(
            f"workers {span(m['workers'])} at steps {span(m['steps'])} ({m['file']}: {m['why']})" for m in self.missing
        )
        return f"incomplete traces: {len(self.missing)} of {total} shards missing, so no records of {parts}"

    def fingerprint(self) -> list[list]:
        """(name, size, mtime) of every shard: derived tables are reused while this is unchanged."""
        return [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in self.files]

    def _open(self, path: Path) -> pq.ParquetFile:
        try:
            pf = pq.ParquetFile(path, page_checksum_verification=True)
        except (pa.ArrowException, OSError) as exc:
            raise TraceError(
                f"{path}: not a readable Parquet file ({exc}). It is truncated or corrupt: re-run the capture."
            ) from None
        meta = pf.schema_arrow.metadata or {}
        raw = meta.get(b"schema_version")
        version = int(raw) if raw is not None and raw.isdigit() else raw
        if version not in SUPPORTED_SCHEMA_VERSIONS:
            raise TraceError(
                f"{path}: schema_version {version!r} is not supported by this zen_analysis "
                f"(it reads {SUPPORTED_SCHEMA_VERSIONS}); upgrade zen_analysis or re-capture the run"
            )
        return pf

    def _read_row_group(self, pf: pq.ParquetFile, path: Path, i: int, columns: list[str]) -> pa.Table:
        try:
            return pf.read_row_group(i, columns=columns)
        except (pa.ArrowException, OSError) as exc:
            raise TraceError(f"{path}: row group {i} cannot be read ({exc}); the file is corrupt") from None

    def _checked(self, table: pa.Table, path: Path, i: int) -> pa.Table:
        try:
            check_records(table, self.manifest["tensors"])
        except ValueError as exc:
            raise TraceError(f"{path}: row group {i}: {exc}; the file is corrupt (re-capture the run)") from None
        return table

    def summary(self) -> pd.DataFrame:
        """One row per record with the scalar columns (no indices/values): cheap, cached."""
        if self._summary is None:
            frames = []
            for path in self.files:
                pf = self._open(path)
                for i in range(pf.num_row_groups):
                    keys = self._read_row_group(pf, path, i, _SCALAR_COLUMNS + ["shape"])
                    frames.append(self._checked(keys, path, i).select(_SCALAR_COLUMNS).to_pandas())
            df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=_SCALAR_COLUMNS)
            df["density"] = df["nnz"] / df["numel"]
            self._summary = df.sort_values(["tensor", "step", "worker"], ignore_index=True)
        return self._summary

    def tensors(self) -> list[str]:
        return sorted(self.summary()["tensor"].unique())

    def steps(self, tensor: str | None = None) -> list[int]:
        """The captured steps (of ``tensor`` only, if given: a run's gradient tensors and its pseudo-gradients,
        :mod:`zen_analysis.capture.pseudo`, are captured at different steps)."""
        df = self.summary()
        if tensor is not None:
            df = df[df["tensor"] == tensor]
        return sorted(int(s) for s in df["step"].unique())

    def workers(self) -> list[int]:
        return sorted(int(w) for w in self.summary()["worker"].unique())

    def records(
        self,
        *,
        tensor: str | None = None,
        step: int | None = None,
        worker: int | None = None,
        rank: int | None = None,
        kind: str | None = None,
        with_values: bool = True,
    ) -> Iterator[SparseGrad]:
        """Yield matching records, reading one row group at a time (memory does not grow with the run).

        ``with_values=False`` skips reading the values column (index-set analyses need only the indices);
        the records then carry empty ``values_K``.
        """
        want = {"tensor": tensor, "step": step, "worker": worker, "rank": rank, "kind": kind}
        want = {k: v for k, v in want.items() if v is not None}
        for path in self.files:
            pf = self._open(path)
            for i in range(pf.num_row_groups):
                keys = self._read_row_group(pf, path, i, list(want) or ["step"])
                mask = np.ones(keys.num_rows, dtype=bool)
                for col, value in want.items():
                    mask &= keys.column(col).to_numpy(zero_copy_only=False) == value
                if not mask.any():
                    continue
                columns = None if with_values else [c for c in pf.schema_arrow.names if c != "values"]
                table = self._checked(self._read_row_group(pf, path, i, columns), path, i)
                if not mask.all():
                    table = table.filter(pa.array(mask))
                yield from _table_records(table)

    def index_sets(self, step: int) -> dict[str, list[torch.Tensor]]:
        """Per tensor, every worker's index set (int64) at ``step``, in worker order: what the analyses of one
        step start from."""
        return {t: [by_worker[w] for w in sorted(by_worker)] for t, by_worker in self.worker_index_sets(step).items()}

    def worker_index_sets(self, step: int) -> dict[str, dict[int, torch.Tensor]]:
        """Per tensor, each worker's index set (int64) at ``step`` by worker id: under ``allow_missing`` the ids
        present need not be 0..n-1, and a table keyed by worker must say which it is."""
        by_tensor: dict[str, dict[int, torch.Tensor]] = {}
        for rec in self.records(step=step, with_values=False):
            by_tensor.setdefault(rec.tensor, {})[rec.worker] = rec.indices_K.long()
        return {t: dict(sorted(by_worker.items())) for t, by_worker in by_tensor.items()}


def _table_records(table: pa.Table) -> Iterator[SparseGrad]:
    cols = {name: table.column(name) for name in table.column_names}
    idx_col = one_chunk(cols["indices"])
    idx_flat = idx_col.values.to_numpy()
    idx_off = idx_col.offsets.to_numpy()
    if "values" in cols:
        val_col = one_chunk(cols["values"])
        val_flat, val_off = val_col.values.to_numpy(), val_col.offsets.to_numpy()
    else:
        val_flat, val_off = np.zeros(0, np.float32), np.zeros(table.num_rows + 1, np.int64)
    for j in range(table.num_rows):
        yield SparseGrad(
            step=cols["step"][j].as_py(),
            worker=cols["worker"][j].as_py(),
            rank=cols["rank"][j].as_py(),
            tensor=cols["tensor"][j].as_py(),
            kind=cols["kind"][j].as_py(),
            shape=tuple(cols["shape"][j].as_py()),
            indices_K=torch.from_numpy(idx_flat[idx_off[j] : idx_off[j + 1]].copy()),
            values_K=torch.from_numpy(val_flat[val_off[j] : val_off[j + 1]].copy()),
        )
