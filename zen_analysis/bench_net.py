"""The benchmarks on the emulated network (``zen-analysis bench netlab`` / ``bench ddp``; registered in
:data:`zen_analysis.bench.BENCHMARKS`): schemes, hierarchical Zen, training and a user's DDP script behind shaped
links. Tables in ``data/derived/netlab/`` and ``data/derived/ddp/``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from zen_analysis import recipes
from zen_analysis.bench_options import floats, ints, names, parse_sets

if TYPE_CHECKING:
    import pandas as pd


def bench_netlab(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Measured on the emulated network (root; :mod:`zen_analysis.experiments.netlab`), on the default run (trained
    first if ``make reproduce`` has not): ``schemes``, every scheme replaying its natural and top-k tensors at
    ``ranks`` x ``bandwidths`` (figure ``netlab_speedup``); ``nodes``, flat vs hierarchical Zen vs all-reduce on
    2 nodes x 2 ranks at ``node_bandwidths``; ``train``, the default recipe trained for ``train_steps`` steps per variant at
    ``train_bandwidths`` (figure ``netlab_training``). ``--set parts=schemes,nodes,train ranks=4,8
    bandwidths=0.5,1,2.5,10 train_bandwidths=1 train_steps=12 repeats=10``. Tables in ``data/derived/netlab/``."""
    from zen_analysis import paths
    from zen_analysis.dist import netlab
    from zen_analysis.dist.launch import ensure_run
    from zen_analysis.reproduce import reproduce_run_id

    ok, why = netlab.available()
    if not ok:
        raise RuntimeError(f"bench netlab needs the network lab, which is unavailable here: {why}")
    defaults = {"parts": ["schemes", "nodes", "train"], "ranks": [4, 8], "bandwidths": [0.5, 1.0, 2.5, 10.0],
                "node_bandwidths": [1.0, 0.25], "train_bandwidths": [1.0], "train_steps": 12, "repeats": 10,
                "train_workers_per_rank": 8, "edit_bandwidth": 0.5, "edit_steps": 40}  # fmt: skip
    types = {"parts": names, "ranks": ints, "bandwidths": floats, "node_bandwidths": floats, "train_bandwidths": floats}
    opts = parse_sets("netlab", overrides, defaults, types)
    cfg = recipes.default()
    cfg.run_id = reproduce_run_id("default")
    run = ensure_run(cfg)
    out_dir = paths.derived_dir() / "netlab"
    result: dict = {}
    parts = {"schemes": _netlab_schemes, "nodes": _netlab_nodes, "train": _netlab_train, "figures": _netlab_figures,
             "twins": _netlab_twins, "edit": _netlab_edit}  # fmt: skip
    for part, fn in parts.items():  # in this order, whatever the order of --set parts
        if part in opts["parts"]:
            table = fn(run, opts, out_dir)
            if table is not None:
                result[part] = table
    return result


def _netlab_schemes(run: str, opts: dict, out_dir: Path) -> pd.DataFrame:
    """``schemes``: the scheme sweep, its table (printed wide) and figure ``netlab_speedup``."""

    from zen_analysis.experiments.netlab import scheme_sweep
    from zen_analysis.plots import comm as comm_figs

    sweep = scheme_sweep(run, ranks=opts["ranks"], bandwidths=opts["bandwidths"], repeats=opts["repeats"])
    cols = ["kind", "ranks", "bandwidth_gbps", "scheme", "bytes_sent_max_rank", "measured_s_median", "modelled_s",
            "speedup_measured", "speedup_modelled", "lossless"]  # fmt: skip
    _publish(sweep, out_dir / "scheme_sweep", sweep[cols].round(4), opts, comm_figs.measured_speedup_vs_bandwidth,
             "netlab_speedup")  # fmt: skip
    return sweep


