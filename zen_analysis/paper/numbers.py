"""The Zen paper's Fig. 11-15 and 17b numbers (the digest's section 5.3), as comparisons only: :data:`PAPER_NUMBERS`
is read after the model is priced (:func:`attach`), never by the pricing, so emptying it leaves every modelled
column as it was.

Each number is a ratio the paper states at 16 machines: Zen's throughput over a baseline's (Fig. 11-14), a scheme's
communication time speedup over AllReduce's (Fig. 15), Zen with a COO pull over AllReduce and the hash bitmap's gain
over it (Fig. 17b). "Up to" (Fig. 12, 14, 15) is read as at 16 machines, where the paper's leads are largest; a
``workload`` of ``"*"`` is a maximum over the workloads modelled (Fig. 15's "OmniReduce up to 1.58x").

Where the model's ratio differs from the paper's by more than 25% (:data:`TOLERANCE`), ``cause`` gives one sentence,
computed: compute's share of AllReduce's step, and the single change of the model's assumptions among :func:`levers`
that brings the model's ratio closest to the paper's, with the ratio it then gives (the model repriced with it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd

from zen_analysis.paper.hierarchy import Knobs, Links

TOLERANCE = 0.25
"""|model / paper - 1| above which a comparison gets a ``cause``."""


class PaperNumber(NamedTuple):
    """One ratio the paper states: ``scheme``'s ``metric`` (``throughput``: samples/s; ``comm``: 1 / communication
    seconds) over ``over``'s, for ``workload`` (``"*"``: the largest over the workloads) on ``testbed``."""

    figure: str
    workload: str
    testbed: str
    scheme: str
    over: str
    metric: str
    value: float
    machines: int = 16


def _zen_over(figure: str, testbed: str, metric: str, values: dict[tuple[str, str], float]) -> list[PaperNumber]:
    return [PaperNumber(figure, w, testbed, "zen", over, metric, v) for (w, over), v in values.items()]


_TCP, _EFA = "paper-tcp25", "paper-efa100"
PAPER_NUMBERS: tuple[PaperNumber, ...] = (
    *_zen_over(
        "11",
        _TCP,
        "throughput",
        {
            ("lstm", "allreduce"): 3.1,
            ("lstm", "sparcml"): 1.67,
            ("lstm", "omnireduce"): 2.48,
            ("deepfm", "omnireduce"): 1.44,
            ("nmt", "omnireduce"): 1.51,
        },
    ),
    *_zen_over(
        "12",
        _EFA,
        "throughput",
        {
            ("lstm", "sparcml"): 1.44,
            ("deepfm", "allreduce"): 1.33,
            ("nmt", "allreduce"): 1.38,
            ("deepfm", "omnireduce"): 1.25,
            ("nmt", "omnireduce"): 1.32,
        },
    ),
    *_zen_over(
        "13",
        _TCP,
        "throughput",
        {
            ("llama", "omnireduce"): 1.68,
            ("llama", "sparcml"): 2.19,
            ("llama", "allreduce"): 2.02,
            ("opt", "allreduce"): 2.10,
            ("opt", "omnireduce"): 1.66,
            ("gemma2", "allreduce"): 2.04,
            ("gemma2", "omnireduce"): 1.61,
        },
    ),
    *_zen_over(
        "14",
        _EFA,
        "throughput",
        {
            ("llama", "allreduce"): 1.64,
            ("opt", "allreduce"): 1.45,
            ("gemma2", "allreduce"): 1.44,
            ("llama", "omnireduce"): 1.32,
            ("opt", "omnireduce"): 1.31,
            ("gemma2", "omnireduce"): 1.27,
        },
    ),
    *_zen_over(
        "15",
        _TCP,
        "comm",
        {
            ("lstm", "allreduce"): 6.77,
            ("gemma2", "allreduce"): 3.51,
            ("deepfm", "allreduce"): 2.10,
            ("opt", "allreduce"): 3.44,
            ("*", "sparcml"): 2.82,
            ("*", "omnireduce"): 5.16,
        },
    ),
    PaperNumber("15", "*", _TCP, "omnireduce", "allreduce", "comm", 1.58),
    PaperNumber("17b", "lstm", _TCP, "bp_coo", "allreduce", "throughput", 2.74),
    PaperNumber("17b", "lstm", _TCP, "zen", "bp_coo", "throughput", 1.13),
    PaperNumber("17b", "llama", _TCP, "bp_coo", "allreduce", "throughput", 1.53),
    PaperNumber("17b", "llama", _TCP, "zen", "bp_coo", "throughput", 1.34),
)
"""Every number of the digest's section 5.3 for Fig. 11-15 and 17b (17b's "+13%" and "+34%" as Zen over Zen with COO).
Comparisons only: nothing priced reads them."""


