"""The paper's characterization claims (C1-C3) next to what we measure, as a table.

Each row: the claim, what the paper reports, what our runs give, and whether it holds by a stated criterion.
The criteria are ours (the paper states its observations qualitatively except for the numbers quoted):

* C1 "overlap roughly normal and wide": the overlap ratios of each workload have a sample skewness within
  [-1, 1] (roughly symmetric) and an interquantile range p95 - p5 of at least 0.1.
* C2 "gamma grows with n but stays below n": mean gamma strictly increases with n and stays < n.
* C3 "> 60% of non-zeros in the first of 8 partitions": mean share of partition 0 (per worker) > 0.6.
* C3 "skewness > 70 at 128 partitions (LSTM)": mean per-worker skewness ratio at 128 partitions; judged for
  the LSTM's embedding only (the paper's number is for it; for the others it gives none: ``holds`` is "n/a").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["AGAINST", "PRETRAINED", "claims_table", "to_markdown"]


def _sample_skewness(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    if x.size < 3 or x.std() == 0:
        return float("nan")
    return float(np.mean((x - x.mean()) ** 3) / x.std() ** 3)


PRETRAINED = ": pretrained "
"""What a pretrained checkpoint's workloads are labelled with
(:func:`~zen_analysis.sparsity.workloads.workload_labels`)."""
RANDOM_INIT = ("default: llama ", "smoke: llama ")
"""The random-init workloads a pretrained one is set beside, the first present: the default Llama's (same corpus, a
model built from config), else the smoke Llama's (the notebooks' small fallback runs)."""
SAME_WITHIN = 0.05
"""Relative difference under which a pretrained value and the random-init one are called about the same: each is one
run of its recipe, so a smaller difference is not read as a direction."""
AGAINST = "against the random-init Llama"
"""The column :func:`claims_table` adds where a pretrained workload is present: its value beside the random-init
Llama's."""


def _against(row: dict, rows: list[dict]) -> str:
    """A pretrained workload's row against the random-init Llama's row of the same claim and tensor kind, in one
    sentence; empty for the other rows or where the Llama's run is absent."""
    if PRETRAINED not in row["workload"]:
        return ""
    kind = row["workload"].split(PRETRAINED, 1)[1]  # "embedding" or "top-5% of buckets"
    ref = next(
        (r for base in RANDOM_INIT for r in rows if r["claim"] == row["claim"] and r["workload"] == base + kind), None
    )
    if ref is None:
        return ""
    a, b = row["_value"], ref["_value"]
    at = ""
    if isinstance(a, dict):  # C2: gamma by n, compared at the largest n both reach
        n = max(set(a) & set(b))
        a, b, at = a[n], b[n], f" at n={n}"
    claim = row["claim"]
    if claim.startswith("C3 >60%"):
        a, b, fmt = 100 * a, 100 * b, "{:.0f}%"
    else:
        fmt = "{:.2f}" if claim.startswith("C1") else "{:.1f}"
    shown = f"{fmt.format(a)} against {fmt.format(b)}"
    if claim.startswith("C1"):
        shown, then = f"mean overlap {shown}", "workers share {} of their non-zeros"
    elif claim.startswith("C2"):
        shown, then = f"gamma {shown}{at}", "the sum densifies {}"
    elif claim.startswith("C3 >60%"):
        shown, then = f"{shown} in partition 1", "{} skewed to the first ids"
    else:
        shown, then = f"skewness {shown}", "the busiest partition holds {} over its fair share"
    if fmt.format(a) == fmt.format(b):  # equal as printed: no direction to tell
        return f"{shown}: the same"
    if abs(a - b) < SAME_WITHIN * abs(b):
        return f"{shown}: about the same (within {SAME_WITHIN:.0%})"
    return f"{shown}: {then.format('more' if a > b else 'less')}"


def claims_table(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (claim, workload): paper says / we measure / holds, and for a pretrained checkpoint's workloads a
    sentence against the random-init Llama's (:func:`_against`). Tables of incomplete traces
    (``load_tables(..., allow_missing=True)``) pass their note on: ``attrs["missing"]``, which :func:`to_markdown`
    prints under the table."""
    rows = []
    for wl, g in tables["overlap"].groupby("workload"):
        x = g["overlap"].dropna().to_numpy()
        p5, p95 = np.percentile(x, [5, 95]) if x.size else (np.nan, np.nan)
        sk = _sample_skewness(x)
        rows.append(
            {
                "claim": "C1 overlap roughly normal, wide",
                "workload": wl,
                "paper says": "approx. normal, wide range, differs by model",
                "we measure": f"mean {x.mean():.2f}, p5-p95 {p5:.2f}-{p95:.2f}, skewness {sk:+.2f}",
                "holds": bool(abs(sk) <= 1 and p95 - p5 >= 0.1),
                "_value": float(x.mean()) if x.size else np.nan,
            }
        )
    for wl, g in tables["densification"].groupby("workload"):
        m = g.groupby("n")["gamma"].mean()
        grows = bool(np.all(np.diff(m.to_numpy()) > 0))
        below = bool(np.all(m.to_numpy() < m.index.to_numpy()))
        rows.append(
            {
                "claim": "C2 gamma grows with n, stays < n",
                "workload": wl,
                "paper says": "1 < gamma < n, increasing (BERT: 38.5 at n=128)",
                "we measure": ", ".join(f"n={n}: {v:.1f}" for n, v in m.items()),
                "holds": grows and below,
                "_value": m.to_dict(),
            }
        )
    skew = tables["skew"]
    per_worker = skew[skew["worker"] >= 0]
    for wl, g in per_worker[per_worker["num_partitions"] == 8].groupby("workload"):
        first = float(np.mean([s[0] for s in g["shares"] if not np.isnan(s[0])]))
        rows.append(
            {
                "claim": "C3 >60% of non-zeros in partition 1 of 8",
                "workload": wl,
                "paper says": "> 60% in all six models",
                "we measure": f"{100 * first:.0f}%",
                "holds": first > 0.6,
                "_value": first,
            }
        )
    for wl, g in per_worker[per_worker["num_partitions"] == 128].groupby("workload"):
        s = float(g["skewness"].mean())
        rows.append(
            {
                "claim": "C3 skewness at 128 partitions",
                "workload": wl,
                "paper says": "> 70 for the LSTM (large for all models)",
                "we measure": f"{s:.1f}",
                "holds": s > 70 if "lstm embedding" in wl else "n/a",
                "_value": s,
            }
        )
    if any(PRETRAINED in r["workload"] for r in rows):
        for r in rows:
            r[AGAINST] = _against(r, rows)
    out = pd.DataFrame(rows).drop(columns="_value")
    out.attrs["missing"] = "; ".join(sorted({t.attrs.get("missing", "") for t in tables.values()} - {""}))
    return out


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-style Markdown table (no extra dependency)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(str(r[c]) for c in cols) + " |")
    if df.attrs.get("missing"):
        lines += ["", f"**{df.attrs['missing']}**"]
    return "\n".join(lines)
