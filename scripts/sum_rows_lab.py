"""Per-call cost against bytes: the sparse schemes' row sum (``CommScheme.sum_rows``) of an embedding gradient, each
rank behind a shaped link of the network lab (root).

    .venv/bin/python scripts/sum_rows_lab.py --ranks 8 --tokens 512            # one lstm-words micro-batch a rank
    .venv/bin/python scripts/sum_rows_lab.py --ranks 16 --tokens 4096          # the recipe's 8 micro-batches
    .venv/bin/python scripts/sum_rows_lab.py --ranks 16 --trace reproduce-lstm-words   # captured rows, replayed

Each rank draws ``--tokens`` ids from a Zipf law (exponent ``--zipf``) over ``--rows`` rows (default the lstm-words
vocabulary, 69,071 words; ids by frequency, as its vocabulary is ordered), keeps the distinct ones as its rows, gives
each ``--dim`` random values, and every scheme in ``--schemes`` sums them ``--repeats`` times (a barrier before
each). Printed per scheme, rank 0's: the median seconds of the repeats after the first two, the bytes the scheme
sent in its last run, the rows the rank held, and the scheme's phases' seconds. It is what the ``bench train``
discussion quotes (docs/guide/network.md, "Measuring on an emulated network"): where a step touches a few hundred
rows per rank, the number of collective calls decides, not the bytes.

With ``--trace RUN`` the rows and values are a captured run's instead (its natural tensor, ``--tensor`` to choose),
lab rank r holding one real rank-step (``zen_experiments.exchange_replay.rank_step_rows``);
``zen-analysis bench exchange`` is that replay as a benchmark, at several rank counts and rates, beside the model.
"""

from __future__ import annotations

import argparse


def _ranks(
    rank: int,
    world: int,
    schemes: list[str],
    rows: int,
    dim: int,
    tokens: int,
    zipf: float,
    repeats: int,
    trace: tuple | None = None,
) -> dict:
    import numpy as np
    import torch

    if trace is not None:
        from zen_experiments.exchange_replay import rank_step_rows

        run, tensor, per_rank = trace
        rows_K, values_KD, rows, dim = rank_step_rows(run, world, rank, tensor=tensor, workers_per_rank=per_rank)
    else:
        p = 1.0 / np.arange(1, rows + 1) ** zipf
        rows_K = torch.unique(torch.from_numpy(np.random.default_rng(rank).choice(rows, size=tokens, p=p / p.sum())))
        values_KD = torch.randn(rows_K.numel(), dim, generator=torch.Generator().manual_seed(rank))
    from zen_experiments.exchange_replay import sum_every_way

    out = sum_every_way(rows_K, values_KD, rows, dim, schemes, repeats)
    for r in out.values():
        r["rows"] = rows_K.numel()
        r["phases_s"] = {k: round(v, 4) for k, v in r["phases_s"].items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=512, help="ids each rank looks up (distinct ones are its rows)")
    ap.add_argument("--rows", type=int, default=69_071)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--schemes", default="stock,zen,agsparse,sparcml", help="stock: all_reduce of a sparse tensor")
    ap.add_argument("--bandwidth-gbps", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--trace", help="replay this captured run's rows and values instead of Zipf draws")
    ap.add_argument("--tensor", help="--trace: the captured tensor (default: the run's natural one)")
    ap.add_argument(
        "--workers-per-rank", type=int, help="--trace: micro-batches summed per lab rank (default: the run's)"
    )
    args = ap.parse_args()
    from zen_analysis.ranks.netlab import NetLab
    from zen_analysis.ranks.procs import fork_launch

    with NetLab(ranks=args.ranks, bandwidth_gbps=args.bandwidth_gbps) as lab:
        res = fork_launch(
            _ranks,
            args.ranks,
            args.schemes.split(","),
            args.rows,
            args.dim,
            args.tokens,
            args.zipf,
            args.repeats,
            (args.trace, args.tensor, args.workers_per_rank) if args.trace else None,
            lab=lab,
        )
    what = f"{args.trace}'s captured rows" if args.trace else f"{args.tokens} tokens"
    print(f"{args.ranks} ranks x {what} behind {args.bandwidth_gbps:g} Gbit/s, rank 0:")
    for name, r in res[0].items():
        print(
            f"  {name:10s} {1e3 * r['median_s']:8.1f} ms  {r['bytes_sent']:>11,} bytes  {r['rows']} rows  "
            f"max |diff| vs stock {r['max_diff_vs_stock']:.2g}  {r['phases_s']}"
        )


if __name__ == "__main__":
    main()
