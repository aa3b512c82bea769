"""Every script under ``scripts/``, in one registry: what each measures or runs, and how to dry-run it. A test
imports every Python script (its imports resolve, nothing runs on import), parses every shell script, and fails on a
file in ``scripts/`` this list does not name, so none rots unseen and none is a stray.

The scripts are the apparatus's one-off measurements and examples, each cited by the guide page that explains what
it shows; the benchmarks (:mod:`~zen_experiments.benchmarks`) are the repeatable ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["SCRIPTS", "SCRIPTS_DIR", "Script"]

SCRIPTS_DIR = Path(__file__).resolve().parents[1] / "scripts"
"""``scripts/`` at the checkout's root."""


@dataclass(frozen=True)
class Script:
    """One file of ``scripts/``: ``about`` what it is for; ``module``: a helper another script imports, not run on
    its own; ``data``: a file a script reads, not code."""

    about: str
    module: bool = False
    data: bool = False


SCRIPTS: dict[str, Script] = {
    "ddp_transformers.py": Script("a plain DDP training script with a transformers LM, Zen dropped in with one call"),
    "embedding_grad_cost.py": Script("what a dense embedding gradient costs a CPU step, beside sparse=True"),
    "exit_aborts.py": Script("how many torchrun exits of a Zen DDP program abort, under load"),
    "gpu_check.sh": Script("the GPU check on a borrowed GPU machine as it comes (--rehearse: on CPU)"),
    "gpu_check.py": Script("the GPU check's steps, each a child process under its own limit"),
    "gpu_check_ranks.py": Script("the GPU check's multi-rank step: ranks on one GPU", module=True),
    "gpu_machine_packages.txt": Script("the GPU machine's distributions, for the check's rehearsal", data=True),
    "planner_cost.py": Script("what auto's statistics cost a training step behind 1 Gbit/s links"),
    "pseudo_natural.py": Script("natural sparsity of pseudo-gradients on a slow link, the word LSTM"),
    "pseudo_ratio.py": Script("EDiT + top-k + Zen at several top-k ratios on 4 ranks x 0.1 Gbit/s"),
    "pseudo_replay.py": Script("a run's captured top-k pseudo-gradients replayed through the schemes"),
    "pseudo_sync_breakdown.py": Script("where an outer sync of top-k pseudo-gradients goes, phase by phase"),
    "sum_rows_lab.py": Script("per-call cost against bytes of the schemes' row sum behind shaped links"),
    "zen_cache_rss.py": Script("process RSS against what Zen's static hash-set cache counts"),
}
"""Every file of ``scripts/`` by name."""