def _netlab_nodes(run: str, opts: dict, out_dir: Path) -> pd.DataFrame:
    """``nodes``: flat vs hierarchical Zen vs all-reduce at each of ``node_bandwidths``; every sum must be equal."""
    import pandas as pd

    from zen_analysis.atomic import atomic_write_text
    from zen_analysis.experiments.netlab import node_comparison

    nodes = pd.concat([node_comparison(run, bandwidth_gbps=b, repeats=opts["repeats"]) for b in opts["node_bandwidths"]],
                      ignore_index=True)  # fmt: skip
    text = nodes.round(4).to_string(index=False)
    atomic_write_text(out_dir / "node_comparison.txt", text + "\n")
    print(text)
    if not nodes["equal"].all():
        raise RuntimeError(f"a method's sum differs from all_reduce:\n{text}")
    return nodes


def _netlab_train(run: str, opts: dict, out_dir: Path) -> pd.DataFrame:
    """``train``: the default recipe trained per variant at ``train_bandwidths``; table and figure
    ``netlab_training`` (``-w<N>`` appended unless the recipe's workers per rank)."""
    from matplotlib import pyplot as plt

    from zen_analysis.atomic import atomic_write_text
    from zen_analysis.derived import write_table
    from zen_analysis.experiments.netlab import training_sweep
    from zen_analysis.plots import comm as comm_figs
    from zen_analysis.plots import style

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
    return train


def _netlab_figures(run: str, opts: dict, out_dir: Path) -> None:
    """``figures``: redraw the figures from the stored tables."""
    from matplotlib import pyplot as plt

    from zen_analysis.derived import read_table
    from zen_analysis.plots import comm as comm_figs
    from zen_analysis.plots import style

    for table, draw, name in (("scheme_sweep", comm_figs.measured_speedup_vs_bandwidth, "netlab_speedup"),
                              ("training", comm_figs.training_vs_bandwidth, "netlab_training"),
                              ("training-w1", comm_figs.training_vs_bandwidth, "netlab_training-w1")):  # fmt: skip
        if (out_dir / f"{table}.parquet").exists():
            fig = draw(read_table(out_dir / f"{table}.parquet"))
            style.savefig(fig, name)
            plt.close(fig)
            print(f"{name} redrawn from {table}.parquet")


def _netlab_twins(run: str, opts: dict, out_dir: Path) -> pd.DataFrame:
    """``twins``: the trainings at 1 Gbit/s again on loopback: the same losses?"""
    from zen_analysis.atomic import atomic_write_text
    from zen_analysis.derived import read_table
    from zen_analysis.experiments.netlab import loopback_twins

    suffix = "" if opts["train_workers_per_rank"] == 8 else f"-w{opts['train_workers_per_rank']}"
    trained = read_table(out_dir / f"training{suffix}.parquet")
    twins = loopback_twins(trained.loc[trained["bandwidth_gbps"] == 1.0, "run_id"].tolist())
    text = twins.to_string(index=False)
    atomic_write_text(out_dir / f"loopback_twins{suffix}.txt", text + "\n")
    print(text)
    return twins


def _netlab_edit(run: str, opts: dict, out_dir: Path) -> pd.DataFrame:
    """``edit``: EDiT with every rank behind an ``edit_bandwidth`` link, sleep emulation vs the lab."""
    from zen_analysis.atomic import atomic_write_text
    from zen_analysis.experiments.local_sgd import slow_network_check

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
    return check


def _bandwidths(value: str) -> list[float | None]:
    """``loopback,1`` -> ``[None, 1.0]`` (None: loopback, no shaped link)."""
    return [None if v == "loopback" else float(v) for v in value.split(",")]


