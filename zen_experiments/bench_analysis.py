"""Benchmarks of the analysis side (``zen-analysis bench capture | characterize | evaluate | paper | paper-figures``;
registered in :mod:`zen_experiments.benchmarks`): the cost of capture, characterization and scheme modelling
at the sizes their issues set, the Zen paper's Fig. 11-14 modelled from captured traces, and its Fig. 11-15 and 17b
modelled from workloads with its stated statistics.

``characterize``: time and peak memory of ``zen-analysis characterize`` on a synthetic capture of the size the
characterization issue sets: a 16.8M-element embedding gradient (65,536 rows x 256), 128 workers, 20 steps,
each worker touching the rows of 4,096 Zipf(1.1)-distributed token ids (about 1.7% density, skewed towards low ids
like a frequency-ordered vocabulary). The traces are generated first (untimed); the characterization then runs
in a fresh process, whose wall time and peak RSS are reported.

``capture``: the cost of gradient capture relative to training. One run of the default model on 2 ranks
(one per core, so nothing is oversubscribed) with 32 workers, capturing every ``capture.every`` steps. Each
step's wall time and the time spent inside capture code (isolating per-worker gradients, top-k, buffering,
writing Parquet shards) are logged by rank 0; the overhead is rank 0's total capture time over the whole run /
the run's time without it. The median step time of captured vs plain steps is printed beside it as a check.

Shape suffixes: K non-zeros (of a captured record, or a micro-batch's distinct token rows), W columns of a table row
(its width).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import torch

from zen_analysis import paths, recipes
from zen_analysis.atomic import atomic_write_text
from zen_analysis.capture.reader import TraceReader
from zen_analysis.capture.traces import SparseGrad, TraceWriter, collect_shards, write_manifest
from zen_analysis.comm.schemes import SCHEMES
from zen_analysis.config import apply_overrides
from zen_analysis.config.options import CONFIG, ints, names
from zen_analysis.evaluation.calibrate import preset
from zen_analysis.evaluation.evaluate import DEFAULT_TOPOLOGIES, evaluate, evaluate_step
from zen_analysis.paper.figures import (
    MACHINES,
    PAPER_WORKLOADS,
    TESTBEDS,
    paper_figures,
    write_paper_figures,
)
from zen_analysis.paper.scale import paper_crossover, paper_throughput
from zen_analysis.plots.paper import comm_speedup_vs_machines, speedup_beside_paper, throughput_vs_machines
from zen_analysis.runs.launch import launch
from zen_experiments.bench_options import draw_figure, parse_sets
from zen_experiments.run_ids import reproduce_run_id


def bench_capture(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Capture overhead: the default model on 2 ranks x 16 workers, captured every 10 steps, against its plain steps."""

    cfg = recipes.default()
    cfg.name = "bench-capture"
    cfg.run_id = "bench-capture"
    cfg.dist.num_ranks = 2
    cfg.train.workers_per_rank = 16
    cfg.train.num_steps = 50  # captures at 0, 10, ..., 40: the 5th fills a shard, so a write is timed too
    cfg = apply_overrides(cfg, parse_sets("capture", overrides, {}, config=True)[CONFIG])
    result = launch(cfg, echo=False, overwrite=True)
    m = result.metrics().iloc[2:]  # the first steps warm up allocators and caches
    captured, plain = m[m["captured"]], m[~m["captured"]]
    s = result.summary
    overhead = s["capture_s_rank0"] / (s["elapsed_s"] - s["capture_s_rank0"])
    out = {
        "capture_every": cfg.capture.every,
        "workers": cfg.num_workers,
        "steps": len(m),
        "median_step_s_plain": float(plain["step_s"].median()),
        "median_step_s_captured": float(captured["step_s"].median()) if len(captured) else float("nan"),
        "median_capture_s_per_captured_step": float(captured["capture_s"].median()) if len(captured) else float("nan"),
        "capture_overhead": float(overhead),
    }
    print(
        f"capture every {out['capture_every']} steps, {out['workers']} workers, {out['steps']} steps after 2 warm-up:\n"
        f"  median step time: plain {out['median_step_s_plain']:.3f} s, captured {out['median_step_s_captured']:.3f} s "
        f"(capture code {out['median_capture_s_per_captured_step']:.3f} s per captured step)\n"
        f"  capture overhead: {100 * out['capture_overhead']:.2f}% of training time (target <= 10%)"
    )
    return out


