"""Zen under FSDP2, measured (:mod:`zen_analysis.fsdp`).

* :func:`bench_fsdp_balance`: the busiest rank's received rows in a sparse reduce-scatter over the mean, with the
  table stored contiguously (FSDP2's order), in the plain h0 order and in the stratified h0 order
  (:func:`~zen_analysis.fsdp.hashed.hashed_order`), on real batches of the recipes' data, beside Theorem 2's
  balls-into-bins bound for the same number of rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from zen_analysis import paths, recipes
from zen_analysis.experiments.bench_options import ints, names, parse_sets, publish
from zen_analysis.fsdp.hashed import balls_into_bins_bound, hashed_order, inverse, received_rows
from zen_analysis.workload.data import TokenData, open_data, prepare

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
