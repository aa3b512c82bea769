"""What ``auto``'s statistics cost a training step: ``lstm-words`` on 8 ranks x 1 micro-batch, each rank behind a
1 Gbit/s link of the network lab (root), trained with Zen, with ``auto`` deciding every step and with ``auto`` at the
default interval (``sync.planner_every=50``), the bench's step otherwise (``bench train``'s natural part).

    .venv/bin/python scripts/planner_cost.py --steps 20

Printed per variant: rank 0's median step, sync and exchange seconds after 2 warm-up steps, tokens/s, and for
``auto`` the decisions' seconds (the first, and the median of the rest): sketch, gather (waiting in it included) and
the pricing of every candidate, from the run summary's ``planner`` entry.
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    import numpy as np

    from zen_analysis import paths, recipes
    from zen_experiments.lab_sweeps import training_sweep

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--workload", default="lstm-words")
    args = p.parse_args()
    base = recipes.get(args.workload)
    base.name = f"planner-cost-{args.workload}-r{args.ranks}"
    base.dist.num_ranks = args.ranks
    base.train.workers_per_rank = 1
    common = {
        "train.embedding_update": "lazy",
        "model.sparse_embedding": "true",
        "sync.overlap": "true",
        "sync.bucket_mb": 4.0,
    }
    variants = {
        "zen": {"sync.method": "natural", "sync.scheme": "zen", **common},
        "auto, every step": {"sync.method": "natural", "sync.scheme": "auto", "sync.planner_every": 1, **common},
        "auto, every 50": {"sync.method": "natural", "sync.scheme": "auto", "sync.planner_every": 50, **common},
    }
    table = training_sweep(base, bandwidths=(1.0,), variants=variants, steps=args.steps, warmup=2)
    for _, r in table.iterrows():
        line = (
            f"{r['variant']:>16}: median step {r['step_s']:.3f} s, sync {r['sync_s']:.3f}, exchange "
            f"{r['exchange_s']:.3f}, {r['tokens_per_s']:,.0f} tokens/s"
        )
        summary = json.loads((paths.run_dir(r["run_id"]) / "summary.json").read_text())
        for tensor, decision in (summary.get("planner") or {}).items():
            secs = [h["seconds"] for h in decision["history"]]
            rest = f", median of the other {len(secs) - 1}: {1e3 * np.median(secs[1:]):.1f} ms" if len(secs) > 1 else ""
            line += f"; {tensor}: {decision['scheme']}, first decision {1e3 * secs[0]:.1f} ms{rest}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
