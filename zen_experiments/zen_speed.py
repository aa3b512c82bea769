"""How fast Zen's ``zen_sum`` is on real gloo ranks, beside dense all-reduce, AGsparse and BP-COO and the floor of
local work any dense-in / dense-out sparse sum must do (``zen-analysis bench zen``).

For each (numel, density) the ranks hold synthetic index sets (30% of each set shared by all ranks, the rest
private, uniform over the tensor) with integer values, so every result is checked against ``all_reduce`` bit for
bit. Every scheme runs one warm-up and ``repeats`` timed calls, each after a barrier, on a fresh copy of the
input (copied outside the timing), the schemes taking turns call by call (so a noisy spell of a shared machine
hits all of them); a call's time is the slowest rank's, and the table reports the median over repeats. The floor is
timed on each rank alone: find the non-zeros, gather their values, zero an existing output
buffer and scatter the values back (:func:`local_floor`). Zen's own local work is reported per step from the
scheme's ``last_local()`` timings.

Variants (:data:`VARIANTS`) measure what the dtype contract and the ranks' agreement check cost: ``zen-nocheck``
and ``allreduce-nocheck`` skip the check (``check_ranks = False``; Zen's rides on its count exchange, the dense
all-reduce's is one call of its own), ``zen-bf16`` and ``allreduce-bf16`` sum the same integer values as bfloat16
(Zen widens them into its compiled float32 loops; values travel at 2 bytes).

Shape suffixes: N elements of the flat tensor, K its non-zeros.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pandas as pd
import torch
import torch.distributed as dist

from zen_analysis.comm import build_scheme
from zen_analysis.evaluation.calibrate import local
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.sparsity.synthetic import synthetic_index_sets

SIZES = (4_000_000, 32_000_000, 128_000_000)
DENSITIES = (0.005, 0.01, 0.05)
SCHEMES = ("allreduce", "agsparse", "bp_coo", "zen")
VARIANTS = {
    "zen-nocheck": ("zen", torch.float32, False),
    "allreduce-nocheck": ("allreduce", torch.float32, False),
    "zen-bf16": ("zen", torch.bfloat16, True),
    "allreduce-bf16": ("allreduce", torch.bfloat16, True),
}
"""label -> (scheme, dtype, agreement check): the rows beside each scheme's plain (float32, checked) one."""


def local_floor(x_N: torch.Tensor, out_N: torch.Tensor) -> None:
    """The passes a dense-in / dense-out sparse sum cannot avoid on one rank: non-zero extraction, gather,
    zeroing an existing output buffer, scatter."""
    idx_K = torch.nonzero(x_N, as_tuple=True)[0]
    val_K = x_N[idx_K]
    out_N.zero_()
    out_N[idx_K] = val_K


def _body(rank: int, world: int, configs: list, repeats: int, schemes: Sequence[str], variants: dict) -> list[dict]:

    rows = []
    for cfg_id, (numel, _density, sets) in enumerate(configs):
        gen = torch.Generator().manual_seed(rank + 17 * cfg_id)
        x = torch.zeros(numel)
        idx = sets[rank]
        x[idx] = torch.randint(1, 5, (idx.numel(),), generator=gen).float()
        ref = x.clone()
        dist.all_reduce(ref)
        work = torch.empty_like(x)
        built = {name: build_scheme(name) for name in schemes}
        inputs = {name: (x, ref, work) for name in schemes}
        for label, (name, dtype, check) in variants.items():
            built[label] = build_scheme(name)
            built[label].check_ranks = check
            if dtype == torch.float32:
                inputs[label] = (x, ref, work)
                continue
            xd = x.to(dtype)  # integer values: exact in bfloat16, sums too (at most 4 x world)
            refd = xd.clone()
            dist.all_reduce(refd)
            inputs[label] = (xd, refd, torch.empty_like(xd))
        for rep in range(repeats + 1):  # the first is a warm-up (caches, allocator)
            t0 = time.perf_counter()
            local_floor(x, work)
            if rep:
                rows.append(
                    {"config": cfg_id, "what": "floor", "rep": rep, "rank": rank, "seconds": time.perf_counter() - t0}
                )
            for name, scheme in built.items():  # interleaved: a slow spell of the machine hits every scheme alike
                src, want, buf = inputs[name]
                buf.copy_(src)
                dist.barrier()
                t0 = time.perf_counter()
                out = scheme.run(buf)
                seconds = time.perf_counter() - t0
                ok = torch.equal(out, want)
                if rep:
                    rows.append(
                        {
                            "config": cfg_id,
                            "what": name,
                            "rep": rep,
                            "rank": rank,
                            "seconds": seconds,
                            "exact": ok,
                            "calls": int(scheme.last_measured()["calls"].sum()),
                        }
                    )
                    for step, s in scheme.last_local().items():
                        rows.append(
                            {"config": cfg_id, "what": f"{name}:{step}", "rep": rep, "rank": rank, "seconds": s}
                        )
                    if name == "zen":  # time inside the collective calls, per phase
                        for phase, g in scheme.last_measured().groupby("phase"):
                            rows.append(
                                {
                                    "config": cfg_id,
                                    "what": f"zen:wire {phase}",
                                    "rep": rep,
                                    "rank": rank,
                                    "seconds": float(g["wire_seconds"].sum()),
                                }
                            )
        del x, ref, work, inputs
    return rows


