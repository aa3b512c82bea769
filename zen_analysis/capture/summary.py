"""What a run captured, at a glance: tensors, kinds, workers, steps, densities and bytes on disk."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from zen_analysis.capture.buckets import describe
from zen_analysis.capture.reader import TraceReader
from zen_analysis.config.model import model_label

__all__ = ["capture_table", "describe_run"]


def capture_table(reader: TraceReader) -> pd.DataFrame:
    """One row per captured tensor: kind, shape, numel, #steps, #workers and density statistics; a DDP-style
    bucket also names the parameters it holds (``holds``). Read with ``allow_missing`` from an incomplete store,
    each row also says how many of the tensor's records the missing shards held (``records_missing``: its steps
    and workers count only those present) and ``attrs["missing"]`` names them."""
    df = reader.summary()
    tensors = reader.manifest.get("tensors", {})
    rows = []
    for (tensor, kind), g in df.groupby(["tensor", "kind"], sort=True):
        rows.append(
            {
                "tensor": tensor,
                "kind": kind,
                "shape": "x".join(str(s) for s in tensors.get(tensor, {}).get("shape", [])),
                "numel": int(g["numel"].iloc[0]),
                "steps": g["step"].nunique(),
                "workers": g["worker"].nunique(),
                "density_mean": g["density"].mean(),
                "density_min": g["density"].min(),
                "density_max": g["density"].max(),
                "nnz_mean": g["nnz"].mean(),
            }
        )
        if reader.missing:
            rows[-1]["records_missing"] = sum(m["records"].get(tensor, 0) for m in reader.missing)
        if "params" in tensors.get(tensor, {}):
            rows[-1]["holds"] = describe(tensors[tensor]["params"])
    out = pd.DataFrame(rows)
    out.attrs["missing"] = reader.missing_note()
    return out


def describe_run(run: str | Path, *, allow_missing: bool = False) -> str:
    """A short plain-text report of a run's traces (used by ``zen-analysis traces``); ``allow_missing``: of an
    incomplete store, what is left, its second line naming what is missing."""
    reader = TraceReader(run, allow_missing=allow_missing)
    m = reader.manifest
    cfg = m["config"]
    size = sum(f.stat().st_size for f in reader.files)
    lines = [
        f"run {m['run_id']} ({'finished' if m.get('finished') else 'unfinished'}): {model_label(cfg['model'])}, "
        f"{m['world_size']} ranks x {m['workers_per_rank']} workers = {m['num_workers']} workers, "
        f"steps {reader.steps()} captured, "
        + (f"{len(reader.files)} of {len(m['shards'])} shards" if reader.checked else f"{len(reader.files)} shards")
        + f", {size / 1e6:.1f} MB",
    ]
    if reader.missing:
        lines.append(f"INCOMPLETE ({reader.missing_note()})")
    elif not reader.checked:
        lines.append("shards unchecked: the manifest lists none, so a missing one would go unnoticed")
    lines += [
        f"corpus {m['corpus']['corpus_name']} ({m['corpus']['corpus_bytes'] / 1e6:.1f} MB, sha256 "
        f"{m['corpus']['corpus_sha256'][:12]}), vocab {m['corpus']['vocab_size']}, git {m['git_commit'][:10]}",
    ]
    if "summary" in m:
        s = m["summary"]
        lines.append(
            f"final loss {s['final_loss']:.4f}, val loss {s['val_loss']:.4f}, {s['tokens_per_s']:.0f} tokens/s"
        )
    table = capture_table(reader)
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.4f}".format):
        lines.append(table.to_string(index=False))
    return "\n".join(lines)
