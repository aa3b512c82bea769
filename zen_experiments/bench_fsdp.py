"""Zen under FSDP2, measured (:mod:`zen_analysis.fsdp`).

* :func:`bench_fsdp`: stock FSDP2 against Zen-FSDP2 training a large-vocabulary Llama in the network lab
  (:mod:`~zen_experiments.fsdp_train`): step, breakdown, bytes, losses, the busiest shard's rows;
* :func:`bench_fsdp_balance`: the busiest rank's received rows in a sparse reduce-scatter over the mean, with the
  table stored contiguously (FSDP2's order), in the plain h0 order and in the stratified h0 order
  (:func:`~zen_analysis.fsdp.hashed.hashed_order`), on real batches of the recipes' data, beside Theorem 2's
  balls-into-bins bound for the same number of rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from zen_analysis import paths, recipes
from zen_analysis.config.options import ints, names
from zen_analysis.derived import write_table
from zen_analysis.fsdp.hashed import balls_into_bins_bound, hashed_order, inverse, received_rows
from zen_analysis.ranks.netlab import NetLab
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.workload.batches import TokenData, open_data, prepare
from zen_experiments.bench_options import parse_sets, publish
from zen_experiments.fsdp_train import VARIANTS, FSDPSettings, fsdp_rank

ORDERS = ("contiguous", "h0", "stratified")


def _balance_rows(data: TokenData, recipe: str, ranks: int, steps: int, opts: dict) -> list[dict]:
    v = data.vocab_size
    tokens = opts["batch"]
    row_of_id = {
        "contiguous": None,
        "h0": inverse(hashed_order(v, opts["seed"], strata=None)),
        "stratified": inverse(hashed_order(v, opts["seed"], strata=opts["strata"])),
    }
    ratios = {o: [] for o in ORDERS}
    totals = []
    for step in range(steps):
        sets = [data.batch("train", step=step, worker=r, batch_size=tokens)[0] for r in range(ranks)]
        for order, roi in row_of_id.items():
            got = received_rows(sets, v, ranks, roi)
            ratios[order].append(float(got.max()) / float(got.double().mean()))
        totals.append(int(got.sum()))
    rows_per_step = float(np.median(totals))
    return [
        {
            "recipe": recipe,
            "vocab": v,
            "ranks": ranks,
            "order": order,
            "busiest_over_mean_median": float(np.median(r)),
            "busiest_over_mean_max": float(np.max(r)),
            "rows_received_per_step": rows_per_step,
            "theorem2_bound": balls_into_bins_bound(int(rows_per_step), ranks),
            "steps": steps,
        }
        for order, r in ratios.items()
    ]


def bench_fsdp_balance(overrides: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """For each recipe and rank count: each rank's batch of a step (the recipe's ``batch_per_worker x
    workers_per_rank`` sequences, its data and tokenizer), the rows each shard receives in a sparse reduce-scatter
    (:func:`~zen_analysis.fsdp.hashed.received_rows`) under the three row orders; the busiest over the mean, median
    and worst over ``steps`` steps. Written to ``data/derived/fsdp/balance.{parquet,txt}``."""
    opts = parse_sets(
        "fsdp-balance",
        overrides,
        {"recipes": ["lstm-words", "default"], "ranks": [4, 8], "steps": 20, "strata": 256, "seed": 0, "batch": 0},
        {"recipes": names, "ranks": ints},
    )
    rows = []
    for recipe in opts["recipes"]:
        cfg = recipes.get(recipe)
        data = open_data(prepare(cfg.data), seq_len=cfg.train.seq_len, seed=cfg.train.seed)
        if not isinstance(data, TokenData):
            raise ValueError(f"{recipe} has no token vocabulary (a CTR recipe): pick a language-model recipe")
        per_rank = {**opts, "batch": opts["batch"] or cfg.train.batch_per_worker * cfg.train.workers_per_rank}
        for ranks in opts["ranks"]:
            rows += _balance_rows(data, recipe, ranks, opts["steps"], per_rank)
    table = pd.DataFrame(rows)
    shown = table.drop(columns=["steps"]).round(3)
    published = {k: ",".join(map(str, v)) if isinstance(v, list) else v for k, v in opts.items()}
    publish(table, paths.derived_dir() / "fsdp" / "balance", shown, published)
    return table


def fsdp_sweep(
    ranks: list[int], bandwidth_gbps: float, variants: list[str], settings: FSDPSettings, recipe: str
) -> pd.DataFrame:
    """Every variant at every rank count (:func:`~zen_experiments.fsdp_train.fsdp_rank`), behind links of
    ``bandwidth_gbps`` in the network lab (0: loopback, no lab); one row per (ranks, variant, step, rank)."""
    cfg = recipes.get(recipe)
    prepared = prepare(cfg.data)
    chosen = [VARIANTS[v] for v in variants]
    rows = []
    for n in ranks:
        if bandwidth_gbps > 0:
            with NetLab(ranks=n, bandwidth_gbps=bandwidth_gbps) as lab:
                got = fork_launch(fsdp_rank, n, chosen, settings, prepared, lab=lab, timeout_s=3000.0)
        else:
            got = fork_launch(fsdp_rank, n, chosen, settings, prepared, timeout_s=3000.0)
        for rank, per_variant in enumerate(got):
            for variant, steps in per_variant.items():
                rows += [{"ranks": n, "variant": variant, "rank": rank, **s} for s in steps]
    return pd.DataFrame(rows)


def fsdp_summary(steps: pd.DataFrame, settings: FSDPSettings) -> pd.DataFrame:
    """Per (ranks, variant), over the timed steps: the step (the slowest rank's, median), its breakdown (medians of
    the ranks' means), tokens/s, bytes each rank wrote, the busiest shard's received rows over the mean, and the
    largest per-step loss difference from stock FSDP2 at the same reduce dtype."""
    timed = steps[steps.step >= settings.warmup]
    out = []
    for (n, variant), g in timed.groupby(["ranks", "variant"], sort=False):
        per_step = g.groupby("step")
        step_s = float(per_step.step_s.max().median())
        mean = per_step.mean(numeric_only=True).median()
        comm = mean.all_gather_s + mean.reduce_scatter_s
        rows = [r for r in g[g["rank"] == 0].received_rows if sum(r)]
        base = "stock-bf16" if VARIANTS[variant].reduce_dtype == "bf16" else "stock"
        losses = steps[(steps.ranks == n) & (steps["rank"] == 0)].pivot(index="step", columns="variant", values="loss")
        out.append(
            {
                "ranks": n,
                "variant": variant,
                "step_s": step_s,
                "tokens_per_s": n * settings.batch * settings.seq_len / step_s,
                "compute_s": float(mean.forward_backward_s - comm),
                "all_gather_s": float(mean.all_gather_s),
                "reduce_scatter_s": float(mean.reduce_scatter_s),
                "optimizer_s": float(mean.optimizer_s),
                "rest_s": float(step_s - mean.forward_backward_s - mean.optimizer_s),
                "embed_reduce_scatter_s": float(mean.embed_reduce_scatter_s),
                "embed_all_gather_s": float(mean.embed_all_gather_s),
                "written_mb_per_rank": float(mean.written_bytes) / 1e6,
                "busiest_rows_over_mean": float(np.median([max(r) / np.mean(r) for r in rows])) if rows else np.nan,
                "loss_diff_vs_stock": float((losses[variant] - losses[base]).abs().max()) if base in losses else np.nan,
            }
        )
    return pd.DataFrame(out)


def bench_fsdp(overrides: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """Stock FSDP2 against Zen-FSDP2 on a large-vocabulary Llama (:mod:`~zen_experiments.fsdp_train`), at
    each rank count behind links of ``bandwidth`` Gbit/s (``bandwidth=0``: loopback, no lab). Per-step records go
    to ``data/derived/fsdp/steps.parquet``, the summary (:func:`fsdp_summary`) to ``train.{parquet,txt}``, with the
    speedups of Zen's rows over stock's."""
    base = FSDPSettings()
    opts = parse_sets(
        "fsdp",
        overrides,
        {
            "ranks": [4, 8],
            "bandwidth": 1.0,
            "variants": list(VARIANTS),
            "recipe": "lstm-words",
            **{f: getattr(base, f) for f in FSDPSettings.__dataclass_fields__},
        },
        {"ranks": ints, "variants": names},
    )
    unknown = sorted(set(opts["variants"]) - set(VARIANTS))
    if unknown:
        raise ValueError(f"bench fsdp: unknown variants {unknown}; the variants are {', '.join(VARIANTS)}")
    settings = FSDPSettings(**{f: opts[f] for f in FSDPSettings.__dataclass_fields__})
    steps = fsdp_sweep(opts["ranks"], opts["bandwidth"], opts["variants"], settings, opts["recipe"])
    out_dir = paths.derived_dir() / "fsdp"
    published = {k: ",".join(map(str, v)) if isinstance(v, list) else v for k, v in opts.items()}
    write_table(out_dir / "steps.parquet", steps, {"options": published})
    summary = fsdp_summary(steps, settings)
    stock = summary[summary.variant == "stock"].set_index("ranks")
    summary["step_speedup"] = [stock.step_s.get(n, np.nan) / s for n, s in zip(summary.ranks, summary.step_s)]
    summary["embed_rs_speedup"] = [
        stock.embed_reduce_scatter_s.get(n, np.nan) / s for n, s in zip(summary.ranks, summary.embed_reduce_scatter_s)
    ]
    publish(summary, out_dir / "train", summary.round(4), published)
    return summary
