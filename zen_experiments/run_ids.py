"""The runs ``make reproduce`` trains, by recipe and run id: what the notebooks, the benchmarks and the reproduce
stages (:mod:`zen_experiments.reproduce`) read, so a workload added here shows up in all of them."""

from __future__ import annotations

from zen_analysis.recipes import unavailable

__all__ = [
    "EVALUATE_STEPS",
    "REPLAY_RANKS",
    "REPRODUCE_RUNS",
    "RUN_OVERRIDES",
    "SCALE_RUN",
    "reproduce_recipes",
    "reproduce_run_id",
    "reproduce_run_ids",
]

REPRODUCE_RUNS = ("default", "lstm-words", "workers128", "opt", "gemma2", "deepfm", "minilm")
"""Recipes trained and characterized by ``make reproduce``; their run ids are ``reproduce-<recipe>``. ``minilm`` (a
pretrained checkpoint) only where the checkpoint is at hand (:func:`zen_analysis.recipes.unavailable`)."""
RUN_OVERRIDES = {
    "opt": ("train.num_steps=30", "train.workers_per_rank=4"),
    "gemma2": ("train.num_steps=30", "train.workers_per_rank=4"),
    "deepfm": ("train.num_steps=30", "train.workers_per_rank=4"),
}
"""Trims of the reproduction runs, to keep ``make reproduce`` in its budget: OPT, Gemma 2 and DeepFM (for the
characterization only) train 30 steps with 16 workers, captured at steps 0, 10 and 20."""
EVALUATE_STEPS = 3
"""Captured steps per run the scheme evaluation models (bucket traces are large: modelling all seven schemes on
every bucket of every captured step would take most of ``make reproduce``'s budget for the default run alone)."""
SCALE_RUN = "workers1024"
"""Trained by the scale stage, for the scheme evaluation's scale mode only (n up to 1024)."""
REPLAY_RANKS = 4
"""Ranks of the measured replays (the default run's embedding through every scheme on gloo ranks)."""


def reproduce_run_id(recipe: str) -> str:
    """The run id ``make reproduce`` gives a recipe's run."""
    return f"reproduce-{recipe}"


def reproduce_recipes() -> list[str]:
    """The recipes of :data:`REPRODUCE_RUNS` that can be trained here (:func:`zen_analysis.recipes.unavailable`)."""
    return [name for name in REPRODUCE_RUNS if unavailable(name) is None]


def reproduce_run_ids() -> list[str]:
    """The runs ``make reproduce`` trains and characterizes (:func:`reproduce_recipes`), by run id: the list the
    notebooks read, so a workload added here shows up in every one of them."""
    return [reproduce_run_id(name) for name in reproduce_recipes()]