def _synthetic_embedding_run(run_id: str, *, num_rows: int, width: int, num_workers: int, num_steps: int) -> None:

    tdir = paths.trace_dir(run_id)
    if (tdir / "manifest.json").exists():
        return
    num_ranks = 4
    per_rank = num_workers // num_ranks
    rng = np.random.default_rng(0)
    cols_W = torch.arange(width)
    for rank in range(num_ranks):
        writer = TraceWriter(tdir, rank=rank, run_id=run_id, world_size=num_ranks, steps_per_shard=5)
        for step in range(num_steps):
            for v in range(per_rank):
                tokens = np.minimum(rng.zipf(1.1, size=4096) - 1, num_rows - 1)
                rows_K = torch.from_numpy(np.unique(tokens))
                idx = (rows_K[:, None] * width + cols_W).reshape(-1)
                writer.add(
                    SparseGrad(
                        step,
                        rank * per_rank + v,
                        rank,
                        "embed.weight",
                        "natural",
                        (num_rows, width),
                        idx,
                        torch.ones(idx.numel()),
                    )
                )
            writer.end_step()
        writer.close()
    tensors = {"embed.weight": {"kind": "natural", "shape": [num_rows, width], "numel": num_rows * width}}
    config = {"model": {"arch": "synthetic"}, "capture": {"topk_ratio": 0.05}}
    shards = collect_shards(tdir, num_ranks)
    write_manifest(
        tdir, {"run_id": run_id, "tensors": tensors, "config": config, "num_workers": num_workers, "shards": shards}
    )


