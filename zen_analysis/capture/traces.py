"""The trace store: captured sparse gradients as Parquet shards, plus a per-run ``manifest.json``.

Layout of ``data/traces/<run_id>/``::

    manifest.json                      config, versions, git commit, corpus hash, captured tensors
    rank000-shard00000.parquet         one file per (rank, shard of captured steps), one row group per step
    ...

Each row is one (step, worker, tensor): ``step, worker, rank, tensor, kind, numel, shape, nnz, indices, values``.
``indices`` are flat positions in the flattened tensor, ``list<int32>`` when every tensor of the shard has fewer
than 2**31 elements, else ``list<int64>``; ``values`` are ``list<float32>``. ``kind`` is ``natural`` (the raw
embedding gradient), ``topk`` (DGC top-k after error feedback), or for local SGD's pseudo-gradients ``pseudo`` and
``pseudo_topk`` (before and after selection, :mod:`zen_analysis.capture.pseudo`). The file's key-value metadata carries
``schema_version``; readers refuse versions they do not know.

Shards are written to a temporary name and renamed, so a run killed mid-way leaves every completed shard
readable. Every data page carries a CRC32 checksum (Parquet page checksums), verified on read.
:class:`TraceReader` streams one row group at a time and reports as :class:`TraceError` naming the file: a
missing or malformed manifest, an unknown schema version, a truncated or corrupt file (bad checksum, undecodable
page), and records that break the store's invariants (:mod:`zen_analysis.capture.schema` holds those checks).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from zen_analysis import paths
from zen_analysis.atomic import atomic_path, atomic_write_json, file_sha256
from zen_analysis.capture.schema import (
    KINDS,
    SCHEMA_VERSION,
    SUPPORTED_SCHEMA_VERSIONS,
    TraceError,
    check_manifest,
    check_records,
    one_chunk,
)
from zen_analysis.paths import RUN_ID

_SCALAR_COLUMNS = ["step", "worker", "rank", "tensor", "kind", "numel", "nnz"]


@dataclass
class SparseGrad:
    """The non-zeros of one worker's gradient of one tensor at one step.

    Shape legend: K = number of non-zeros. ``indices_K`` index the flattened tensor (row-major).
    """

    step: int
    worker: int
    rank: int
    tensor: str
    kind: str
    shape: tuple[int, ...]
    indices_K: torch.Tensor
    values_K: torch.Tensor

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1

    @property
    def nnz(self) -> int:
        return int(self.indices_K.numel())

    @property
    def density(self) -> float:
        return self.nnz / self.numel

    def to_dense(self) -> torch.Tensor:
        dense_N = torch.zeros(self.numel, dtype=self.values_K.dtype)
        dense_N[self.indices_K.long()] = self.values_K
        return dense_N.view(self.shape)

    @classmethod
    def from_dense(cls, grad: torch.Tensor, *, step: int, worker: int, rank: int, tensor: str, kind: str) -> SparseGrad:
        flat_N = grad.detach().reshape(-1)
        idx_K = torch.nonzero(flat_N, as_tuple=True)[0]
        return cls(step, worker, rank, tensor, kind, tuple(grad.shape), idx_K.cpu(), flat_N[idx_K].float().cpu())


def shard_name(rank: int, shard: int) -> str:
    return f"rank{rank:03d}-shard{shard:05d}.parquet"


class TraceWriter:
    """Buffers one rank's records and writes a shard every ``steps_per_shard`` captured steps."""

    def __init__(self, directory: Path, *, rank: int, run_id: str, world_size: int, steps_per_shard: int) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.rank = rank
        self.run_id = run_id
        self.world_size = world_size
        self.steps_per_shard = steps_per_shard
        self._steps: list[list[SparseGrad]] = []  # one list of records per buffered step
        self._current: list[SparseGrad] = []
        self._num_shards = 0
        self.bytes_written = 0
        self.shards: dict[str, str] = {}
        """The sha256 of every shard this writer has written, by file name (what a checkpoint records)."""

    def add(self, rec: SparseGrad) -> None:
        if rec.kind not in KINDS:
            raise ValueError(f"record kind {rec.kind!r} is not one of {KINDS}")
        self._current.append(rec)

    def end_step(self) -> None:
        """Close the current captured step; write a shard when enough steps are buffered."""
        if self._current:
            self._steps.append(self._current)
            self._current = []
        if len(self._steps) >= self.steps_per_shard:
            self.flush()

    def flush(self) -> None:
        if self._current:
            self.end_step()
        if not self._steps:
            return
        numel_max = max(r.numel for recs in self._steps for r in recs)
        index_type = pa.int32() if numel_max < 2**31 else pa.int64()
        index_np = np.int32 if numel_max < 2**31 else np.int64
        schema = pa.schema(
            [
                ("step", pa.int32()),
                ("worker", pa.int32()),
                ("rank", pa.int32()),
                ("tensor", pa.string()),
                ("kind", pa.string()),
                ("numel", pa.int64()),
                ("shape", pa.list_(pa.int64())),
                ("nnz", pa.int64()),
                ("indices", pa.list_(index_type)),
                ("values", pa.list_(pa.float32())),
            ],
            metadata={
                "schema_version": str(SCHEMA_VERSION),
                "run_id": self.run_id,
                "rank": str(self.rank),
                "world_size": str(self.world_size),
            },
        )
        path = self.directory / shard_name(self.rank, self._num_shards)
        with atomic_path(path) as tmp:
            # Sorted indices delta-encode to a few bits each (runs of a row's consecutive elements to almost
            # nothing): about 200x smaller than zstd alone on natural embedding gradients.
            with pq.ParquetWriter(
                tmp,
                schema,
                compression="zstd",
                write_page_checksum=True,
                use_dictionary=["tensor", "kind"],
                column_encoding={"indices.list.element": "DELTA_BINARY_PACKED"},
            ) as writer:
                for recs in self._steps:
                    writer.write_table(_records_table(recs, schema, index_np), row_group_size=len(recs))
        self.bytes_written += path.stat().st_size
        self.shards[path.name] = file_sha256(path)
        self._num_shards += 1
        self._steps = []

    def close(self) -> None:
        self.flush()

    def state_dict(self) -> dict:
        """Where the writer stands, with nothing buffered (call :meth:`flush` first): its shards and their sha256."""
        if self._steps or self._current:
            raise RuntimeError("TraceWriter.state_dict() with records buffered: flush() first")
        return {"num_shards": self._num_shards, "bytes_written": self.bytes_written, "shards": dict(self.shards)}

    def load_state_dict(self, state: dict) -> list[str]:
        """Continue from ``state`` (:meth:`state_dict`): this rank's shards written after it are deleted (their
        steps run again), the ones it lists must be there unchanged (``TraceError`` naming the first that is not).
        Returns the names of the shards deleted."""
        for name, digest in state["shards"].items():
            path = self.directory / name
            if not path.exists() or file_sha256(path) != digest:
                raise TraceError(
                    f"{path}: {'missing' if not path.exists() else 'changed'} since the checkpoint; the run's traces "
                    "cannot be continued from it (re-run with overwrite, or restore the shard)"
                )
        dropped = []
        for path in sorted(self.directory.glob(f"rank{self.rank:03d}-shard*.parquet")):
            if path.name not in state["shards"]:
                path.unlink()
                dropped.append(path.name)
        self._num_shards, self.bytes_written = state["num_shards"], state["bytes_written"]
        self.shards = dict(state["shards"])
        self._steps, self._current = [], []
        return dropped


