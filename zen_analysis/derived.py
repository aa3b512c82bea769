"""Tables derived from a run's traces (characterization, scheme evaluation, measured replays): where each goes,
how it is written and when it is reused.

* **Keyed by the traces actually read**: ``TraceReader.derived_dir`` (``data/derived/<run_id>/``, the run id being
  the trace directory's name), never by what a manifest says, so a copied run never writes over the original's.
* **Keyed by the options that change their meaning**: the default options write the usual name
  (``schemes.parquet``), any other choice its own file (``schemes-<hash>.parquet``); a table is never silently
  replaced by one that means something else.
* **Whole or not at all**: a table is written to a temporary file and renamed; a set of tables that belong
  together is built in a temporary directory and swapped in (``atomic.atomic_dir``). A failed or interrupted
  command leaves the previous tables as they were.
* **Stamped**: each table carries, in its Parquet metadata, what it was computed from (options, code version, the
  trace shards' names, sizes and times); it is reused while that is unchanged.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from zen_analysis.atomic import atomic_path

__all__ = ["STAMP_KEY", "read_stamp", "read_table", "same_stamp", "variant", "write_table"]

STAMP_KEY = b"zen_analysis.stamp"


def variant(stem: str, options: dict[str, Any], defaults: dict[str, Any]) -> str:
    """``stem`` when ``options`` equal ``defaults``, else ``stem-<12 hex digits of the options>``."""
    if options == defaults:
        return stem
    digest = hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{stem}-{digest}"


def write_table(path: Path, df: pd.DataFrame, stamp: dict[str, Any]) -> None:
    """``df`` as Parquet at ``path`` (atomic, page checksums), with ``stamp`` in the file's metadata."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = {**(table.schema.metadata or {}), STAMP_KEY: json.dumps(stamp, sort_keys=True, default=str).encode()}
    with atomic_path(path) as tmp:
        pq.write_table(table.replace_schema_metadata(meta), tmp, compression="zstd", write_page_checksum=True)


def read_stamp(path: Path) -> dict[str, Any] | None:
    """The stamp a table was written with; None when the file is missing, unreadable or unstamped."""
    try:
        meta = pq.read_schema(path).metadata or {}
        return json.loads(meta[STAMP_KEY]) if STAMP_KEY in meta else None
    except (OSError, pa.ArrowException, ValueError):
        return None


def read_table(path: Path) -> pd.DataFrame:
    """A derived table, page checksums verified."""
    return pq.ParquetFile(path, page_checksum_verification=True).read().to_pandas()


def same_stamp(stamp: dict[str, Any], found: dict[str, Any] | None) -> bool:
    """Whether a stored stamp (read back from JSON) equals ``stamp``."""
    return found is not None and json.loads(json.dumps(stamp, sort_keys=True, default=str)) == found