def bench_characterize(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Characterization at scale: time and peak memory on a synthetic 16.8M-element x 128-worker x 20-step capture."""

    parse_sets("characterize", overrides, {})
    run_id = "bench-characterize-16M-128w-20s"
    t0 = time.perf_counter()
    _synthetic_embedding_run(run_id, num_rows=65536, width=256, num_workers=128, num_steps=20)
    gen_s = time.perf_counter() - t0
    code = (
        "from zen_analysis.sparsity.characterize import characterize\n"
        f"characterize({run_id!r}, force=True, progress=False)\n"
    )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

    df = TraceReader(run_id).summary()
    out = {
        "characterize_s": wall,
        "peak_rss_mb": peak_mb,
        "generate_s": gen_s,
        "mean_density": float(df["density"].mean()),
    }
    print(
        f"characterize: 16.8M-element embedding, 128 workers, 20 steps (mean density {100 * out['mean_density']:.2f}%, "
        f"traces generated in {gen_s:.0f} s)\n  wall time {wall:.1f} s (fresh process, imports included), "
        f"peak RSS {peak_mb:.0f} MB"
    )
    return out


def bench_evaluate(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Modelling speed: ``evaluate`` (every scheme, n = 2..128, three topologies) on the 16.8M-element,
    128-worker synthetic capture of ``bench characterize``, 2 steps, in this process; wall time per step
    and for the n = 128 configurations alone."""

    parse_sets("evaluate", overrides, {})
    run_id = "bench-characterize-16M-128w-20s"
    _synthetic_embedding_run(run_id, num_rows=65536, width=256, num_workers=128, num_steps=20)
    t0 = time.perf_counter()
    evaluate(run_id, steps=2, force=True, progress=False)
    per_step = (time.perf_counter() - t0) / 2
    reader = TraceReader(run_id)
    step = reader.steps()[2]
    sets = [r.indices_K.long() for r in sorted(reader.records(step=step, with_values=False), key=lambda r: r.worker)]
    topos = {n: preset(n) for n in DEFAULT_TOPOLOGIES}
    t0 = time.perf_counter()
    evaluate_step("embed.weight", "natural", step, 65536 * 256, sets, topos, list(SCHEMES))
    at128 = time.perf_counter() - t0
    print(
        f"evaluate: 16.8M-element embedding, 128 workers, 7 schemes x 3 topologies\n"
        f"  {per_step:.1f} s per captured step (n = 2, 4, ..., 128; tables included)\n"
        f"  {at128:.1f} s for n = 128 alone (one step; hash tables warm)"
    )
    return {"per_step_s": per_step, "n128_s": at128}


def bench_paper(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The Zen paper's Fig. 11-14 at its scale, modelled (:func:`~zen_analysis.paper.scale.
    paper_throughput`): samples/s per scheme on 16 machines x 8 V100 at 25 Gbit/s from the captured traces of
    ``make reproduce``'s LSTM (word level), DeepFM and OPT top-k runs, at the captured model's size and at the
    paper's, with the paper's speedups beside them, and where Zen leads stock DDP's sparse path (ranks x link rate,
    :func:`~zen_analysis.paper.scale.paper_crossover`). A run not captured is skipped with a line saying
    so. Writes ``data/derived/paper/fig11_14_modelled.csv`` and ``stock_crossover_modelled.csv`` beside it, and
    figure ``paper_fig11_14_captured`` (:func:`~zen_analysis.plots.paper.speedup_beside_paper`).
    ``--set runs=<run id>,... device=a100 machines=8 overlap=0.3``."""

    defaults = {
        "runs": [reproduce_run_id(r) for r in ("lstm-words", "deepfm", "opt")],
        "topology": "paper-tcp25",
        "machines": 16,
        "device": "v100",
        "overlap": 0.5,
        "sizes": ["trace", "paper"],
    }
    opts = parse_sets("paper", overrides, defaults, {"runs": names, "sizes": names})
    frames, crossovers = [], []
    for run in opts["runs"]:
        if not (paths.trace_dir(run) / "manifest.json").exists():
            print(f"{run}: skipped, not captured (`zen-analysis reproduce --only train` captures it)")
            continue
        try:
            c = paper_crossover(run, topology=opts["topology"])
            crossovers.append(c["by_ranks"].assign(run=run))
        except ValueError:  # no natural table (an LLM's top-k run): stock DDP has no path to price
            pass
        for size in opts["sizes"]:
            try:
                df = paper_throughput(
                    run,
                    topology=opts["topology"],
                    machines=opts["machines"],
                    device=opts["device"],
                    overlap=opts["overlap"],
                    size=size,
                )
            except ValueError as exc:  # a run this model cannot read (too few workers, no table): said, not fatal
                print(f"{run}: skipped, {exc}")
                break
            frames.append(df.assign(run=run, size=size, device=df.attrs["device"], overlap=opts["overlap"]))
    if not frames:
        print("no captured run to model: nothing written")
        return {"table": pd.DataFrame()}
    table = pd.concat(frames, ignore_index=True)
    out = paths.derived_dir() / "paper" / "fig11_14_modelled.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, table.to_csv(index=False))
    draw_figure(speedup_beside_paper(table), "paper_fig11_14_captured")
    cols = ["run", "size", "scheme", "compute_s", "dense_comm_s", "hidden_s", "sparse_comm_s", "step_s"]
    cols += ["samples_per_s", "speedup", "paper", "reason"]
    with pd.option_context("display.width", 250, "display.max_colwidth", 200, "display.float_format", "{:.4g}".format):
        print(
            f"modelled at {opts['machines']} machines of {opts['topology']}, {frames[0].attrs['device']}, "
            f"dense buckets hidden behind at most {opts['overlap']:g} x backward, the embedding's sum after it:"
        )
        print(table[cols].to_string(index=False))
    if crossovers:
        xo = pd.concat(crossovers, ignore_index=True)
        atomic_write_text(out.with_name("stock_crossover_modelled.csv"), xo.to_csv(index=False))
        print(
            f"where Zen's row sum leads stock DDP's sparse all-gather ({opts['topology']}, links between nodes at "
            "1-100 Gbit/s, the paper's rows per GPU): 'below' / 'above' the crossover rate, 'always', 'never'"
        )
        print(xo[["run", "n", "zen_leads", "crossover_gbps"]].to_string(index=False))
    print(f"written to {out} and {out.with_name('stock_crossover_modelled.csv')}")
    return {"table": table, "path": out, "crossover": crossovers}


def bench_paper_figures(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The Zen paper's Fig. 11-15 and 17b at its scale, modelled from workloads with its stated statistics
    (:func:`~zen_analysis.paper.figures.paper_figures`): every scheme on 2-16 machines of 8 V100 at
    25 Gbit/s TCP and 100 Gbit/s EFA, each paper number beside the model's. Writes
    ``data/derived/paper/fig11_15.csv`` and ``fig11_15_paper.csv`` (:func:`~zen_analysis.paper.figures.
    write_paper_figures`) and figures ``paper_fig11_14`` and ``paper_fig15``. ``--set workloads=lstm,opt
    testbeds=paper-tcp25 machines=4,16 device=h100 overlap=0.3 seed=1``."""

    defaults = {
        "workloads": list(PAPER_WORKLOADS),
        "testbeds": list(TESTBEDS),
        "machines": list(MACHINES),
        "device": "v100",
        "overlap": 0.5,
        "seed": 0,
    }
    types = {"workloads": names, "testbeds": names, "machines": ints}
    opts = parse_sets("paper-figures", overrides, defaults, types)
    table = paper_figures(
        opts["workloads"],
        opts["testbeds"],
        opts["machines"],
        device=opts["device"],
        overlap=opts["overlap"],
        seed=opts["seed"],
    )
    csv, paper_csv = write_paper_figures(table)
    draw_figure(throughput_vs_machines(table), "paper_fig11_14")
    draw_figure(comm_speedup_vs_machines(table), "paper_fig15")
    at = table[table["machines"] == max(opts["machines"])]
    shown = at.pivot_table(index=["testbed", "workload"], columns="scheme", values="speedup", sort=False)
    comm = at.pivot_table(index=["testbed", "workload"], columns="scheme", values="comm_speedup", sort=False)
    comp = table.attrs["paper"][["figure", "workload", "testbed", "ratio", "paper", "model", "read_at", "cause"]]
    with pd.option_context("display.width", 250, "display.max_colwidth", 300, "display.float_format", "{:.3g}".format):
        print(f"throughput over AllReduce at {max(opts['machines'])} machines ({table['compute_source'].iloc[0]}):")
        print(shown.to_string())
        print("communication time speedup over AllReduce (Fig. 15):")
        print(comm.to_string())
        print("the paper's numbers beside the model's:")
        print(comp.to_string(index=False))
    print(f"written to {csv} and {paper_csv}")
    return {"speedup": shown.reset_index(), "comm_speedup": comm.reset_index(), "paper": comp, "path": csv}
