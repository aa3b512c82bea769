"""Natural sparsity of pseudo-gradients on a slow link: the word-level LSTM (its embedding is 88% of the model, 1% of
it changed per round under the lazy update), EDiT on 4 ranks x 1 micro-batch behind 0.5 Gbit/s links (the network
lab: root), 40 steps (warm-up 4, a sync every 8), ``train.embedding_update=lazy`` in every run: the dense all-reduce
against ``local_sgd.compress=natural`` summed by Zen and by ``auto`` (the planner per sync group). One JSON line per
variant (docs/guide/local-sgd.md, "Sparse pseudo-gradients"). About 6 minutes.

    .venv/bin/python scripts/pseudo_natural.py [--gbps 0.5]
"""

import argparse
import json

from zen_experiments.local_sgd_runs import EDIT_TUNED, method_run
from zen_experiments.pseudo_gradients import SHORT_SYNC, outer_sync_row, short_base

VARIANTS = {
    "edit": {},
    "edit+natural+zen": {"local_sgd.compress": "natural", "sync.scheme": "zen"},
    "edit+natural+auto": {"local_sgd.compress": "natural", "sync.scheme": "auto"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gbps", type=float, default=0.5)
    a = ap.parse_args()
    base = short_base("lstm-words", "bench-netlab-natural", steps=40)
    settings = {**EDIT_TUNED, **SHORT_SYNC}
    lab = {
        "dist.num_ranks": 4,
        "dist.network": "netlab",
        "dist.bandwidth_gbps": a.gbps,
        "train.embedding_update": "lazy",
    }
    tps = base.train.workers_per_rank * base.train.batch_per_worker * base.train.seq_len
    for name, extra in VARIANTS.items():
        s = method_run(base, "edit", tag=f"{name.replace('+', '-')}-r4-{a.gbps:g}g", **settings, **extra, **lab)
        row = {
            "variant": name,
            **outer_sync_row(s, tps),
            "planner": {k: d["scheme"] for k, d in (s.get("planner") or {}).items()},
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
