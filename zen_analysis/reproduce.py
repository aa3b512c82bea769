"""``make reproduce``: the main job on the embedded default data, stage by stage.

Today: train and capture the reproduction workloads (the small Llama, natural + top-k sparsity; the LSTM LM,
natural sparsity) on several ranks, then write a capture summary to ``data/derived/reproduce/``. Later stages
(characterization, scheme evaluation, Zen, EDiT figures) extend this same function.
"""

from __future__ import annotations

from zen_analysis import paths, recipes
from zen_analysis.atomic import atomic_write_text
from zen_analysis.config import apply_overrides

REPRODUCE_RUNS = ("default", "lstm")
"""Recipes trained by ``make reproduce``; their run ids are ``reproduce-<recipe>``."""


def reproduce_run_id(recipe: str) -> str:
    return f"reproduce-{recipe}"


def reproduce(overrides: list[str] | tuple[str, ...] = ()) -> None:
    from zen_analysis.capture.summary import describe_run
    from zen_analysis.dist.launch import launch

    reports = []
    for name in REPRODUCE_RUNS:
        cfg = apply_overrides(recipes.get(name), overrides)
        cfg.run_id = reproduce_run_id(name)
        print(f"== training {name}: {cfg.num_workers} workers on {cfg.dist.num_ranks} ranks, {cfg.train.num_steps} steps")
        launch(cfg)
        reports.append(describe_run(cfg.run_id))
        print(reports[-1])
    out = paths.derived_dir() / "reproduce" / "capture_summary.txt"
    atomic_write_text(out, "\n\n".join(reports) + "\n")
    print(f"summary written to {out}")