def _list_array(chunks: list[np.ndarray], value_type: pa.DataType, np_type) -> pa.ListArray:
    offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
    np.cumsum([c.size for c in chunks], out=offsets[1:])
    flat = np.concatenate(chunks).astype(np_type, copy=False) if chunks else np.zeros(0, np_type)
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat, type=value_type)).cast(pa.list_(value_type))


def _records_table(recs: list[SparseGrad], schema: pa.Schema, index_np) -> pa.Table:
    index_type = schema.field("indices").type.value_type
    cols = {
        "step": pa.array([r.step for r in recs], pa.int32()),
        "worker": pa.array([r.worker for r in recs], pa.int32()),
        "rank": pa.array([r.rank for r in recs], pa.int32()),
        "tensor": pa.array([r.tensor for r in recs], pa.string()),
        "kind": pa.array([r.kind for r in recs], pa.string()),
        "numel": pa.array([r.numel for r in recs], pa.int64()),
        "shape": pa.array([list(r.shape) for r in recs], pa.list_(pa.int64())),
        "nnz": pa.array([r.nnz for r in recs], pa.int64()),
        "indices": _list_array([r.indices_K.numpy() for r in recs], index_type, index_np),
        "values": _list_array([r.values_K.float().numpy() for r in recs], pa.float32(), np.float32),
    }
    return pa.table(cols, schema=schema)


# ---------------------------------------------------------------------------------------------------------------
# reading


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


def write_manifest(directory: Path, manifest: dict) -> None:
    """Write (or rewrite) a run's manifest atomically, stamping the schema version."""
    atomic_write_json(Path(directory) / "manifest.json", {**manifest, "schema_version": SCHEMA_VERSION})
