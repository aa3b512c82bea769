"""The trace store: captured sparse gradients as Parquet shards, plus a per-run ``manifest.json``.

Layout of ``data/traces/<run_id>/``::

    manifest.json                      config, versions, git commit, corpus hash, captured tensors, and once
                                       the run has finished ``shards``: every shard written (see below)
    rank000-shard00000.parquet         one file per (rank, shard of captured steps), one row group per step
    rank000-shards.json                the shards rank 0 has written so far (its writer keeps it current)
    ...

Each row is one (step, worker, tensor): ``step, worker, rank, tensor, kind, numel, shape, nnz, indices, values``.
``indices`` are flat positions in the flattened tensor, ``list<int32>`` when every tensor of the shard has fewer
than 2**31 elements, else ``list<int64>``; ``values`` are ``list<float32>``. ``kind`` is ``natural`` (the raw
embedding gradient), ``topk`` (DGC top-k after error feedback), or for local SGD's pseudo-gradients ``pseudo`` and
``pseudo_topk`` (before and after selection, :mod:`zen_analysis.capture.pseudo`). The file's key-value metadata carries
``schema_version``; readers refuse versions they do not know.

Shards are written to a temporary name and renamed, so a run killed mid-way leaves every completed shard
readable. Every data page carries a CRC32 checksum (Parquet page checksums), verified on read.

**The store knows its shards.** As it closes a shard, each rank's writer records its size in bytes, the sha256 of
its bytes, the rank, the steps and workers it holds and its number of records per tensor, in its own list
``rank<r>-shards.json``. When the run finishes, rank 0 merges the ranks' lists into the manifest's ``shards``
(:func:`collect_shards`), so a reader can tell a missing, truncated or substituted shard from one that was never
written, and name the workers and steps it held. The sha256 is the one a checkpoint already recorded per shard,
so the list costs the writer nothing new.
:class:`~zen_analysis.capture.reader.TraceReader` streams one row group at a time and reports as :class:`TraceError`
naming the file: a missing or malformed manifest, an unknown schema version, a truncated or corrupt file (bad
checksum, undecodable page), and records that break the store's invariants (:mod:`zen_analysis.capture.schema` holds
those checks).

Shape suffixes: K non-zeros of one record, N elements of the tensor (flattened), R rows stored in a sparse row gradient,
D values per row (the table's width).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from zen_analysis.atomic import atomic_path, atomic_write_json, file_sha256
from zen_analysis.capture.schema import (
    KINDS,
    SCHEMA_VERSION,
    TraceError,
)


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
        """The non-zero elements of ``grad``, in flat row-major order. A sparse COO row gradient
        (``nn.Embedding(sparse=True)``: rows of ``dim`` values) is coalesced and read row by row, with no dense copy
        of the table: the indices its dense form would give, in the same order."""
        if grad.is_sparse:
            return cls._from_sparse_rows(grad, step=step, worker=worker, rank=rank, tensor=tensor, kind=kind)
        flat_N = grad.detach().reshape(-1)
        idx_K = torch.nonzero(flat_N, as_tuple=True)[0]
        return cls(step, worker, rank, tensor, kind, tuple(grad.shape), idx_K.cpu(), flat_N[idx_K].float().cpu())

    @classmethod
    def _from_sparse_rows(
        cls, grad: torch.Tensor, *, step: int, worker: int, rank: int, tensor: str, kind: str
    ) -> SparseGrad:
        g = grad.detach().coalesce()
        if g.sparse_dim() != 1 or g.dim() != 2:  # not rows of a table: placed densely, as the dense path reads it
            return cls.from_dense(g.to_dense(), step=step, worker=worker, rank=rank, tensor=tensor, kind=kind)
        rows_R, values_RD = g.indices()[0], g.values()
        dim = values_RD.shape[1]
        flat_RD = rows_R.unsqueeze(1) * dim + torch.arange(dim, device=rows_R.device)
        keep_RD = values_RD != 0  # sorted distinct rows, columns in order: row-major, as nonzero() of the table
        return cls(
            step, worker, rank, tensor, kind, tuple(g.shape), flat_RD[keep_RD].cpu(), values_RD[keep_RD].float().cpu()
        )


def shard_name(rank: int, shard: int) -> str:
    return f"rank{rank:03d}-shard{shard:05d}.parquet"


def shard_list_name(rank: int) -> str:
    """The file in which ``rank``'s writer lists the shards it has written (see the module's docstring)."""
    return f"rank{rank:03d}-shards.json"


def shard_entry(path: Path, *, rank: int, steps: list[list[SparseGrad]] | None = None) -> dict:
    """What the manifest says of one shard: ``rank``, ``bytes``, ``sha256``, ``steps`` and ``workers`` (sorted, the
    records' own), ``records`` (how many per tensor). Taken from ``steps`` (the records just written) when given,
    else read back from the file's scalar columns (a checkpoint written before shard lists existed)."""
    if steps is not None:
        recs = [r for rs in steps for r in rs]
        step_ids, worker_ids, tensors = [r.step for r in recs], [r.worker for r in recs], [r.tensor for r in recs]
    else:
        table = pq.read_table(path, columns=["step", "worker", "tensor"])
        step_ids, worker_ids = table.column("step").to_pylist(), table.column("worker").to_pylist()
        tensors = table.column("tensor").to_pylist()
    records: dict[str, int] = {}
    for t in tensors:
        records[t] = records.get(t, 0) + 1
    return {
        "rank": rank,
        "bytes": path.stat().st_size,
        "sha256": file_sha256(path),
        "steps": sorted({int(s) for s in step_ids}),
        "workers": sorted({int(w) for w in worker_ids}),
        "records": dict(sorted(records.items())),
    }


def collect_shards(directory: Path, world_size: int) -> dict[str, dict]:
    """Every rank's shard list (``rank<r>-shards.json``, ``r < world_size``) merged, by file name: what a finished
    run's manifest stores as ``shards``. Call it once every rank has closed its writer. A rank's list that is
    missing or unreadable is a :class:`TraceError` naming it: a manifest that listed fewer shards than were written
    would later pass a store with a rank's shards gone as complete."""
    out: dict[str, dict] = {}
    for rank in range(world_size):
        path = Path(directory) / shard_list_name(rank)
        try:
            listing = json.loads(path.read_text())["shards"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TraceError(
                f"{path}: rank {rank}'s list of its trace shards cannot be read ({exc}); the store cannot record "
                "which shards it holds (re-run the capture)"
            ) from None
        out.update(listing)
    return dict(sorted(out.items()))


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
        self.listing: dict[str, dict] = {}
        """:func:`shard_entry` of every shard this writer has written, by file name: ``rank<r>-shards.json``."""
        self._write_listing()  # a rank that writes no shard still says so

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
            # nothing), far smaller than zstd alone on natural embedding gradients.
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
        entry = shard_entry(path, rank=self.rank, steps=self._steps)
        self.bytes_written += entry["bytes"]
        self.shards[path.name] = entry["sha256"]
        self.listing[path.name] = entry
        self._num_shards += 1
        self._steps = []
        self._write_listing()

    def _write_listing(self) -> None:
        atomic_write_json(self.directory / shard_list_name(self.rank), {"rank": self.rank, "shards": self.listing})

    def close(self) -> None:
        self.flush()

    def state_dict(self) -> dict:
        """Where the writer stands, with nothing buffered (call :meth:`flush` first): its shards and their sha256."""
        if self._steps or self._current:
            raise RuntimeError("TraceWriter.state_dict() with records buffered: flush() first")
        return {
            "num_shards": self._num_shards,
            "bytes_written": self.bytes_written,
            "shards": dict(self.shards),
            "listing": dict(self.listing),
        }

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
        listing = state.get("listing", {})  # a checkpoint from before shard lists: read the kept shards back
        self.listing = {
            name: listing[name] if name in listing else shard_entry(self.directory / name, rank=self.rank)
            for name in self.shards
        }
        self._write_listing()
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


def write_manifest(directory: Path, manifest: dict) -> None:
    """Write (or rewrite) a run's manifest atomically, stamping the schema version."""
    atomic_write_json(Path(directory) / "manifest.json", {**manifest, "schema_version": SCHEMA_VERSION})
