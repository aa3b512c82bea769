"""zen-analysis: a toolkit for sparse gradient synchronization research in distributed LLM training.

Train small LLMs on N data-parallel ranks from a notebook cell, capture each worker's sparse gradients, and (in
the modules that build on these) characterise their sparsity, evaluate communication schemes, run Zen and EDiT.

The names most notebooks need::

    from zen_analysis import recipes, launch, TraceReader  # each loads on first use
    result = launch(recipes.smoke())
    reader = result.traces()

``dir(zen_analysis)`` and ``help(zen_analysis)`` list them (``__all__``); the API reference documents them and
the modules the notebooks import from.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = [
    "ExperimentConfig",
    "RankFailedError",
    "RunResult",
    "TraceReader",
    "apply_overrides",
    "launch",
    "paper_figures",
    "paths",
    "plot_paper_figures",
    "recipes",
    "runs_or_fallback",
]

if TYPE_CHECKING:  # type checkers only: at run time __getattr__ imports each name on first use (no torch at import)
    from zen_analysis import paths, recipes  # lazy facade, see __getattr__
    from zen_analysis.capture.reader import TraceReader  # lazy facade, see __getattr__
    from zen_analysis.config import ExperimentConfig, apply_overrides  # lazy facade, see __getattr__
    from zen_analysis.paper.figures import paper_figures  # lazy facade, see __getattr__
    from zen_analysis.plots.paper import throughput_vs_machines as plot_paper_figures  # lazy facade, see __getattr__
    from zen_analysis.ranks.procs import RankFailedError  # lazy facade, see __getattr__
    from zen_analysis.runs.launch import RunResult, launch, runs_or_fallback  # lazy facade, see __getattr__

_LAZY = {
    "ExperimentConfig": "zen_analysis.config",
    "apply_overrides": "zen_analysis.config",
    "TraceReader": "zen_analysis.capture.reader",
    "launch": "zen_analysis.runs.launch",
    "RankFailedError": "zen_analysis.ranks.procs",
    "RunResult": "zen_analysis.runs.launch",
    "runs_or_fallback": "zen_analysis.runs.launch",
    "paper_figures": "zen_analysis.paper.figures",
    "plot_paper_figures": "zen_analysis.plots.paper:throughput_vs_machines",
}
"""Each public name's module (``module:attribute`` where the name is the attribute's public alias)."""


def __getattr__(name: str) -> Any:
    # Lazy: `import zen_analysis` stays cheap and does not import torch until a name is used.
    if name in ("paths", "recipes"):
        return importlib.import_module(f"zen_analysis.{name}")
    if name in _LAZY:
        module, _, attribute = _LAZY[name].partition(":")
        return getattr(importlib.import_module(module), attribute or name)
    raise AttributeError(f"module 'zen_analysis' has no attribute {name!r}")


def __dir__() -> list[str]:
    # PEP 562: without it dir() (and so help()) sees only what is imported already, not the lazy names
    return sorted(set(globals()) | set(__all__))