def bench_ddp(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """A user's own DDP training (``scripts/ddp_transformers.py``, the default Llama under torchrun) as stock DDP,
    with Zen's natural hook and with top-k + Zen, inline and overlapped
    (:func:`~zen_analysis.experiments.netlab.ddp_script_sweep`): median step time and bytes per step of rank 0, on
    loopback and, as root, behind 1 Gbit/s links. ``--set ranks=4 bandwidths=loopback,1 steps=12 rounds=2
    bucket_mb=25 variants=...``. Table in ``data/derived/ddp/ddp_script.txt``."""
    from zen_analysis import paths
    from zen_analysis.atomic import atomic_write_text
    from zen_analysis.derived import write_table
    from zen_analysis.dist import netlab
    from zen_analysis.experiments.netlab import DDP_VARIANTS, ddp_script_sweep

    defaults = {"ranks": 4, "bandwidths": [None, 1.0], "steps": 12, "rounds": 2, "warmup": 2, "batch": 8,
                "size": "default", "variants": list(DDP_VARIANTS), "bucket_mb": 25.0}  # fmt: skip
    opts = parse_sets("ddp", overrides, defaults, {"bandwidths": _bandwidths, "variants": names})
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


TRAIN_PARTS = ("natural", "topk", "overlap")
"""``bench train``'s parts: the natural-sparsity workloads with every scheme against ranks and rates; top-k of the
default Llama's buckets to the dense run's loss; the sparse sum overlapped with backward on 2 ranks."""
TRAIN_WORKLOADS = ("lstm-words", "deepfm")
"""``bench train``'s natural-sparsity workloads by default (recipe names): the paper's LSTM and DeepFM."""
TRAIN_SCHEMES = ("allreduce", "zen", "agsparse", "sparcml", "omnireduce", "sparse_ps", "bp_coo")
TOPK_SCHEMES = ("zen", "agsparse", "omnireduce", "sparcml")
"""Top-k's schemes (the paper's Fig. 13 baselines, with AGsparse, DDP's own sparse sum)."""
REFERENCE = "allreduce-adamw"
"""``bench train``'s reference variant: dense all-reduce with the plain step (AdamW over every embedding row, a
dense embedding gradient), what the toolkit's loop did before the lazy row update."""


def bench_train(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Training throughput behind shaped links (root; the network lab), one micro-batch per rank by default
    (``workers_per_rank``: a GPU step's compute-to-communication ratio, not the recipes' 8 micro-batches), in
    :data:`TRAIN_PARTS` (``parts``). Medians after ``warmup`` steps on rank 0: step, compute, waiting, exchange,
    the sparse path's seconds, the overlapped sums', and the rest (clip, optimizer, zero_grad, the loss mean).

    * ``natural``: each of ``workloads`` x ``ranks`` x ``rates`` x ``schemes`` (the natural path: the embedding's
      gradient summed by the scheme, by rows; ``allreduce`` everything dense), ``steps`` steps; every variant
      runs the same step: the embedding stepped by ``update`` (``lazy``: the same optimizer for all) with a
      ``sparse_embedding`` gradient (dense all-reduce sums it densified, as Horovod's ``sparse_as_dense``), the
      other gradients in buckets of ``bucket_mb`` whose sums start during backward with ``overlap``; with
      ``reference`` the plain step too (:data:`REFERENCE`). At more than 8 ranks only ``wide_schemes`` run.
      ``speedup``: tokens/s over ``allreduce``'s. Table ``bench_train``, figures ``train_vs_ranks`` (and
      ``train_vs_rate`` with several rates).
    * ``topk``: ``topk_workload`` (the default Llama) on ``topk_ranks`` ranks at ``topk_rate`` Gbit/s: dense
      all-reduce for ``topk_steps`` steps, then DGC top-``topk_ratio`` of every bucket + each of ``topk_schemes``
      for up to ``topk_extra`` x as many, all at a constant learning rate after warm-up (so a longer run follows
      the same schedule); the wall-clock time until the trailing mean of 5 losses reaches the dense run's final
      one. Table ``bench_train_topk``, figure ``train_time_to_loss``.
    * ``overlap``: ``overlap_workload`` on ``overlap_ranks`` ranks (one core each) at ``overlap_rate`` Gbit/s,
      buckets of ``overlap_bucket_mb``: dense all-reduce, Zen's natural path and top-k + Zen, each inline and with
      its sums started during backward (``sync.overlap``); the hidden fraction of the sums and the step against
      inline. Table ``bench_train_overlap``.

    Tables under ``data/derived/train/``."""
    from zen_analysis.dist import netlab

    ok, why = netlab.available()
    if not ok:
        raise RuntimeError(f"bench train needs the network lab, which is unavailable here: {why}")
    defaults = {"parts": list(TRAIN_PARTS), "workloads": list(TRAIN_WORKLOADS), "ranks": [4, 8, 16], "rates": [1.0],
                "schemes": list(TRAIN_SCHEMES), "wide_schemes": ["allreduce", "zen", "agsparse", "sparcml"],
                "bf16_schemes": ["allreduce", "zen"], "own_ranks": [4, 16],
                "update": "lazy", "sparse_embedding": "true", "reference": "false", "overlap": "true",
                "bucket_mb": 4.0, "steps": 10, "warmup": 2, "workers_per_rank": 1,
                "topk_workload": "default", "topk_ranks": 8, "topk_rate": 1.0, "topk_schemes": list(TOPK_SCHEMES),
                "topk_ratio": 0.05, "topk_steps": 40, "topk_extra": 1.5,
                "overlap_workload": "default", "overlap_ranks": 2, "overlap_rate": 1.0, "overlap_bucket_mb": 2.0,
                "overlap_steps": 12}  # fmt: skip
    types = {"parts": names, "workloads": names, "ranks": ints, "rates": floats, "schemes": names,
             "wide_schemes": names, "topk_schemes": names, "bf16_schemes": names, "own_ranks": ints}  # fmt: skip
    opts = parse_sets("train", overrides, defaults, types)
    unknown = set(opts["parts"]) - set(TRAIN_PARTS)
    if unknown:
        raise ValueError(f"bench train's parts are {', '.join(TRAIN_PARTS)}; got {sorted(unknown)}")
    parts = {"natural": _train_natural, "topk": _train_topk, "overlap": _train_overlap}
    return {part: parts[part](opts) for part in opts["parts"]}


def _train_natural(opts: dict):
    """``bench train``'s ``natural`` part (:func:`bench_train`)."""
    import pandas as pd

    from zen_analysis import paths
    from zen_analysis.experiments.netlab import REST, training_sweep
    from zen_analysis.plots import comm as comm_figs

    rows = []
    for workload in opts["workloads"]:
        runs = [(ranks, opts["workers_per_rank"]) for ranks in opts["ranks"]]
        own = recipes.get(workload).train.workers_per_rank
        runs += [(ranks, own) for ranks in opts["own_ranks"] if own != opts["workers_per_rank"]]
        for ranks, workers in runs:
            base = recipes.get(workload)
            label = workload if workers == opts["workers_per_rank"] else f"{workload} x{workers}"
            base.name = f"bench-train-{workload}-r{ranks}-w{workers}"
            base.dist.num_ranks = ranks
            base.train.workers_per_rank = workers
            common = {"train.embedding_update": opts["update"], "model.sparse_embedding": opts["sparse_embedding"],
                      "sync.overlap": opts["overlap"], "sync.bucket_mb": opts["bucket_mb"]}  # fmt: skip
            wide = ranks > 8 or workers != opts["workers_per_rank"]
            schemes = [s for s in opts["schemes"] if not wide or s in opts["wide_schemes"]]
            variants = {s: {"sync.scheme": s, **common} for s in schemes}
            variants.update({f"{s}+bf16": {"sync.scheme": s, "sync.wire_dtype": "bfloat16", **common}
                             for s in opts["bf16_schemes"] if not wide})  # fmt: skip
            if opts["reference"] == "true":  # the toolkit's plain step: AdamW over every row, a dense gradient
                variants[REFERENCE] = {**common, "sync.scheme": "allreduce", "train.embedding_update": "dense",
                                       "model.sparse_embedding": "false"}  # fmt: skip
            sweep = training_sweep(base, bandwidths=opts["rates"], variants=variants, steps=opts["steps"],
                                   warmup=opts["warmup"], progress=True)  # fmt: skip
            rows.append(sweep.assign(workload=label))
    table = pd.concat(rows, ignore_index=True)
    table["wait_s"] = table["sync_s"] - table["exchange_s"]
    table["rest_s"] = table[[c for c in REST if c in table]].sum(1)
    table["outside_compute"] = 1 - table["compute_s"] / table["step_s"]
    key = ["workload", "ranks", "bandwidth_gbps"]
    table["speedup"] = _over(table, key, "allreduce")
    if opts["reference"] == "true":
        table["speedup_vs_reference"] = _over(table, key, REFERENCE)
    cols = [*key, "variant", "step_s", "compute_s", "wait_s", "exchange_s", "rest_s",
            *[c for c in ("sparse_s", "overlap_s", "hidden_s", *REST) if c in table], "outside_compute",
            "tokens_per_s", "speedup", *(["speedup_vs_reference"] if "speedup_vs_reference" in table else [])]  # fmt: skip
    out_dir = paths.derived_dir() / "train"
    _publish(table, out_dir / "bench_train", table[cols].round(3), opts, comm_figs.training_vs_ranks, "train_vs_ranks")
    if table["bandwidth_gbps"].nunique() > 1:
        _draw(comm_figs.training_vs_rate(table), "train_vs_rate")
    return table


def _over(table, key: list[str], variant: str):
    """Each row's tokens/s over ``variant``'s at the same ``key`` (NaN where ``variant`` did not run)."""
    import pandas as pd

    base = table[table["variant"] == variant].set_index(key)["tokens_per_s"]
    return table["tokens_per_s"].to_numpy() / base.reindex(pd.MultiIndex.from_frame(table[key])).to_numpy()


def _train_topk(opts: dict):
    """``bench train``'s ``topk`` part (:func:`bench_train`): wall-clock time to the dense run's final loss."""
    import math

    from zen_analysis import paths
    from zen_analysis.experiments.netlab import REST, time_to_loss, training_sweep
    from zen_analysis.plots import comm as comm_figs

    base = recipes.get(opts["topk_workload"])
    base.name = f"bench-train-topk-{opts['topk_workload']}-r{opts['topk_ranks']}"
    base.dist.num_ranks = opts["topk_ranks"]
    base.train.workers_per_rank = opts["workers_per_rank"]
    base.train.min_lr_ratio = 1.0  # constant after warm-up: a longer run follows the dense run's schedule
    longer = math.ceil(opts["topk_steps"] * opts["topk_extra"])
    common = {"sync.overlap": opts["overlap"], "sync.bucket_mb": opts["bucket_mb"]}
    variants = {"allreduce": {"sync.scheme": "allreduce", **common}}
    for s in opts["topk_schemes"]:
        variants[f"topk+{s}"] = {"sync.scheme": s, "sync.compress": "topk", "sync.topk_ratio": opts["topk_ratio"],
                                 "train.num_steps": longer, **common}  # fmt: skip
    table = training_sweep(base, bandwidths=[opts["topk_rate"]], variants=variants, steps=opts["topk_steps"],
                           warmup=opts["warmup"], progress=True)  # fmt: skip
    dense = table.set_index("variant").loc["allreduce"]
    target = sum(dense["losses"][-5:]) / 5
    reached = [time_to_loss(r["losses"], r["step_times"], target) for _, r in table.iterrows()]
    table["target_loss"] = target
    table["final_loss"] = [sum(r[-5:]) / 5 for r in table["losses"]]
    table["time_to_loss_s"] = [t for t, _ in reached]
    table["steps_to_loss"] = [k for _, k in reached]
    dense_time = table.loc[table["variant"] == "allreduce", "time_to_loss_s"].iloc[0]
    table["time_to_loss_vs_dense"] = dense_time / table["time_to_loss_s"]
    table["wait_s"] = table["sync_s"] - table["exchange_s"]
    table["rest_s"] = table[[c for c in REST if c in table]].sum(1)
    table["speedup"] = table["tokens_per_s"] / table.set_index("variant").loc["allreduce", "tokens_per_s"]
    cols = ["ranks", "bandwidth_gbps", "variant", "step_s", "compute_s", "wait_s", "exchange_s", "rest_s",
            "tokens_per_s", "speedup", "target_loss", "final_loss", "steps_to_loss", "time_to_loss_s",
            "time_to_loss_vs_dense"]  # fmt: skip
    _publish(table, paths.derived_dir() / "train" / "bench_train_topk", table[cols].round(4), opts,
             comm_figs.time_to_loss, "train_time_to_loss")  # fmt: skip
    return table


def _train_overlap(opts: dict):
    """``bench train``'s ``overlap`` part (:func:`bench_train`): the sums started during backward against inline."""
    from zen_analysis import paths
    from zen_analysis.experiments.netlab import training_sweep

    base = recipes.get(opts["overlap_workload"])
    base.name = f"bench-train-overlap-{opts['overlap_workload']}-r{opts['overlap_ranks']}"
    base.dist.num_ranks = opts["overlap_ranks"]
    base.train.workers_per_rank = opts["workers_per_rank"]
    kinds = {"allreduce": {"sync.scheme": "allreduce"}, "zen": {"sync.scheme": "zen"},
             "topk+zen": {"sync.scheme": "zen", "sync.compress": "topk", "sync.topk_ratio": opts["topk_ratio"]}}
    variants = {f"{name}{'+overlap' * (ov == 'true')}": {**sets, "sync.overlap": ov,
                                                         "sync.bucket_mb": opts["overlap_bucket_mb"]}
                for name, sets in kinds.items() for ov in ("false", "true")}  # fmt: skip
    table = training_sweep(base, bandwidths=[opts["overlap_rate"]], variants=variants, steps=opts["overlap_steps"],
                           warmup=opts["warmup"], progress=True)  # fmt: skip
    table["kind"] = table["variant"].str.removesuffix("+overlap")
    inline = table[~table["variant"].str.endswith("+overlap")].set_index("kind")
    table["sum_inline_s"] = table["kind"].map(inline["sync_s"])  # the inline sum: all of it after backward
    table["hidden_fraction"] = table["hidden_s"] / table["overlap_s"]
    table["step_vs_inline"] = table["kind"].map(inline["step_s"]) / table["step_s"]
    table["losses_equal_inline"] = [r["losses"] == inline.loc[r["kind"], "losses"] for _, r in table.iterrows()]
    cols = ["ranks", "bandwidth_gbps", "variant", "step_s", "compute_s", "sync_s", "sum_inline_s", "overlap_s",
            "hidden_s", "hidden_fraction", "step_vs_inline", "losses_equal_inline"]  # fmt: skip
    _publish(table, paths.derived_dir() / "train" / "bench_train_overlap", table[cols].round(3), opts)
    return table


def _publish(table: pd.DataFrame, stem: Path, shown: pd.DataFrame, opts: dict, draw=None, figure: str = "") -> None:
    """A benchmark's results: ``table`` as ``<stem>.parquet`` (stamped with the options), ``shown`` as
    ``<stem>.txt`` and on stdout, and ``draw(table)`` (if given) as figure ``figure``."""
    import pandas as pd

    from zen_analysis.atomic import atomic_write_text
    from zen_analysis.derived import write_table

    write_table(stem.with_suffix(".parquet"), table, {"options": opts})
    text = shown.to_string(index=False)
    atomic_write_text(stem.with_suffix(".txt"), text + "\n")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(text)
    if draw is not None:
        _draw(draw(table), figure)


def _draw(fig, figure: str) -> None:
    """Save ``fig`` as ``figures/<figure>.png`` / ``.pdf`` and close it."""
    from matplotlib import pyplot as plt

    from zen_analysis.plots import style

    style.savefig(fig, figure)
    plt.close(fig)
