"""The benchmark registry, as data: every ``zen-analysis bench <name>`` by its name, the function that runs it (as
``"module:function"``), its help line and whether it needs the network lab.

The CLI lists, checks and documents the names from here without importing a benchmark (each one imports torch
and its drivers at the top of its module); :func:`run` imports the one it runs. ``make bench`` runs
:func:`default_benchmarks`.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from zen_experiments import results_pages


class Benchmark(NamedTuple):
    target: str
    """``"module:function"`` under :mod:`zen_experiments`; the function takes the ``--set key=value``
    options."""
    about: str
    """One line for ``zen-analysis bench --help``."""
    needs_lab: bool = False
    """Runs behind the network lab's shaped links (root; tens of minutes): not in ``make bench``."""
    headline: str | None = None
    """``"module:function"`` taking what the benchmark returned to the values its page quotes as a range over runs
    (a speedup, a lead), or ``None``."""
    columns: tuple[str, ...] = ()
    """The columns its page shows its wide tables by, in order: those saying which row is which, then the ratio and
    the paper's number beside it. A table holding none of them (or with ``()``) is shown by the default: its short
    identifying columns, then those named like a ratio (:func:`~zen_experiments.page_tables.headline`)."""


BENCHMARKS = {
    "capture": Benchmark("bench_analysis:bench_capture", "capture overhead on the default model"),
    "characterize": Benchmark(
        "bench_analysis:bench_characterize", "characterization of 16M elements x 128 workers x 20 steps"
    ),
    "comm": Benchmark(
        "bench_schemes:bench_comm", "every scheme measured vs modelled on the default run's embedding at 4 ranks"
    ),
    "evaluate": Benchmark("bench_analysis:bench_evaluate", "modelling speed at 16M elements x 128 workers"),
    "hashing": Benchmark("bench_schemes:bench_hashing", "Algorithm 1 vs argsort on 10M indices"),
    "stragglers": Benchmark("bench_local_sgd:bench_stragglers", "EDiT vs A-EDiT with a 2x straggler"),
    "pseudo_density": Benchmark(
        "bench_local_sgd:bench_pseudo_density", "how sparse pseudo-gradients are by themselves (EDiT)"
    ),
    "pseudo_claims": Benchmark(
        "bench_local_sgd:bench_pseudo_claims", "C1-C3 of top-k pseudo-gradients beside the gradients' (EDiT)"
    ),
    "zen": Benchmark(
        "bench_schemes:bench_zen",
        "zen_sum vs dense all-reduce and sparse schemes up to 128M elements",
        columns=("numel", "density", "what", "seconds", "zen", "allreduce", "zen/floor"),
    ),
    "netlab": Benchmark(
        "bench_lab:bench_netlab",
        "schemes, hierarchical Zen and training on the emulated network",
        True,
        "headlines:netlab",
        columns=(
            *("kind", "ranks", "bandwidth_gbps", "scheme", "method", "variant", "speedup_measured", "vs_best"),
            *("speedup", "measured_s_median", "tokens_per_s", "lossless", "equal"),
        ),
    ),
    "ddp": Benchmark(
        "bench_ddp:bench_ddp",
        "the example DDP script, stock vs Zen, on loopback and shaped links",
        True,
        "headlines:ddp",
    ),
    "train": Benchmark(
        "bench_train:bench_train",
        "training throughput of the paper's workloads across schemes and ranks",
        True,
        "headlines:train",
        columns=(
            *("workload", "ranks", "bandwidth_gbps", "variant", "tokens_per_s", "speedup"),
            *("time_to_loss_vs_dense", "hidden_fraction", "step_vs_inline"),
        ),
    ),
    "exchange": Benchmark(
        "bench_ddp:bench_exchange",
        "a captured run's embedding rows summed by stock DDP's sparse path, Zen and contiguous row owners, in the lab",
        True,
        "headlines:exchange",
        columns=(
            *("ranks", "scheme", "label", "measured_s", "lead_vs_stock"),
            *("push_rows_max", "owned_rows_max", "rows_moved_max"),
        ),
    ),
    "fsdp": Benchmark(
        "bench_fsdp:bench_fsdp",
        "stock FSDP2 vs Zen-FSDP2 on a 256k-vocabulary Llama, in the lab",
        True,
        "headlines:fsdp",
    ),
    "fsdp-balance": Benchmark(
        "bench_fsdp:bench_fsdp_balance", "FSDP2 shards' received rows: contiguous vs h0 vs stratified h0 row order"
    ),
    "lab-check": Benchmark(
        "bench_lab:bench_lab_check",
        "the paper-scale model against the lab, ranks sleeping their GPU compute, dilated as the links are",
        True,
        "headlines:lab_check",
        columns=("ranks", "scheme", "measured_s", "modelled_s", "ratio", "measured_rank", "modelled_rank", "equal"),
    ),
    "paper": Benchmark(
        "bench_analysis:bench_paper",
        "Fig. 11-14 modelled at 16 x 8 V100, 25 Gbit/s, from the captured traces",
        columns=("workload", "size", "scheme", "step_s", "speedup", "paper"),
    ),
    "paper-figures": Benchmark(
        "bench_analysis:bench_paper_figures",
        "Fig. 11-15 and 17b modelled on 2-16 machines at 25 and 100 Gbit/s, from workloads with the paper's statistics",
        columns=(
            "figure",
            "testbed",
            "workload",
            "ratio",
            "paper",
            "model",
            "zen",
            "sparcml",
            "omnireduce",
            "agsparse",
        ),
    ),
}
"""Every benchmark by its name on the command line: the one list of them; the CLI's choices and help and ``make
bench`` (:func:`default_benchmarks`) come from here."""


