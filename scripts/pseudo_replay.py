"""Replay a run's captured top-k pseudo-gradients (``capture.pseudo``, kind ``pseudo_topk``: one sync group's
selections of every worker at its first outer sync; ``--group root`` by default, the Llama's 4.19M-element one)
through every scheme and ``auto`` in the network lab (root),
each rank behind links of each rate: the outer sync's sum measured apart from training's noise (8 ranks on 2 cores
move a training run's outer sync by as much as the schemes differ). Medians of ``--repeats``.

    .venv/bin/python scripts/pseudo_replay.py --run bench-claims-default-edit-pseudo-sent --ranks 8 --gbps 0.1,0.5,1

The run comes from ``zen-analysis bench pseudo_claims --set ranks=8``
(docs/guide/local-sgd.md, "Sparse pseudo-gradients").
"""

import argparse

import pandas as pd

from zen_experiments.lab_sweeps import scheme_sweep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="bench-claims-default-edit-pseudo-sent")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--gbps", default="0.1,0.5,1")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--group", default="root", help="the sync group whose selections are replayed")
    a = ap.parse_args()
    rates = [float(g) for g in a.gbps.split(",")]
    tensor = f"pseudo_topk/{a.group}"
    table = scheme_sweep(a.run, ranks=[a.ranks], bandwidths=rates, tensor=tensor, repeats=a.repeats)
    cols = ["bandwidth_gbps", "scheme", "measured_s_median", "modelled_s", "speedup_measured", "vs_best"]
    cols = [c for c in cols if c in table.columns]
    with pd.option_context("display.width", 200):
        print(f"{a.run}: {table['tensor'].iloc[0]}, {a.ranks} ranks; seconds of one sum, medians of {a.repeats}")
        print(table[cols].round(4).to_string(index=False))


if __name__ == "__main__":
    main()
