"""Benchmarks (``zen-analysis bench ...`` / ``make bench``): ratios measured side by side in one run, medians.

``capture``: the cost of gradient capture relative to training. One run of the default model on 2 ranks
(one per core, so nothing is oversubscribed) with 32 workers, capturing every ``capture.every`` steps. Each
step's wall time and the time spent inside capture code (isolating per-worker gradients, top-k, buffering,
writing Parquet shards) are logged by rank 0; the overhead is rank 0's total capture time over the whole run /
the run's time without it. The median step time of captured vs plain steps is printed beside it as a check.
"""

from __future__ import annotations

from zen_analysis import recipes
from zen_analysis.config import apply_overrides


def bench_capture(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    from zen_analysis.dist.launch import launch

    cfg = recipes.default()
    cfg.name = "bench-capture"
    cfg.run_id = "bench-capture"
    cfg.dist.num_ranks = 2
    cfg.train.workers_per_rank = 16
    cfg.train.num_steps = 50  # captures at 0, 10, ..., 40: the 5th fills a shard, so a write is timed too
    cfg = apply_overrides(cfg, overrides)
    result = launch(cfg, echo=False)
    m = result.metrics().iloc[2:]  # the first steps warm up allocators and caches
    captured, plain = m[m["captured"]], m[~m["captured"]]
    s = result.summary
    overhead = s["capture_s_rank0"] / (s["elapsed_s"] - s["capture_s_rank0"])
    out = {
        "capture_every": cfg.capture.every,
        "workers": cfg.num_workers,
        "steps": len(m),
        "median_step_s_plain": float(plain["step_s"].median()),
        "median_step_s_captured": float(captured["step_s"].median()) if len(captured) else float("nan"),
        "median_capture_s_per_captured_step": float(captured["capture_s"].median()) if len(captured) else float("nan"),
        "capture_overhead": float(overhead),
    }
    print(
        f"capture every {out['capture_every']} steps, {out['workers']} workers, {out['steps']} steps after 2 warm-up:\n"
        f"  median step time: plain {out['median_step_s_plain']:.3f} s, captured {out['median_step_s_captured']:.3f} s "
        f"(capture code {out['median_capture_s_per_captured_step']:.3f} s per captured step)\n"
        f"  capture overhead: {100 * out['capture_overhead']:.2f}% of training time (target <= 10%)"
    )
    return out


BENCHMARKS = {"capture": bench_capture}