def default_benchmarks() -> list[str]:
    """What ``zen-analysis bench`` without a name runs (``make bench``): every benchmark that needs no lab."""
    return [name for name, b in BENCHMARKS.items() if not b.needs_lab]


def _function(target: str):
    module, function = target.split(":")
    return getattr(importlib.import_module(f"zen_experiments.{module}"), function)


def resolve(name: str):
    """The function behind a benchmark's name (imports its module)."""
    return _function(BENCHMARKS[name].target)


def run(name: str, overrides: Sequence[str] = ()) -> object:
    """Run one benchmark with its ``--set key=value`` options; from the checkout's own data root, its results page
    is written too (:func:`~zen_experiments.results_pages.write_bench_page`)."""
    bench = BENCHMARKS[name]
    before, start = results_pages.snapshot(), time.perf_counter()
    result = resolve(name)(list(overrides))
    seconds = time.perf_counter() - start
    if results_pages.writes_pages():
        headline = _function(bench.headline)(result) if bench.headline else None
        drawn = results_pages.figures_since(before)
        page = results_pages.write_bench_page(
            name,
            bench.about,
            overrides,
            result,
            seconds=seconds,
            headline=headline,
            figures=drawn,
            columns=bench.columns,
        )
        results_pages.write_bench_index({n: (b.about, b.needs_lab) for n, b in BENCHMARKS.items()})
        print(f"results page: {page}")
    return result


def write_pages(out: Path | None = None) -> list[Path]:
    """Render every benchmark's page again from its stored runs (``<name>.runs.json`` under ``out``, the checkout's
    ``docs/results/bench/``), and the index, without running anything: after a change to how pages are drawn or to
    a benchmark's :attr:`Benchmark.columns`. Returns the pages."""
    pages = [results_pages.rewrite_bench_page(n, b.about, b.columns, out) for n, b in BENCHMARKS.items()]
    index = {n: (b.about, b.needs_lab) for n, b in BENCHMARKS.items()}
    return [*pages, results_pages.write_bench_index(index, out)]
