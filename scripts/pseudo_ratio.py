"""EDiT + top-k + Zen at several top-k ratios on 4 ranks x 0.1 Gbit/s (the network lab: root), with the settings of
``zen-analysis bench netlab --set parts=pseudo``: which ratio closes the validation-loss gap to dense EDiT, and what it
costs in speed (docs/guide/local-sgd.md, "Sparse pseudo-gradients"). One JSON line per ratio. About 3 minutes.

    .venv/bin/python scripts/pseudo_ratio.py
"""

import json

from zen_experiments.local_sgd_runs import EDIT_TUNED, method_run
from zen_experiments.pseudo_gradients import SHORT_SYNC, outer_sync_row, short_base


def main() -> None:
    base = short_base("default", "bench-netlab-pseudo-ratio", steps=40)
    settings = {**EDIT_TUNED, **SHORT_SYNC}
    tps = base.train.workers_per_rank * base.train.batch_per_worker * base.train.seq_len
    for ratio in (0.05, 0.1, 0.25):
        lab = {"dist.num_ranks": 4, "dist.network": "netlab", "dist.bandwidth_gbps": 0.1}
        topk = {"local_sgd.compress": "topk", "sync.scheme": "zen", "local_sgd.topk_ratio": ratio}
        s = method_run(base, "edit", tag=f"topk{ratio:g}-zen-r4-0.1g", **settings, **topk, **lab)
        row = {"ratio": ratio, **outer_sync_row(s, tps)}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
