"""``make reproduce``'s paper-scale stage: the paper's workloads generated at its sizes, characterized (C1-C3) at
128 GPUs beside its Fig. 2-3 statements, and its Fig. 11-15 and 17b modelled from them with every paper number
beside the model's (:mod:`~zen_analysis.paper.figures`).

Writes the data contract ``data/derived/paper/fig11_15.csv`` (a row per workload, testbed, machines and scheme) and
``fig11_15_paper.csv`` (the paper's numbers beside the model's, with a computed cause where they differ by more than
25%), the stage's tables under ``data/derived/reproduce/`` for its results page, and ``figures/paper_fig11_14.png``.
"""

from __future__ import annotations

import pandas as pd
from matplotlib import pyplot as plt

from zen_analysis import paths
from zen_analysis.atomic import atomic_write_text
from zen_analysis.paper.figures import paper_figures, write_paper_figures
from zen_analysis.plots import style
from zen_analysis.plots.paper import throughput_vs_machines
from zen_analysis.sparsity.paper_characterize import characterize_paper_workloads
from zen_analysis.sparsity.report import to_markdown

CHARACTERIZE_GPUS = 128
"""The GPUs the generated sets are characterized at: the paper's largest, 16 machines x 8."""


def _markdown(df: pd.DataFrame) -> str:
    """``df`` as a Markdown table, numbers to 3 significant digits, missing cells empty."""
    shown = df.copy()
    for col in shown.columns:
        if pd.api.types.is_float_dtype(shown[col]):
            shown[col] = [f"{v:.3g}" if pd.notna(v) else "" for v in shown[col]]
    return to_markdown(shown.fillna("")) + "\n"


def stage_paper() -> None:
    """The paper-scale stage (module docstring)."""
    out = paths.derived_dir() / "reproduce"
    out.mkdir(parents=True, exist_ok=True)
    stats = characterize_paper_workloads(CHARACTERIZE_GPUS)
    atomic_write_text(out / "paper_workloads_c1_c3.md", _markdown(stats))
    print(stats.to_string(index=False))
    table = paper_figures()
    csv, paper_csv = write_paper_figures(table)
    fig = throughput_vs_machines(table)
    style.savefig(fig, "paper_fig11_14")
    plt.close(fig)
    columns = ["figure", "workload", "testbed", "ratio", "paper", "model", "read_at", "cause"]
    comparison = table.attrs["paper"][columns]
    atomic_write_text(out / "paper_fig11_15_beside_the_paper.md", _markdown(comparison))
    print(comparison.drop(columns="cause").to_string(index=False))
    print(f"written: {csv}, {paper_csv}, {paths.figures_dir() / 'paper_fig11_14.png'}")
