"""Process RSS against what Zen's static hash-set cache counts (``zen_analysis.zen.bitmap``: ``_CACHE``,
``set_cache_limit``, ``StaticSets.nbytes``).

    .venv/bin/python scripts/zen_cache_rss.py sizes                    # 200 distinct sizes, 1M..3M elements, n=4
    .venv/bin/python scripts/zen_cache_rss.py workload                 # lstm-words' Zen tensor, the default limit
    .venv/bin/python scripts/zen_cache_rss.py workload --limit-mb 0    # the same, uncached: rebuilt every step
    .venv/bin/python scripts/zen_cache_rss.py compare                  # every scenario, each in a fresh process

``sizes`` builds ``static_sets(numel, n, 0)`` and its position table (``.rank_of``, what ``zen_sum``'s push reads)
for ``--count`` distinct numels spread evenly over [``--lo``, ``--hi``], under the cache limit ``--limit-mb``
(default: bitmap's own default). ``workload`` syncs the tensor sizes a training run passes through Zen
(``--numels``; default the lstm-words recipe's input embedding, 69,071 words x 256, the largest tensor ``make
reproduce``'s recipes give Zen) for ``--steps`` steps; ``--limit-mb 0`` also drops the set after each step, so
every step rebuilds it (uncached). Each prints one line of ``key=value``: the cache's counted MB, the MB its
entries really hold (every tensor of every cached ``StaticSets``, and h0 tables kept by ``zen.hashing``), the
process RSS (``VmRSS`` of /proc/self/status) and its peak (``VmHWM``), before (``base``) and after the loop.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

LSTM_WORDS_EMBEDDING = 69_071 * 256
"""The lstm-words recipe's input embedding (69,071 words x hidden 256 on the Python 3.11 stdlib): what
``sync.method=natural`` sends through Zen (``sync.method=topk`` sends the whole model, 20,016,444 elements, as one
bucket)."""


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _held_mb(bitmap, hashing, tables: dict) -> float:
    """Bytes really held: the storages of every tensor a cached StaticSets keeps, and the h0 tables."""
    import torch

    seen, total = set(), 0

    def add(t):
        nonlocal total
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            if st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                total += st.nbytes()

    for sets in list(bitmap._CACHE.values()):
        for value in vars(sets).values():
            add(value)
            if isinstance(value, dict):
                for v in value.values():
                    add(v)
    if hasattr(hashing, "h0_table_nbytes"):
        total += hashing.h0_table_nbytes()
    else:  # an lru_cache(maxsize=2) of int32 tables: the last two (numel, seed) built through it
        total += sum(4 * numel for numel, _ in list(tables)[-2:])
    return total / 2**20


def _counted_mb(bitmap) -> float:
    if hasattr(bitmap, "cache_nbytes"):
        return bitmap.cache_nbytes() / 2**20
    return sum(v.nbytes for v in bitmap._CACHE.values()) / 2**20


def run(args) -> None:
    import torch

    from zen_analysis.zen import bitmap, hashing

    torch.set_num_threads(1)
    tables: dict = {}  # (numel, seed) in the order h0 tables were asked for (older code: to count them)
    if not hasattr(hashing, "h0_table_nbytes"):
        inner = hashing.h0_table

        def traced(numel, seed=0):
            tables.pop((numel, seed), None)
            tables[(numel, seed)] = True
            return inner(numel, seed)

        bitmap.h0_table = traced
    if args.limit_mb is not None:
        bitmap.set_cache_limit(int(args.limit_mb * 2**20))
    limit_mb = bitmap._CACHE_LIMIT[0] / 2**20
    _ = bitmap.static_sets(1000, args.n, 0).rank_of  # warm up the imports and the kernel build
    bitmap._CACHE.clear()
    base = _status_mb("VmRSS")
    t0 = time.perf_counter()
    if args.what == "sizes":
        step = (args.hi - args.lo) // max(1, args.count - 1)
        for i in range(args.count):
            _ = bitmap.static_sets(args.lo + i * step, args.n, 0).rank_of
        label = f"sizes count={args.count} lo={args.lo} hi={args.hi}"
    else:
        numels = [int(v) for v in args.numels.split(",")]
        peak_during = 0.0
        for _ in range(args.steps):
            for numel in numels:
                _ = bitmap.static_sets(numel, args.n, 0).rank_of
                if args.limit_mb == 0:
                    bitmap._CACHE.clear()  # uncached: the next step rebuilds it
            peak_during = max(peak_during, _status_mb("VmRSS"))
        label = f"workload numels={args.numels} steps={args.steps}"
    wall = time.perf_counter() - t0
    print(
        f"{label} n={args.n} limit_mb={limit_mb:g} counted_mb={_counted_mb(bitmap):.1f} "
        f"held_mb={_held_mb(bitmap, hashing, tables):.1f} base_rss_mb={base:.1f} rss_mb={_status_mb('VmRSS'):.1f} "
        f"peak_rss_mb={_status_mb('VmHWM'):.1f} entries={len(bitmap._CACHE)} wall_s={wall:.1f}",
        flush=True,
    )


def compare(args) -> None:
    """Each scenario in a fresh interpreter (RSS is per process, and glibc keeps what one run freed)."""
    me = [sys.executable, __file__]
    scenarios = [
        ["sizes"],
        ["workload"],
        ["workload", "--limit-mb", "0"],
        ["workload", "--numels", f"{LSTM_WORDS_EMBEDDING},2097152"],  # with the default recipe's embedding too
        ["workload", "--numels", f"{LSTM_WORDS_EMBEDDING},2097152", "--limit-mb", "0"],
    ]
    for extra in scenarios:
        subprocess.run([*me, *extra, "--n", str(args.n)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["sizes", "workload", "compare"])
    parser.add_argument("--n", type=int, default=4, help="partitions (ranks)")
    parser.add_argument("--limit-mb", type=float, default=None, help="cache limit (default: bitmap's default)")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--lo", type=int, default=1_000_000)
    parser.add_argument("--hi", type=int, default=3_000_000)
    parser.add_argument("--numels", default=str(LSTM_WORDS_EMBEDDING))
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    (compare if args.what == "compare" else run)(args)


if __name__ == "__main__":
    main()
