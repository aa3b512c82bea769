"""Where an outer sync of top-k pseudo-gradients goes: per sync group of the default Llama (root 4.19M elements, two
blocks of 0.80M), each of 4 ranks (forked gloo; ``--gbps B``: behind B Gbit/s links in the network lab, root) selects
the top 2% of a random pseudo-gradient plus its residual (``PseudoGradientTopK.select``) and Zen sums the selections
(``build_scheme("zen").run``): seconds of the selection, of the sum, and of the sum's wire and local parts, medians of
the slowest rank over ``--rounds`` rounds after one warm-up (docs/guide/local-sgd.md, "Sparse pseudo-gradients").

    .venv/bin/python scripts/pseudo_sync_breakdown.py [--gbps 0.5] [--scheme zen] [--ratio 0.02]
"""

import argparse
import statistics
import time

import torch

from zen_analysis.ranks.procs import fork_launch

GROUPS = {"root": 4_194_560, "model.layers.0": 803_328, "model.layers.1": 803_328}


def _rank(rank: int, world: int, scheme_name: str, ratio: float, rounds: int) -> dict:
    torch.set_num_threads(1)
    from zen_analysis.comm import build_scheme
    from zen_analysis.local_sgd.sparse_pseudo import PseudoGradientTopK

    topk, scheme = PseudoGradientTopK(ratio), build_scheme(scheme_name)
    gen = torch.Generator().manual_seed(rank)
    out = {g: {"select_s": [], "sum_s": [], "wire_s": [], "local_s": []} for g in GROUPS}
    for rnd in range(rounds + 1):
        for g, n in GROUPS.items():
            delta = torch.randn(n, generator=gen)
            t0 = time.perf_counter()
            sent, _ = topk.select(g, delta, worker=rank, round=rnd)
            t1 = time.perf_counter()
            scheme.run(sent)
            t2 = time.perf_counter()
            if rnd:  # the first round warms up
                times = scheme.last_times()
                for k, v in (
                    ("select_s", t1 - t0),
                    ("sum_s", t2 - t1),
                    ("wire_s", times["wire"]),
                    ("local_s", times["local"]),
                ):
                    out[g][k].append(v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gbps", type=float, default=0.0, help="link rate in the lab (0: loopback)")
    ap.add_argument("--scheme", default="zen")
    ap.add_argument("--ratio", type=float, default=0.02)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=4)
    a = ap.parse_args()
    args = (a.scheme, a.ratio, a.rounds)
    if a.gbps:
        from zen_analysis.ranks.netlab import NetLab

        with NetLab(a.ranks, a.gbps) as lab:
            results = fork_launch(_rank, a.ranks, *args, lab=lab, timeout_s=600)
    else:
        results = fork_launch(_rank, a.ranks, *args, timeout_s=600)
    where = f"{a.gbps:g} Gbit/s" if a.gbps else "loopback"
    print(f"{a.ranks} ranks, {where}, top-{a.ratio:g} + {a.scheme}; seconds, median over rounds of the slowest rank:")
    total = {}
    for g in GROUPS:
        row = {}
        for k in ("select_s", "sum_s", "wire_s", "local_s"):
            per_round = [max(r[g][k][i] for r in results) for i in range(a.rounds)]
            row[k] = statistics.median(per_round)
            total[k] = total.get(k, 0.0) + row[k]
        print(f"  {g:16s} " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()))
    print("  all groups       " + "  ".join(f"{k} {v:.3f}" for k, v in total.items()))


if __name__ == "__main__":
    main()
