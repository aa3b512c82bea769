"""The trace store's format and its invariants: what a manifest and a record must be, checked on every read.

A trace directory holds ``manifest.json`` and Parquet shards (:mod:`zen_analysis.capture.traces` writes them,
:mod:`zen_analysis.capture.reader` reads them). Here: the schema version readers accept, the record kinds, and the
checks that turn a damaged or hand-edited run into a :class:`TraceError` naming the file instead of a wrong number
later — the manifest's required keys and JSON types, and each row group's records (indices strictly increasing and
in ``[0, numel)``, ``nnz`` and ``numel`` consistent with the data, the shape and the manifest).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from zen_analysis.paths import RUN_ID

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = (1,)
KINDS = ("natural", "topk", "pseudo", "pseudo_topk")
"""``natural`` and ``topk``: gradients (:mod:`zen_analysis.capture.hooks`); ``pseudo`` and ``pseudo_topk``: local
SGD's pseudo-gradients before and after selection (:mod:`zen_analysis.capture.pseudo`)."""


class TraceError(RuntimeError):
    """A trace directory or file that cannot be read; the message names the file and what to do."""


_MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "schema_version": (int,),
    "tensors": (dict,),
    "world_size": (int,),
    "workers_per_rank": (int,),
    "num_workers": (int,),
    "config": (dict,),
    "finished": (bool,),
    "corpus": (dict,),
    "versions": (dict,),
    "git_commit": (str,),
    "summary": (dict,),
    "shards": (dict,),
}
_REQUIRED = ("run_id", "schema_version", "tensors")


def check_manifest(m: object, path: Path) -> dict:
    """``m`` if it is a well-formed manifest, else a :class:`TraceError` naming ``path`` and what is wrong."""
    if not isinstance(m, dict):
        raise TraceError(f"{path}: expected a JSON object, got {type(m).__name__}; the run directory is damaged")
    missing = [k for k in _REQUIRED if k not in m]
    if missing:
        raise TraceError(f"{path}: required keys {missing} are missing; the run directory is damaged (re-capture)")
    for key, types in _MANIFEST_TYPES.items():
        if key in m and (not isinstance(m[key], types) or (types == (int,) and isinstance(m[key], bool))):
            raise TraceError(f"{path}: {key} should be a {types[0].__name__}, got {m[key]!r}")
    if not RUN_ID.fullmatch(m["run_id"]):
        raise TraceError(f"{path}: run_id {m['run_id']!r} is not a run name (letters, digits, '.', '_', '-')")
    for name, info in m["tensors"].items():
        ok = (
            isinstance(info, dict)
            and info.get("kind") in KINDS
            and isinstance(info.get("shape"), list)
            and all(isinstance(d, int) and d >= 0 for d in info["shape"])
            and isinstance(info.get("numel"), int)
            and info["numel"] == int(np.prod(info["shape"], dtype=np.int64))
        )
        if not ok:
            raise TraceError(
                f"{path}: tensors[{name!r}] should be {{kind in {KINDS}, shape, numel = prod(shape)}}, got {info!r}"
            )
    for name, entry in m.get("shards", {}).items():
        ok = (
            isinstance(entry, dict)
            and all(_is_int(entry.get(k)) for k in ("rank", "bytes"))
            and isinstance(entry.get("sha256"), str)
            and all(isinstance(entry.get(k), list) and all(map(_is_int, entry[k])) for k in ("steps", "workers"))
            and isinstance(entry.get("records"), dict)
        )
        if not ok:
            raise TraceError(
                f"{path}: shards[{name!r}] should be {{rank, bytes, sha256, steps, workers, records}}, got {entry!r}; "
                "the run directory is damaged (re-capture)"
            )
    return m


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def one_chunk(col: pa.ChunkedArray) -> pa.Array:
    """The column as one array (``combine_chunks`` copies even a single chunk; a lone chunk is returned as it is)."""
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _list_parts(col: pa.ChunkedArray, *, values: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
    arr = one_chunk(col)
    off = arr.offsets.to_numpy()
    flat = arr.values.to_numpy(zero_copy_only=False)[off[0] : off[-1]] if values else None  # a slice: its part only
    return flat, off - off[0]


def check_records(table: pa.Table, tensors: dict[str, dict]) -> None:
    """Raise ``ValueError`` naming the first broken invariant of a row group's records (whichever of these
    columns were read): kind known, tensor in the manifest with the same numel, numel = prod(shape), nnz = the
    number of indices and of values, indices strictly increasing (sorted, unique) and in [0, numel)."""
    cols = set(table.column_names)
    rows = table.num_rows
    if "kind" in cols:
        bad = set(table.column("kind").to_pylist()) - set(KINDS)
        if bad:
            raise ValueError(f"unknown kind {sorted(bad)}")
    numel = table.column("numel").to_numpy() if "numel" in cols else None
    if "tensor" in cols and numel is not None:
        for name, n in zip(table.column("tensor").to_pylist(), numel):
            info = tensors.get(name)
            if info is None:
                raise ValueError(f"tensor {name!r} is not in the run's manifest")
            if info["numel"] != n:
                raise ValueError(f"tensor {name!r} has numel {n} here, {info['numel']} in the manifest")
    if "shape" in cols and numel is not None:
        dims, off = _list_parts(table.column("shape"))
        prods = [int(np.prod(dims[off[j] : off[j + 1]], dtype=np.int64)) for j in range(rows)]
        if prods != numel.tolist():
            raise ValueError("numel disagrees with shape")
    nnz = table.column("nnz").to_numpy() if "nnz" in cols else None
    if "values" in cols and nnz is not None:
        _, voff = _list_parts(table.column("values"), values=False)
        if not np.array_equal(np.diff(voff), nnz):
            raise ValueError("nnz disagrees with the number of values")
    if "indices" not in cols:
        return
    idx, off = _list_parts(table.column("indices"))
    counts = np.diff(off)
    if nnz is not None and not np.array_equal(counts, nnz):
        raise ValueError("nnz disagrees with the number of indices")
    rising = idx[1:] > idx[:-1]  # in the stored dtype: no int64 copy of a large row group
    cuts = off[1:-1]
    rising[cuts[(cuts > 0) & (cuts < idx.size)] - 1] = True  # from one record to the next anything goes
    if not rising.all():
        raise ValueError("indices are not sorted and unique")
    nonempty = counts > 0
    if nonempty.any():
        first, last = idx[off[:-1][nonempty]], idx[off[1:][nonempty] - 1]
        if first.min() < 0 or (numel is not None and (last >= numel[nonempty]).any()):
            raise ValueError("indices out of range [0, numel)")
