"""Benchmarks of the schemes and Zen's kernels (``zen-analysis bench comm | hashing | zen``; registered in
:mod:`zen_experiments.benchmarks`): every scheme measured beside its model on gloo ranks, Algorithm 1
against a sort, and ``zen_sum`` against a dense all-reduce and the sparse schemes. Ratios are measured side by side
in one run and reported as medians; each benchmark's ``--set key=value`` options are parsed by
:func:`zen_experiments.bench_options.parse_sets`."""

from __future__ import annotations

import time

import pandas as pd
import torch

from zen_analysis import recipes
from zen_analysis.config.options import floats, ints
from zen_analysis.evaluation import measure, replay
from zen_analysis.runs.launch import ensure_run
from zen_analysis.zen import native
from zen_analysis.zen.hierarchical import bucket_reference, hierarchical_hash
from zen_experiments import zen_speed
from zen_experiments.bench_options import parse_sets
from zen_experiments.run_ids import reproduce_run_id
from zen_experiments.zen_speed import model_check, speed_table, summary


def bench_comm(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Every scheme on 4 real gloo ranks replaying the default run's captured embedding gradients, against
    its alpha-beta model on this machine calibrated at 4 ranks (``zen-analysis replay`` with the
    reproduce run; trains it first if ``make reproduce`` has not)."""

    opts = parse_sets("comm", overrides, {"ranks": 4, "steps": 3, "repeats": 25})
    cfg = recipes.default()
    cfg.run_id = reproduce_run_id("default")
    run = ensure_run(cfg)
    df = replay.replay_run(run, ranks=opts["ranks"], steps=opts["steps"], repeats=opts["repeats"], recalibrate=True)
    summary = measure.summarize(df)
    print(
        f"{run} embedding ({df['numel'].iloc[0]:,} elements), {opts['ranks']} gloo ranks, {opts['steps']} steps, "
        f"{opts['repeats']} repeats"
    )
    print(measure.report(summary))
    return {"phases": df, "summary": summary}


def bench_hashing(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Algorithm 1 at the paper's Fig. 16 size on this CPU: ``hierarchical_hash`` of 10M distinct indices of a
    214M-element tensor (about 5% density) into 16 partitions — the compiled kernel (``backend="native"``, one
    thread per torch thread) and the torch rounds — against the argsort reference and a memory-copy floor
    (cloning the 10M int64 indices once); medians of 5 after a warm-up, in this process."""

    opts = parse_sets("hashing", overrides, {"numel": 214_000_000, "nnz": 10_000_000, "partitions": 16, "repeats": 5})
    gen = torch.Generator().manual_seed(0)
    idx = torch.unique(torch.randint(0, opts["numel"], (int(opts["nnz"] * 1.03),), generator=gen))
    idx = idx[
        torch.randperm(idx.numel(), generator=gen)[: opts["nnz"]]
    ]  # distinct, unsorted (as nonzero() of a bucket)

    def median(fn) -> float:
        fn()
        times = []
        for _ in range(opts["repeats"]):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2]

    n = opts["partitions"]
    out = {"native_s": float("nan"), "threads": torch.get_num_threads()}
    if native.available():
        out["native_s"] = median(lambda: hierarchical_hash(idx, n, seed=1, backend="native"))
    else:
        print(f"native kernel unavailable ({native.unavailable_reason()}): timing the torch rounds only")
    out["torch_rounds_s"] = median(lambda: hierarchical_hash(idx, n, seed=1, backend="torch"))
    out["argsort_s"] = median(lambda: bucket_reference(idx, n, seed=1))
    out["memcpy_s"] = median(lambda: idx.clone())
    b = hierarchical_hash(idx, n, seed=1)
    out["serial_fraction"] = b.serial_count / idx.numel()
    best = out["native_s"] if native.available() else out["torch_rounds_s"]
    print(
        f"hashing {idx.numel():,} indices of a {opts['numel']:,}-element tensor into {n} partitions "
        f"({out['threads']} torch threads; Algorithm 1 with r1 = 2x, k = 3, {100 * out['serial_fraction']:.1f}% "
        "to serial regions):\n"
        f"  hierarchical_hash, native kernel: {out['native_s']:.3f} s   torch rounds: {out['torch_rounds_s']:.3f} s\n"
        f"  argsort reference: {out['argsort_s']:.3f} s   memory-copy floor: {out['memcpy_s']:.4f} s\n"
        f"  Algorithm 1 / argsort = {best / out['argsort_s']:.2f} (target <= 1), / memcpy = "
        f"{best / out['memcpy_s']:.0f}"
    )
    return out


def bench_zen(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """``zen_sum`` vs dense all-reduce, AGsparse and BP-COO on 2 gloo ranks (one per core), at 4M / 32M / 128M
    elements and 0.5% / 1% / 5% density with 30% overlap, beside the local-work floor and Zen's local steps
    (:mod:`zen_experiments.zen_speed`), medians of 9. ``--set sizes=4000000,32000000 densities=0.01
    repeats=5``."""

    defaults = {"sizes": list(zen_speed.SIZES), "densities": list(zen_speed.DENSITIES), "repeats": 9, "ranks": 2}
    opts = parse_sets("zen", overrides, defaults, {"sizes": ints, "densities": floats})
    table = speed_table(**opts)
    wrong = table[(table.get("exact") == False)]  # noqa: E712 - NaN for the local rows
    if len(wrong):
        raise RuntimeError(f"a scheme's sum differs from all_reduce:\n{wrong}")
    summ = summary(table)
    steps = table[table["what"].str.startswith("zen:")].pivot_table(
        index=["numel", "density"], columns="what", values="seconds"
    )
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.float_format", "{:.4f}".format):
        print(
            f"{opts['ranks']} gloo ranks, medians of {opts['repeats']} of the slowest rank's seconds (every "
            "result equal to all_reduce):"
        )
        print(summ.to_string())
        print("Zen's local steps (seconds, slowest rank):")
        print(steps.to_string())
        calls = table[table["what"] == "zen"]["calls"].max()
        print(f"zen_sum collective calls per sync: {int(calls)}")
        check = model_check(table)
        print(
            f"time model (wire + local work, this machine calibrated at {opts['ranks']} ranks on <= 4M "
            "elements) / measured:"
        )
        print(check.to_string(float_format="{:.2f}".format))
    return {"table": table, "summary": summ, "model": check}