def speed_table(
    *,
    sizes: Sequence[int] = SIZES,
    densities: Sequence[float] = DENSITIES,
    ranks: int = 2,
    repeats: int = 9,
    overlap: float = 0.3,
    schemes: Sequence[str] = SCHEMES,
    model: bool = True,
    variants: dict | None = None,
) -> pd.DataFrame:
    """One row per (numel, density, what): the median over repeats of the slowest rank's seconds, for every
    scheme, the floor (``floor``) and each scheme's local steps (``zen:hash``, ...). With ``model``, each
    scheme's row also holds ``model_seconds``: its time model (wire phases + local work) on this machine
    calibrated at ``ranks`` ranks (:func:`~zen_analysis.evaluation.calibrate.local`, fitted on tensors of at most 4M
    elements: at 32M and 128M the model extrapolates). ``variants``: label -> (scheme, dtype, check), default
    :data:`VARIANTS` (those whose scheme is in ``schemes``)."""

    topo = local(ranks) if model else None

    frames = []
    for numel in sizes:
        configs = [
            (numel, d, synthetic_index_sets(numel, ranks, d, overlap=overlap, seed=i)) for i, d in enumerate(densities)
        ]
        chosen = {k: v for k, v in (VARIANTS if variants is None else variants).items() if v[0] in schemes}
        rows = [
            r
            for per_rank in fork_launch(_body, ranks, configs, repeats, list(schemes), chosen, timeout_s=3600)
            for r in per_rank
        ]
        df = pd.DataFrame(rows)
        agg = {"seconds": "max"}
        if "exact" in df:
            agg.update(exact="min", calls="max")
        slowest = df.groupby(["config", "what", "rep"]).agg(agg).reset_index()
        med = (
            slowest.groupby(["config", "what"])
            .agg({**{k: ("min" if k == "exact" else "median") for k in agg}})
            .reset_index()
        )
        med["numel"] = numel
        med["density"] = med["config"].map(lambda c: configs[c][1])  # noqa: B023
        if topo is not None:
            modelled = {
                (c, name): float(build_scheme(name).time(configs[c][2], numel, topo)["seconds"].sum())
                for c in range(len(configs))
                for name in schemes
            }
            med["model_seconds"] = [modelled.get((c, w)) for c, w in zip(med["config"], med["what"])]
        frames.append(med.drop(columns="config"))
    out = pd.concat(frames, ignore_index=True)
    return out[["numel", "density", "what", "seconds"] + [c for c in ("model_seconds", "exact", "calls") if c in out]]


def model_check(table: pd.DataFrame) -> pd.DataFrame:
    """Per (numel, density) and scheme: modelled / measured seconds (the time model with its local-work term
    against the medians of :func:`speed_table`)."""
    rows = table[table["what"].isin(SCHEMES) & table.get("model_seconds", pd.Series(dtype=float)).notna()]
    ratio = rows.assign(ratio=rows["model_seconds"] / rows["seconds"])
    return ratio.pivot_table(index=["numel", "density"], columns="what", values="ratio")


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (numel, density): each scheme's median seconds, the floor, and Zen's ratios to them."""
    wide = table.pivot_table(index=["numel", "density"], columns="what", values="seconds")
    cols = [c for c in ("floor", *SCHEMES, *VARIANTS) if c in wide]
    out = wide[cols].copy()
    for name in ("zen", "allreduce"):  # what the ranks' agreement check adds to one call
        if name in wide and f"{name}-nocheck" in wide:
            out[f"{name} check cost"] = wide[name] - wide[f"{name}-nocheck"]
    if "zen-bf16" in wide and "zen" in wide:
        out["zen-bf16/zen"] = wide["zen-bf16"] / wide["zen"]
    if "zen" in wide:
        out["zen/floor"] = wide["zen"] / wide["floor"]
        if "allreduce" in wide:
            out["zen/allreduce"] = wide["zen"] / wide["allreduce"]
        sparse = [c for c in ("agsparse", "bp_coo") if c in wide]
        if sparse:
            out["zen/best sparse"] = wide["zen"] / wide[sparse].min(axis=1)
    return out