def row_of(entry: PaperNumber) -> str | None:
    """The scheme whose row of the figures table shows ``entry``: a baseline's for Zen's throughput lead over it, the
    scheme's own for a ratio to AllReduce; None for a maximum over workloads and for Zen over its COO variant (a
    derived ratio: the comparison table alone)."""
    if entry.workload == "*":
        return None
    if entry.scheme == "zen" and entry.metric == "throughput":
        return None if entry.over == "bp_coo" else entry.over
    return entry.scheme if entry.over == "allreduce" else None


def ratio_name(entry: PaperNumber) -> str:
    what = "throughput" if entry.metric == "throughput" else "communication time speedup"
    where = "largest over workloads, " if entry.workload == "*" else ""
    return f"{entry.scheme} over {entry.over} ({where}{what}, Fig. {entry.figure})"


def _ratio(df: pd.DataFrame, entry: PaperNumber) -> tuple[float, str]:
    """The model's value of ``entry``'s ratio in ``df`` and the workload it is read at (the largest for ``*``)."""
    at = df[(df["testbed"] == entry.testbed) & (df["machines"] == entry.machines)]
    col = "samples_per_s" if entry.metric == "throughput" else "comm_s"
    by = at.pivot_table(index="workload", columns="scheme", values=col, aggfunc="first")
    if entry.scheme not in by or entry.over not in by:
        return np.nan, ""
    r = by[entry.scheme] / by[entry.over] if entry.metric == "throughput" else by[entry.over] / by[entry.scheme]
    r = r.dropna()
    if entry.workload == "*":
        return (float(r.max()), str(r.idxmax())) if len(r) else (np.nan, "")
    return (float(r[entry.workload]), entry.workload) if entry.workload in r else (np.nan, "")


Reprice = Callable[..., pd.DataFrame]
"""``reprice(workload, testbed, machines, knobs)``: the figures table's rows of one case with one assumption changed."""


def levers() -> tuple[tuple[str, Knobs], ...]:
    """The single changes of the model's assumptions a ``cause`` tries: (what it says, the change)."""
    return (
        ("compute twice the model's", Knobs(compute=2.0)),
        ("compute half the model's", Knobs(compute=0.5)),
        ("NCCL's dense rings at half the line rate", Knobs(links=Links(dense_rings=0.5))),
        ("NVLink at 5x the preset's one link (NCCL's rings over a V100's 6 links)", Knobs(links=Links(nvlink=5.0))),
        ("no dense bucket hidden behind backward", Knobs(overlap=0.0)),
        ("all of backward open to overlap", Knobs(overlap=1.0)),
    )


def _shares(entry: PaperNumber, at: pd.DataFrame) -> str:
    """Where the time of ``entry``'s ratio goes in the case ``at`` (its rows, one per scheme): compute's share of
    AllReduce's step for a throughput ratio; for a communication ratio the scheme's NVLink / network split and the
    union of every GPU's set (what its pull moves)."""
    by = at.set_index("scheme")
    ar = by.loc["allreduce"]
    if entry.metric == "throughput":
        source = ar["compute_source"].split(";")[0]
        return f"compute is {ar['compute_s'] / ar['step_s']:.0%} of AllReduce's step ({source})"
    sc = by.loc[entry.scheme]
    return (
        f"{entry.scheme}'s sum is {sc['intra_s'] / sc['comm_s']:.0%} NVLink and {sc['inter_s'] / sc['comm_s']:.0%} "
        f"network, the union of the {int(sc['ranks'])} data-parallel ranks' sets {sc['union_density']:.0%} of it"
    )


