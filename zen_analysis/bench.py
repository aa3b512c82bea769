"""Benchmarks (``zen-analysis bench ...`` / ``make bench``): ratios measured side by side in one run, medians.

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
"""

from __future__ import annotations

from zen_analysis import recipes
from zen_analysis.config import apply_overrides


def bench_capture(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    from zen_analysis.dist.launch import launch

    cfg = recipes.default()
    cfg.name = "bench-capture"
    cfg.run_id = "bench-capture"
    cfg.dist.num_ranks = 2
    cfg.train.workers_per_rank = 16
    cfg.train.num_steps = 50  # captures at 0, 10, ..., 40: the 5th fills a shard, so a write is timed too
    cfg = apply_overrides(cfg, overrides)
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
    import numpy as np
    import torch

    from zen_analysis import paths
    from zen_analysis.capture.traces import SparseGrad, TraceWriter, write_manifest

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
                writer.add(SparseGrad(step, rank * per_rank + v, rank, "embed.weight", "natural", (num_rows, width), idx, torch.ones(idx.numel())))
            writer.end_step()
        writer.close()
    tensors = {"embed.weight": {"kind": "natural", "shape": [num_rows, width], "numel": num_rows * width}}
    config = {"model": {"arch": "synthetic"}, "capture": {"topk_ratio": 0.05}}
    write_manifest(tdir, {"run_id": run_id, "tensors": tensors, "config": config, "num_workers": num_workers})


def bench_characterize(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    import resource
    import subprocess
    import sys
    import time

    if overrides:
        raise ValueError("bench characterize takes no --set overrides")
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
    from zen_analysis.capture.traces import TraceReader

    df = TraceReader(run_id).summary()
    out = {"characterize_s": wall, "peak_rss_mb": peak_mb, "generate_s": gen_s, "mean_density": float(df["density"].mean())}
    print(
        f"characterize: 16.8M-element embedding, 128 workers, 20 steps (mean density {100 * out['mean_density']:.2f}%, "
        f"traces generated in {gen_s:.0f} s)\n  wall time {wall:.1f} s (fresh process, imports included), "
        f"peak RSS {peak_mb:.0f} MB"
    )
    return out


BENCHMARKS = {"capture": bench_capture, "characterize": bench_characterize}


def bench_comm(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Every scheme on 4 real gloo ranks replaying the default run's captured embedding gradients, against
    its alpha-beta model on this machine calibrated at 4 ranks (``zen-analysis bench-comm`` with the
    reproduce run; trains it first if ``make reproduce`` has not)."""
    from zen_analysis.comm import measure
    from zen_analysis.dist.launch import ensure_run
    from zen_analysis.reproduce import reproduce_run_id

    opts = {"ranks": 4, "steps": 3, "repeats": 25}
    for item in overrides:
        key, _, value = item.partition("=")
        if key not in opts:
            raise ValueError(f"bench comm takes --set {', '.join(opts)}=...; got {item!r}")
        opts[key] = int(value)
    cfg = recipes.default()
    cfg.run_id = reproduce_run_id("default")
    run = ensure_run(cfg)
    df = measure.replay_run(run, ranks=opts["ranks"], steps=opts["steps"], repeats=opts["repeats"], recalibrate=True)
    summary = measure.summarize(df)
    print(f"{run} embedding ({df['numel'].iloc[0]:,} elements), {opts['ranks']} gloo ranks, {opts['steps']} steps, "
          f"{opts['repeats']} repeats")  # fmt: skip
    print(measure.report(summary))
    return {"phases": df, "summary": summary}


def bench_evaluate(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Modelling speed: ``evaluate`` (every scheme, n = 2..128, three topologies) on the 16.8M-element,
    128-worker synthetic capture of ``bench characterize``, 2 steps, in this process; wall time per step
    and for the n = 128 configurations alone."""
    import time

    from zen_analysis.capture.traces import TraceReader
    from zen_analysis.comm.evaluate import DEFAULT_TOPOLOGIES, _rows, evaluate
    from zen_analysis.comm.schemes import SCHEMES
    from zen_analysis.comm.topology import preset

    if overrides:
        raise ValueError("bench evaluate takes no --set overrides")
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
    _rows("embed.weight", "natural", step, 65536 * 256, sets, topos, list(SCHEMES))
    at128 = time.perf_counter() - t0
    print(f"evaluate: 16.8M-element embedding, 128 workers, 7 schemes x 3 topologies\n"
          f"  {per_step:.1f} s per captured step (n = 2, 4, ..., 128; tables included)\n"
          f"  {at128:.1f} s for n = 128 alone (one step; hash tables warm)")  # fmt: skip
    return {"per_step_s": per_step, "n128_s": at128}


BENCHMARKS["comm"] = bench_comm
BENCHMARKS["evaluate"] = bench_evaluate


def bench_hashing(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Algorithm 1 at the paper's Fig. 16 size on this CPU: ``hierarchical_hash`` of 10M distinct indices of a
    214M-element tensor (about 5% density) into 16 partitions — the compiled kernel (``backend="native"``, one
    thread per torch thread) and the torch rounds — against the argsort reference and a memory-copy floor
    (cloning the 10M int64 indices once); medians of 5 after a warm-up, in this process."""
    import time

    import torch

    from zen_analysis.zen import native
    from zen_analysis.zen.hierarchical import bucket_reference, hierarchical_hash

    opts = {"numel": 214_000_000, "nnz": 10_000_000, "partitions": 16, "repeats": 5}
    for item in overrides:
        key, _, value = item.partition("=")
        if key not in opts:
            raise ValueError(f"bench hashing takes --set {', '.join(opts)}=...; got {item!r}")
        opts[key] = int(value)
    gen = torch.Generator().manual_seed(0)
    idx = torch.unique(torch.randint(0, opts["numel"], (int(opts["nnz"] * 1.03),), generator=gen))
    idx = idx[torch.randperm(idx.numel(), generator=gen)[: opts["nnz"]]]  # distinct, unsorted (as nonzero() of a bucket)

    def median(fn) -> float:
        fn()
        times = []
        for _ in range(opts["repeats"]):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2]

    n = opts["partitions"]
    out = {"native_s": float("nan"), "threads": torch.get_num_threads()}
    if native.available():
        out["native_s"] = median(lambda: hierarchical_hash(idx, n, seed=1, backend="native"))
    else:
        print(f"native kernel unavailable ({native.unavailable_reason()}): timing the torch rounds only")
    out["torch_rounds_s"] = median(lambda: hierarchical_hash(idx, n, seed=1, backend="torch"))
    out["argsort_s"] = median(lambda: bucket_reference(idx, n, seed=1))
    out["memcpy_s"] = median(lambda: idx.clone())
    b = hierarchical_hash(idx, n, seed=1)
    out["serial_fraction"] = b.serial_count / idx.numel()
    best = out["native_s"] if native.available() else out["torch_rounds_s"]
    print(
        f"hashing {idx.numel():,} indices of a {opts['numel']:,}-element tensor into {n} partitions "
        f"({out['threads']} torch threads; Algorithm 1 with r1 = 2x, k = 3, {100 * out['serial_fraction']:.1f}% to serial regions):\n"
        f"  hierarchical_hash, native kernel: {out['native_s']:.3f} s   torch rounds: {out['torch_rounds_s']:.3f} s\n"
        f"  argsort reference: {out['argsort_s']:.3f} s   memory-copy floor: {out['memcpy_s']:.4f} s\n"
        f"  Algorithm 1 / argsort = {best / out['argsort_s']:.2f} (target <= 1), / memcpy = {best / out['memcpy_s']:.0f}"
    )
    return out


BENCHMARKS["hashing"] = bench_hashing


def bench_stragglers(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """EDiT vs A-EDiT with one consistent 2x straggler, on 2 ranks (one per core here) and on 4 (two per core):
    the default Llama, one worker per rank, 60 steps per rank (the same total step budget), sync every 8 steps
    (EDiT) or every 8 steps' worth of time (A-EDiT, measured without the straggler); tokens/s of the whole run
    and of the local phase after the synchronous warm-up. ``--set ranks=4`` runs one world size."""
    import pandas as pd

    from zen_analysis.config import apply_overrides
    from zen_analysis.local_sgd.experiments import straggler_table

    worlds = [2, 4]
    rest = []
    for item in overrides:
        key, _, value = item.partition("=")
        if key == "ranks":
            worlds = [int(v) for v in value.split(",")]
        else:
            rest.append(item)
    tables, ratios = [], {}
    for world in worlds:
        base = recipes.default()
        base.name = "bench-stragglers"
        base.train.workers_per_rank = 1
        base.dist.num_ranks = world
        base = apply_overrides(base, rest)
        table = straggler_table(base)
        tables.append(table)
        pick = {m: table.query(f"method == '{m}' and straggler != 'none'").iloc[0] for m in ("edit", "a_edit")}
        ratios[world] = {
            "whole_run": pick["a_edit"]["tokens_per_s"] / pick["edit"]["tokens_per_s"],
            "local_phase": pick["a_edit"]["local_tokens_per_s"] / pick["edit"]["local_tokens_per_s"],
            "ideal": table.attrs["ideal"],
            "sync_time_s": table.attrs["sync_time_s"],
        }
    out = pd.concat(tables, ignore_index=True)
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(out.round(3).to_string(index=False))
    for world, r in ratios.items():
        print(f"{world} ranks: A-EDiT / EDiT tokens/s with the straggler = {r['whole_run']:.2f} (whole run), "
              f"{r['local_phase']:.2f} (local phase); independent devices would give {r['ideal']:.2f}; "
              f"A-EDiT sync time {r['sync_time_s']:.2f} s")  # fmt: skip
    return {"table": out, "ratios": ratios}


BENCHMARKS["stragglers"] = bench_stragglers


def bench_zen(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """``zen_sum`` vs dense all-reduce, AGsparse and BP-COO on 2 gloo ranks (one per core), at 4M / 32M / 128M
    elements and 0.5% / 1% / 5% density with 30% overlap, beside the local-work floor and Zen's local steps
    (:mod:`zen_analysis.zen.speed`), medians of 9. ``--set sizes=4000000,32000000 densities=0.01 repeats=5``."""
    import pandas as pd

    from zen_analysis.zen.speed import DENSITIES, SIZES, model_check, speed_table, summary

    opts: dict = {"sizes": list(SIZES), "densities": list(DENSITIES), "repeats": 9, "ranks": 2}
    for item in overrides:
        key, _, value = item.partition("=")
        if key in ("sizes", "densities"):
            opts[key] = [(int if key == "sizes" else float)(v) for v in value.split(",")]
        elif key in ("repeats", "ranks"):
            opts[key] = int(value)
        else:
            raise ValueError(f"bench zen takes --set sizes=..., densities=..., repeats=N, ranks=N; got {item!r}")
    table = speed_table(**opts)
    wrong = table[(table.get("exact") == False)]  # noqa: E712 - NaN for the local rows
    if len(wrong):
        raise RuntimeError(f"a scheme's sum differs from all_reduce:\n{wrong}")
    summ = summary(table)
    steps = table[table["what"].str.startswith("zen:")].pivot_table(index=["numel", "density"], columns="what", values="seconds")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.float_format", "{:.4f}".format):
        print(f"{opts['ranks']} gloo ranks, medians of {opts['repeats']} of the slowest rank's seconds (every result equal to all_reduce):")
        print(summ.to_string())
        print("Zen's local steps (seconds, slowest rank):")
        print(steps.to_string())
        calls = table[table["what"] == "zen"]["calls"].max()
        print(f"zen_sum collective calls per sync: {int(calls)}")
        check = model_check(table)
        print(f"time model (wire + local work, this machine calibrated at {opts['ranks']} ranks on <= 4M elements) / measured:")
        print(check.to_string(float_format="{:.2f}".format))
    return {"table": table, "summary": summ, "model": check}


BENCHMARKS["zen"] = bench_zen


def bench_netlab(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Measured on the emulated network (root; :mod:`zen_analysis.dist.experiments`), on the default run (trained
    first if ``make reproduce`` has not): ``schemes``, every scheme replaying its natural and top-k tensors at
    ``ranks`` x ``bandwidths`` (figure ``netlab_speedup``); ``nodes``, flat vs hierarchical Zen vs all-reduce on
    2 nodes x 2 ranks at ``node_bandwidths``; ``train``, the default recipe trained for ``train_steps`` steps per variant at
    ``train_bandwidths`` (figure ``netlab_training``). ``--set parts=schemes,nodes,train ranks=4,8
    bandwidths=0.5,1,2.5,10 train_bandwidths=1 train_steps=12 repeats=10``. Tables in ``data/derived/netlab/``."""
    import pandas as pd
    from matplotlib import pyplot as plt

    from zen_analysis import paths
    from zen_analysis.atomic import atomic_write_text
    from zen_analysis.derived import read_table, write_table
    from zen_analysis.dist import netlab
    from zen_analysis.dist.experiments import node_comparison, scheme_sweep, training_sweep
    from zen_analysis.dist.launch import ensure_run
    from zen_analysis.plots import comm as comm_figs, style
    from zen_analysis.reproduce import reproduce_run_id

    ok, why = netlab.available()
    if not ok:
        raise RuntimeError(f"bench netlab needs the network lab, which is unavailable here: {why}")
    opts: dict = {"parts": ["schemes", "nodes", "train"], "ranks": [4, 8], "bandwidths": [0.5, 1.0, 2.5, 10.0],
                  "node_bandwidths": [1.0, 0.25], "train_bandwidths": [1.0], "train_steps": 12, "repeats": 10,
                  "train_workers_per_rank": 8, "edit_bandwidth": 0.5, "edit_steps": 40}  # fmt: skip
    for item in overrides:
        key, _, value = item.partition("=")
        if key not in opts:
            raise ValueError(f"bench netlab takes --set {', '.join(opts)}=...; got {item!r}")
        if key == "parts":
            opts[key] = value.split(",")
        elif key in ("ranks",):
            opts[key] = [int(v) for v in value.split(",")]
        elif key in ("bandwidths", "node_bandwidths", "train_bandwidths"):
            opts[key] = [float(v) for v in value.split(",")]
        elif key == "edit_bandwidth":
            opts[key] = float(value)
        else:
            opts[key] = int(value)
    cfg = recipes.default()
    cfg.run_id = reproduce_run_id("default")
    run = ensure_run(cfg)
    out_dir = paths.derived_dir() / "netlab"
    result: dict = {}
    wide = {"display.width": 250, "display.max_columns": 30}
    if "schemes" in opts["parts"]:
        sweep = scheme_sweep(run, ranks=opts["ranks"], bandwidths=opts["bandwidths"], repeats=opts["repeats"])
        write_table(out_dir / "scheme_sweep.parquet", sweep, {"options": opts})
        cols = ["kind", "ranks", "bandwidth_gbps", "scheme", "bytes_sent_max_rank", "measured_s_median", "modelled_s",
                "speedup_measured", "speedup_modelled", "lossless"]  # fmt: skip
        text = sweep[cols].round(4).to_string(index=False)
        atomic_write_text(out_dir / "scheme_sweep.txt", text + "\n")
        with pd.option_context(*[x for kv in wide.items() for x in kv]):
            print(text)
        fig = comm_figs.measured_speedup_vs_bandwidth(sweep)
        style.savefig(fig, "netlab_speedup")
        plt.close(fig)
        result["schemes"] = sweep
    if "nodes" in opts["parts"]:
        nodes = pd.concat([node_comparison(run, bandwidth_gbps=b, repeats=opts["repeats"]) for b in opts["node_bandwidths"]],
                          ignore_index=True)  # fmt: skip
        text = nodes.round(4).to_string(index=False)
        atomic_write_text(out_dir / "node_comparison.txt", text + "\n")
        print(text)
        if not nodes["equal"].all():
            raise RuntimeError(f"a method's sum differs from all_reduce:\n{text}")
        result["nodes"] = nodes
    if "train" in opts["parts"]:
        base = recipes.default()
        workers = opts["train_workers_per_rank"]
        suffix = "" if workers == base.train.workers_per_rank else f"-w{workers}"
        base.name = f"bench-netlab{suffix}"
        base.train.workers_per_rank = workers
        train = training_sweep(base, bandwidths=opts["train_bandwidths"], steps=opts["train_steps"], progress=True)
        write_table(out_dir / f"training{suffix}.parquet", train, {"options": opts})
        text = train.drop(columns=["losses", "run_id"]).round(3).to_string(index=False)
        atomic_write_text(out_dir / f"training{suffix}.txt", text + "\n")
        print(text)
        fig = comm_figs.training_vs_bandwidth(train)
        style.savefig(fig, f"netlab_training{suffix}")
        plt.close(fig)
        result["train"] = train
    if "figures" in opts["parts"]:  # redraw from the stored tables
        for table, draw, name in (("scheme_sweep", comm_figs.measured_speedup_vs_bandwidth, "netlab_speedup"),
                                  ("training", comm_figs.training_vs_bandwidth, "netlab_training"),
                                  ("training-w1", comm_figs.training_vs_bandwidth, "netlab_training-w1")):  # fmt: skip
            if (out_dir / f"{table}.parquet").exists():
                fig = draw(read_table(out_dir / f"{table}.parquet"))
                style.savefig(fig, name)
                plt.close(fig)
                print(f"{name} redrawn from {table}.parquet")
    if "twins" in opts["parts"]:  # the trainings at 1 Gbit/s again on loopback: the same losses?
        from zen_analysis.dist.experiments import loopback_twins

        suffix = "" if opts["train_workers_per_rank"] == 8 else f"-w{opts['train_workers_per_rank']}"
        trained = read_table(out_dir / f"training{suffix}.parquet")
        twins = loopback_twins(trained.loc[trained["bandwidth_gbps"] == 1.0, "run_id"].tolist())
        text = twins.to_string(index=False)
        atomic_write_text(out_dir / f"loopback_twins{suffix}.txt", text + "\n")
        print(text)
        result["twins"] = twins
    if "edit" in opts["parts"]:
        from zen_analysis.local_sgd.experiments import slow_network_check

        base = recipes.default()
        base.name = "bench-netlab-edit"
        base.train.workers_per_rank = 1
        base.train.num_steps = opts["edit_steps"]
        base.train.eval_every = 0
        check = slow_network_check(base, bandwidth_gbps=opts["edit_bandwidth"], **{"local_sgd.warmup_steps": 4,
                                   "local_sgd.interval": 8, "local_sgd.ewma_warmup": 3})  # fmt: skip
        text = check.round(3).to_string(index=False)
        atomic_write_text(out_dir / "edit_slow_network.txt", text + "\n")
        print(f"EDiT with every rank behind a {opts['edit_bandwidth']:g} Gbit/s link: the perturb.bandwidth_gbps sleep "
              f"emulation vs the lab (loopback, no slow link: {check.attrs['loopback_tokens_per_s']:.0f} tokens/s)")  # fmt: skip
        print(text)
        result["edit"] = check
    return result


BENCHMARKS["netlab"] = bench_netlab


def bench_ddp(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """A user's own DDP training (``scripts/ddp_transformers.py``, the default Llama under torchrun) as stock DDP,
    with Zen's natural hook and with top-k + Zen, inline and overlapped
    (:func:`~zen_analysis.dist.experiments.ddp_script_sweep`): median step time and bytes per step of rank 0, on
    loopback and, as root, behind 1 Gbit/s links. ``--set ranks=4 bandwidths=loopback,1 steps=12 rounds=2
    bucket_mb=25 variants=...``. Table in ``data/derived/ddp/ddp_script.txt``."""
    from zen_analysis import paths
    from zen_analysis.atomic import atomic_write_text
    from zen_analysis.derived import write_table
    from zen_analysis.dist import netlab
    from zen_analysis.dist.experiments import DDP_VARIANTS, ddp_script_sweep

    opts: dict = {"ranks": 4, "bandwidths": [None, 1.0], "steps": 12, "rounds": 2, "warmup": 2, "batch": 8,
                  "size": "default", "variants": list(DDP_VARIANTS), "bucket_mb": 25.0}  # fmt: skip
    for item in overrides:
        key, _, value = item.partition("=")
        if key not in opts:
            raise ValueError(f"bench ddp takes --set {', '.join(opts)}=...; got {item!r}")
        if key == "bandwidths":
            opts[key] = [None if v == "loopback" else float(v) for v in value.split(",")]
        elif key == "variants":
            opts[key] = value.split(",")
        elif key == "size":
            opts[key] = value
        elif key == "bucket_mb":
            opts[key] = float(value)
        else:
            opts[key] = int(value)
    if any(b is not None for b in opts["bandwidths"]):
        ok, why = netlab.available()
        if not ok:
            print(f"no network lab here ({why}): loopback only")
            opts["bandwidths"] = [b for b in opts["bandwidths"] if b is None]
    summary, steps = ddp_script_sweep(**opts)
    out_dir = paths.derived_dir() / "ddp"
    stamp = {"options": {k: str(v) for k, v in opts.items()}}
    write_table(out_dir / "ddp_script.parquet", summary, stamp)
    write_table(out_dir / "ddp_script_steps.parquet", steps, stamp)
    cols = ["network", "variant", "step_s_median", "speedup_vs_stock", "bytes_per_step", "sync_s_median",
            "exposed_s_median", "loss_max_diff_vs_stock"]  # fmt: skip
    text = summary[cols].round(4).to_string(index=False)
    atomic_write_text(out_dir / "ddp_script.txt", text + "\n")
    print(text)
    return {"ddp": summary}


BENCHMARKS["ddp"] = bench_ddp
