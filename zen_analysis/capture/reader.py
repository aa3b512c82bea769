"""Reading the trace store (:mod:`zen_analysis.capture.traces` writes it): a run's directory found by id or path,
its manifest and shards checked, records streamed one row group at a time and filtered by tensor / step / worker /
rank / kind; every damage reported as a :class:`~zen_analysis.capture.schema.TraceError` naming the file."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from zen_analysis import paths
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


class TraceReader:
    """Streams the records of one run, filtered by tensor / step / worker / rank / kind."""

    def __init__(self, run: str | Path) -> None:
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
        self.files = sorted(self.directory.glob("rank*-shard*.parquet"))
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

    def fingerprint(self) -> list[list]:
        """(name, size, mtime) of every shard: derived tables are reused while this is unchanged."""
        return [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in self.files]

    def _open(self, path: Path) -> pq.ParquetFile:
        try:
            pf = pq.ParquetFile(path, page_checksum_verification=True)
        except (pa.ArrowException, OSError) as exc:
            raise TraceError(
                f"{path}: not a readable Parquet file ({exc}). It is truncated or corrupt; delete it "
                "(the other shards stay readable) or re-run the capture."
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
        by_tensor: dict[str, dict[int, torch.Tensor]] = {}
        for rec in self.records(step=step, with_values=False):
            by_tensor.setdefault(rec.tensor, {})[rec.worker] = rec.indices_K.long()
        return {t: [by_worker[w] for w in sorted(by_worker)] for t, by_worker in by_tensor.items()}


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