def cause(entry: PaperNumber, model: float, workload: str, base: pd.DataFrame, reprice: Reprice) -> str:
    """One sentence on why the model's ``entry`` ratio (``model``, read at ``workload``) misses the paper's by more
    than :data:`TOLERANCE` ("" within it): where the time goes (:func:`_shares`), and the lever of :func:`levers`
    whose repriced ratio lands closest to the paper's, with that ratio (or that none tried comes closer)."""
    if not np.isfinite(model) or abs(model / entry.value - 1) <= TOLERANCE:
        return ""
    at = base[(base["workload"] == workload) & (base["testbed"] == entry.testbed)]
    at = at[at["machines"] == entry.machines]
    here = entry._replace(workload=workload)
    gap = abs(np.log(model / entry.value))
    tried = []
    for label, knobs in levers():
        moved = _ratio(reprice(workload, entry.testbed, entry.machines, knobs), here)[0]
        tried.append((abs(np.log(moved / entry.value)), label, moved))
    best_gap, label, moved = min(tried)
    side = "above" if model > entry.value else "below"
    if best_gap < gap - 1e-9:
        lever = f"the closest single change, {label}, gives {moved:.2f}"
    else:
        lever = f"none of the single changes tried ({'; '.join(t[1] for t in tried)}) brings it closer"
    return f"{side} the paper: {_shares(entry, at)}; {lever}"


def comparison(df: pd.DataFrame, reprice: Reprice, numbers=None) -> pd.DataFrame:
    """One row per paper number (``numbers``, default :data:`PAPER_NUMBERS`) whose testbed and machines ``df``
    models: the paper's value, the model's, their ratio and the ``cause`` (:func:`cause`)."""
    numbers = PAPER_NUMBERS if numbers is None else numbers
    rows = []
    for e in numbers:
        model, workload = _ratio(df, e)
        if not workload:
            continue
        rows.append(
            {
                **e._asdict(),
                "ratio": ratio_name(e),
                "paper": e.value,
                "model": model,
                "read_at": workload,
                "model_over_paper": model / e.value,
                "row": row_of(e),
                "cause": cause(e, model, workload, df, reprice),
            }
        )
    cols = [*PaperNumber._fields, "ratio", "paper", "model", "read_at", "model_over_paper", "row", "cause"]
    return pd.DataFrame(rows, columns=cols).drop(columns="value")


def attach(df: pd.DataFrame, reprice: Reprice, numbers=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``df`` with the paper's numbers beside its rows and the whole :func:`comparison`. Each number sits on the row
    :func:`row_of` names: ``paper`` (its value), ``paper_ratio`` (what it is a ratio of), ``paper_of`` and
    ``paper_over`` (the schemes of that ratio: the paper's ``paper_of`` is ``paper`` x the model's ``paper_over``),
    ``paper_metric``, ``model_ratio`` (the model's value of the same ratio) and ``cause``; NaN and "" on rows the
    paper gives no number for."""
    comp = comparison(df, reprice, numbers)
    out = df.assign(paper=np.nan, paper_ratio="", paper_of="", paper_over="", paper_metric="", model_ratio=np.nan)
    out["cause"] = ""
    cols = ["paper", "paper_ratio", "paper_of", "paper_over", "paper_metric", "model_ratio", "cause"]
    for r in comp[comp["row"].notna()].itertuples():
        hit = (out["workload"] == r.workload) & (out["testbed"] == r.testbed) & (out["machines"] == r.machines)
        hit &= out["scheme"] == r.row
        if out.loc[hit, "paper_ratio"].ne("").any():
            raise AssertionError(f"two paper numbers on one row: {r.ratio} and {out.loc[hit, 'paper_ratio'].iloc[0]}")
        out.loc[hit, cols] = [r.paper, r.ratio, r.scheme, r.over, r.metric, r.model, r.cause]
    return out, comp
