"""The local-SGD benchmarks (EDiT, A-EDiT and sparse pseudo-gradients): ``zen-analysis bench stragglers``,
``pseudo_density`` and ``pseudo_claims`` (registered in :mod:`zen_experiments.benchmarks`)."""

from __future__ import annotations

import pandas as pd

from zen_analysis import paths, recipes
from zen_analysis.config import apply_overrides
from zen_analysis.config.options import CONFIG, ints, names
from zen_analysis.evaluation.evaluate import evaluate_runs, speedups
from zen_analysis.plots.local_sgd_figures import throughput
from zen_experiments.bench_options import draw_figure, parse_sets, publish
from zen_experiments.local_sgd_runs import EDIT_TUNED, straggler_table
from zen_experiments.pseudo_gradients import (
    SHORT_SYNC,
    pseudo_gradient_claims,
    pseudo_gradient_density,
    short_base,
)


def bench_stragglers(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """EDiT vs A-EDiT with one consistent 2x straggler, on 2 ranks (one per core here) and on 4 (two per core):
    the default Llama, one worker per rank, 60 steps per rank (the same total step budget), sync every 8 steps
    (EDiT) or every 8 steps' worth of time (A-EDiT, measured without the straggler); tokens/s of the whole run
    and of the local phase after the synchronous warm-up. ``--set ranks=4`` runs one world size. Figure
    ``stragglers_throughput``: tokens/s per method and scenario, the EDiT paper's throughput-under-stragglers panel."""

    opts = parse_sets("stragglers", overrides, {"ranks": [2, 4]}, {"ranks": ints}, config=True)
    worlds = opts["ranks"]
    tables, ratios = [], {}
    for world in worlds:
        base = recipes.default()
        base.name = "bench-stragglers"
        base.train.workers_per_rank = 1
        base.dist.num_ranks = world
        base = apply_overrides(base, opts[CONFIG])
        table = straggler_table(base)
        tables.append(table)
        pick = {m: table.query(f"method == '{m}' and straggler != 'none'").iloc[0] for m in ("edit", "a_edit")}
        ratios[world] = {
            "whole_run": pick["a_edit"]["tokens_per_s"] / pick["edit"]["tokens_per_s"],
            "local_phase": pick["a_edit"]["local_tokens_per_s"] / pick["edit"]["local_tokens_per_s"],
            "ideal": table.attrs["ideal"],
            "sync_time_s": table.attrs["sync_time_s"],
        }
    out = pd.concat(tables, ignore_index=True)
    draw_figure(throughput(straggler_scenarios(out)), "stragglers_throughput")
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(out.round(3).to_string(index=False))
    for world, r in ratios.items():
        print(
            f"{world} ranks: A-EDiT / EDiT tokens/s with the straggler = {r['whole_run']:.2f} (whole run), "
            f"{r['local_phase']:.2f} (local phase); independent devices would give {r['ideal']:.2f}; "
            f"A-EDiT sync time {r['sync_time_s']:.2f} s"
        )
    return {"table": out, "ratios": ratios}


def straggler_scenarios(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`straggler_table`'s rows as the throughput figure reads them: ``method``, ``scenario`` (the world
    size and the straggler) and ``tokens_per_s`` of the whole run."""
    scenario = table["ranks"].astype(int).astype(str) + " ranks, straggler: " + table["straggler"]
    return pd.DataFrame({"method": table["method"], "scenario": scenario, "tokens_per_s": table["tokens_per_s"]})


def bench_pseudo_density(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Natural sparsity of pseudo-gradients
    (:func:`~zen_experiments.pseudo_gradients.pseudo_gradient_density`): the default Llama
    and the word-level LSTM (``--set recipes=default,lstm-words``), EDiT on 4 ranks x 1 worker,
    28 steps (warm-up 4, a sync every 8: 3 outer syncs), under AdamW with and without weight decay and the lazy
    embedding update; how much of the embedding's pseudo-gradient is exactly zero. Table
    ``data/derived/pseudo_density/pseudo_density``."""

    opts = parse_sets(
        "pseudo_density",
        overrides,
        {"recipes": ["default", "lstm-words"], "ranks": 4, "steps": 28},
        {"recipes": names},
        config=True,
    )
    bases = [
        short_base(name, f"bench-density-{name}", steps=opts["steps"], ranks=opts["ranks"], overrides=opts[CONFIG])
        for name in opts["recipes"]
    ]
    table = pseudo_gradient_density(bases, **EDIT_TUNED, **SHORT_SYNC)
    stem = paths.derived_dir() / "pseudo_density" / "pseudo_density"
    publish(table, stem, table.drop(columns=["run_id"]).round(4), {k: v for k, v in opts.items() if k != CONFIG})
    return {"table": table}


def bench_pseudo_claims(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The characterization claims (C1-C3) of top-k pseudo-gradients beside the gradients'
    (:func:`~zen_experiments.pseudo_gradients.pseudo_gradient_claims`): the default Llama and the word-level
    LSTM, EDiT with top-k pseudo-gradients (``--set ratio=0.02``) through Zen on 4 ranks x 1 worker, 44 steps
    (warm-up 4, a sync every 8: 5 outer syncs), the gradients captured every 8 steps and the selections at every
    outer sync (``--set mode=all`` adds the before-selection records: about 8 bytes per parameter per worker and
    sync). Tables ``data/derived/pseudo_claims/pseudo_claims-<ranks>ranks`` and ``pseudo_claims_schemes-<ranks>ranks``:
    every scheme's modelled speed-up over the dense all-reduce on the same traces (paper-tcp25), per workload."""

    opts = parse_sets(
        "pseudo_claims",
        overrides,
        {"recipes": ["default", "lstm-words"], "ranks": 4, "steps": 44, "mode": "sent", "ratio": 0.02},
        {"recipes": names},
        config=True,
    )
    frames = []
    for name in opts["recipes"]:
        base = short_base(
            name, f"bench-claims-{name}", steps=opts["steps"], ranks=opts["ranks"], overrides=opts[CONFIG]
        )
        claims = pseudo_gradient_claims(
            base,
            mode=opts["mode"],
            progress=True,
            **EDIT_TUNED,
            **SHORT_SYNC,
            **{"local_sgd.topk_ratio": opts["ratio"]},
        )
        frame = claims.assign(recipe=name, run_id=claims.attrs["run_id"])
        frame.attrs = {}  # (concat compares the frames' attrs: tables of DataFrames)
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    table["holds"] = table["holds"].astype(str)
    stem = paths.derived_dir() / "pseudo_claims" / f"pseudo_claims-{opts['ranks']}ranks"
    shown = table[["recipe", "claim", "signal", "workload", "we measure", "holds"]]
    published = {k: v for k, v in opts.items() if k != CONFIG}
    publish(table, stem, shown, published)
    # which scheme fits: every scheme modelled on the same traces (paper-tcp25), at all the run's workers
    modelled = evaluate_runs(sorted(set(table["run_id"])), topologies=["paper-tcp25"], progress=False)
    fits = speedups(modelled, topology="paper-tcp25", n=opts["ranks"])
    fits = fits.pivot(index="workload", columns="scheme", values="speedup").round(2)
    print(f"\nmodelled speed-up over dense all-reduce on paper-tcp25, n={opts['ranks']} (median over steps, tensors):")
    publish(
        fits.reset_index(), stem.with_name(f"pseudo_claims_schemes-{opts['ranks']}ranks"), fits.reset_index(), published
    )
    return {"table": table, "schemes": fits}
