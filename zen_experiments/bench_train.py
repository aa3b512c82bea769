"""``zen-analysis bench train``: training throughput behind shaped links (the network lab, root) on the paper's
natural-sparsity workloads with every scheme, top-k of every bucket to the dense run's loss, and the sums overlapped
with backward: the measured analogues of the paper's Fig. 11-13. Tables in ``data/derived/train/``."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

import pandas as pd

from zen_analysis import paths, recipes
from zen_analysis.atomic import atomic_write_text
from zen_analysis.config.options import flag, floats, ints, names
from zen_analysis.config.plugins import scheme_names
from zen_analysis.plots import training_throughput as train_figs
from zen_analysis.ranks import netlab
from zen_experiments.bench_options import draw_figure, parse_sets, publish
from zen_experiments.lab_sweeps import REST, training_sweep
from zen_experiments.loss_targets import time_to_loss

TRAIN_PARTS = ("natural", "topk", "overlap")
"""``bench train``'s parts: the natural-sparsity workloads with every scheme against ranks and rates; top-k of the
default Llama's buckets to the dense run's loss; the sparse sum overlapped with backward on 2 ranks."""
TRAIN_WORKLOADS = ("lstm-words", "deepfm")
"""``bench train``'s natural-sparsity workloads by default (recipe names): the paper's LSTM and DeepFM."""
TRAIN_SCHEMES = ("allreduce", "zen", "agsparse", "sparcml", "omnireduce", "sparse_ps", "bp_coo", "auto")
"""The natural part's variants: every scheme and ``auto`` (the planner on the lab's calibrated model)."""
TOPK_SCHEMES = ("zen", "agsparse", "omnireduce", "sparcml")
"""Top-k's schemes (the paper's Fig. 13 baselines, with AGsparse, DDP's own sparse sum)."""
DEFAULTS = " (recipe defaults)"
"""The suffix of the natural part's variants that set the scheme and nothing else: what ``zen-analysis train
<workload> --set sync.method=natural --set sync.scheme=<scheme>`` runs (the recipe's ``auto`` switches, AdamW's
dense step)."""
REFERENCE = "allreduce-adamw"
"""``bench train``'s reference variant: dense all-reduce with the plain step (AdamW over every embedding row, a
dense embedding gradient), none of the sparse path's options: the step a plain data-parallel run takes, so every
variant's gain is against it."""

_PARSERS = {"list[str]": names, "list[int]": ints, "list[float]": floats, "bool": flag, "int": int, "float": float}


@dataclass
class TrainBenchSettings:
    """``bench train``'s options with their defaults (what :func:`bench_train`'s docstring describes), each set by
    ``--set key=value`` and parsed by its type (:func:`parse`), in the order an unknown key's message lists them.
    ``sparse_embedding`` and ``overlap`` are the config's switches as written (``true``, ``false`` or ``auto``),
    ``update`` the config's ``train.embedding_update``."""

    parts: list[str] = field(default_factory=lambda: list(TRAIN_PARTS))
    workloads: list[str] = field(default_factory=lambda: list(TRAIN_WORKLOADS))
    ranks: list[int] = field(default_factory=lambda: [4, 8, 16])
    rates: list[float] = field(default_factory=lambda: [1.0])
    schemes: list[str] = field(default_factory=lambda: list(TRAIN_SCHEMES))
    wide_schemes: list[str] = field(default_factory=lambda: ["allreduce", "zen", "agsparse", "sparcml", "auto"])
    bf16_schemes: list[str] = field(default_factory=lambda: ["allreduce", "zen"])
    own_ranks: list[int] = field(default_factory=lambda: [4, 16])
    default_schemes: list[str] = field(default_factory=lambda: ["allreduce", "zen"])
    default_ranks: list[int] = field(default_factory=lambda: [8])
    update: str = "lazy"
    sparse_embedding: str = "true"
    reference: bool = False
    overlap: str = "true"
    bucket_mb: float = 4.0
    steps: int = 10
    warmup: int = 2
    rounds: int = 1
    workers_per_rank: int = 1
    topk_workload: str = "default"
    topk_ranks: int = 8
    topk_rate: float = 1.0
    topk_schemes: list[str] = field(default_factory=lambda: list(TOPK_SCHEMES))
    topk_ratio: float = 0.05
    topk_steps: int = 40
    topk_extra: float = 1.5
    overlap_workload: str = "default"
    overlap_ranks: int = 2
    overlap_rate: float = 1.0
    overlap_bucket_mb: float = 2.0
    overlap_steps: int = 12

    @classmethod
    def parse(cls, overrides: list[str] | tuple[str, ...] = ()) -> TrainBenchSettings:
        """The defaults updated by ``overrides`` (``key=value``) through
        :func:`~zen_experiments.bench_options.parse_sets`, which names the keys on an unknown one; the
        parts checked against :data:`TRAIN_PARTS`."""
        defaults = asdict(cls())
        types = {f.name: _PARSERS.get(f.type, str) for f in fields(cls)}
        settings = cls(**parse_sets("train", overrides, defaults, types))
        unknown = set(settings.parts) - set(TRAIN_PARTS)
        if unknown:
            raise ValueError(f"bench train's parts are {', '.join(TRAIN_PARTS)}; got {sorted(unknown)}")
        return settings

    def options(self) -> dict:
        """The settings as the tables are stamped with them (``reference`` written ``true`` / ``false``)."""
        return {k: ("true" if v else "false") if isinstance(v, bool) else v for k, v in asdict(self).items()}


def per_step(scheme: str) -> dict[str, str]:
    """The overrides of a natural-sparsity variant summed by ``scheme`` (``allreduce``: the dense method)."""
    return {"sync.method": "dense" if scheme == "allreduce" else "natural", "sync.scheme": scheme}


def bench_train(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Training throughput behind shaped links (root; the network lab), one micro-batch per rank by default
    (``workers_per_rank``: a GPU step's compute-to-communication ratio, not the recipes' 8 micro-batches), in
    :data:`TRAIN_PARTS` (``parts``). Medians after ``warmup`` steps on rank 0: step, compute, waiting, exchange,
    the sparse path's seconds, the overlapped sums', and the rest (clip, optimizer, zero_grad, the loss mean).

    * ``natural``: each of ``workloads`` x ``ranks`` x ``rates`` x ``schemes`` (the natural path: the embedding's
      gradient summed by the scheme, by rows; ``allreduce`` everything dense), ``steps`` steps; every variant runs
      the same step (``rounds`` times interleaved, medians over rounds): the embedding stepped by ``update``
      (``lazy``: the same optimizer for all) with a ``sparse_embedding`` gradient (dense all-reduce sums it
      densified, as Horovod's ``sparse_as_dense``), the other gradients in buckets of ``bucket_mb`` whose sums start
      during backward with ``overlap``; with ``reference`` the plain step too (:data:`REFERENCE`). At more than 8
      ranks only ``wide_schemes`` run. ``speedup``: tokens/s over ``allreduce``'s. At ``default_ranks`` each of
      ``default_schemes`` also runs with the recipe's own settings (:data:`DEFAULTS`: only the scheme set), and
      :func:`defaults_verdict` sets Zen's ratio over dense all-reduce's there against the best lossless variant's.
      Table ``bench_train``, figures ``train_vs_ranks`` (and ``train_vs_rate`` with several rates).
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

    ok, why = netlab.available()
    if not ok:
        raise RuntimeError(f"bench train needs the network lab, which is unavailable here: {why}")
    settings = TrainBenchSettings.parse(overrides)
    parts = {"natural": _train_natural, "topk": _train_topk, "overlap": _train_overlap}
    return {part: parts[part](settings) for part in settings.parts}


def _train_natural(opts: TrainBenchSettings):
    """``bench train``'s ``natural`` part (:func:`bench_train`)."""

    rows = []
    for workload in opts.workloads:
        runs = [(ranks, opts.workers_per_rank) for ranks in opts.ranks]
        own = recipes.get(workload).train.workers_per_rank
        runs += [(ranks, own) for ranks in opts.own_ranks if own != opts.workers_per_rank]
        for ranks, workers in runs:
            base = recipes.get(workload)
            label = workload if workers == opts.workers_per_rank else f"{workload} x{workers}"
            base.name = f"bench-train-{workload}-r{ranks}-w{workers}"
            base.dist.num_ranks = ranks
            base.train.workers_per_rank = workers
            sweep = training_sweep(
                base,
                bandwidths=opts.rates,
                variants=_natural_variants(opts, ranks, workers),
                steps=opts.steps,
                warmup=opts.warmup,
                rounds=opts.rounds,
                progress=True,
            )
            rows.append(sweep.assign(workload=label))
    table = pd.concat(rows, ignore_index=True)
    table["outside_compute"] = 1 - table["compute_s"] / table["step_s"]
    key = ["workload", "ranks", "bandwidth_gbps"]
    table["speedup"] = _over(table, key, "allreduce")
    if opts.reference:
        table["speedup_vs_reference"] = _over(table, key, REFERENCE)
    cols = [
        *key,
        "variant",
        "step_s",
        "compute_s",
        "wait_s",
        "exchange_s",
        "rest_s",
        *[c for c in ("sparse_s", "overlap_s", "hidden_s", *REST) if c in table],
        "outside_compute",
        "tokens_per_s",
        "speedup",
        "choice",
        *(["speedup_vs_reference"] if "speedup_vs_reference" in table else []),
    ]
    out_dir = paths.derived_dir() / "train"
    publish(
        table,
        out_dir / "bench_train",
        table[cols].round(3),
        opts.options(),
        train_figs.training_vs_ranks,
        "train_vs_ranks",
    )
    if "auto" in set(table["variant"]):
        verdict = auto_training_verdict(table)
        print(verdict)
        atomic_write_text(out_dir / "auto_verdict.txt", verdict + "\n")
    defaults = defaults_verdict(table)
    if defaults:
        print(defaults)
        atomic_write_text(out_dir / "defaults_verdict.txt", defaults + "\n")
    if table["bandwidth_gbps"].nunique() > 1:
        draw_figure(train_figs.training_vs_rate(table), "train_vs_rate")
    return table


def _natural_variants(opts: TrainBenchSettings, ranks: int, workers: int) -> dict[str, dict[str, object]]:
    """The natural part's variants at ``ranks`` ranks of ``workers`` micro-batches (name -> config overrides): each
    scheme with the bench's settings (only ``wide_schemes`` past 8 ranks or at the recipe's own micro-batches), with
    a bf16 wire, with the recipe's defaults at ``default_ranks`` and, with ``reference``, the plain dense step."""
    common = {
        "train.embedding_update": opts.update,
        "model.sparse_embedding": opts.sparse_embedding,
        "sync.overlap": opts.overlap,
        "sync.bucket_mb": opts.bucket_mb,
    }
    wide = ranks > 8 or workers != opts.workers_per_rank
    schemes = [s for s in opts.schemes if not wide or s in opts.wide_schemes]
    variants = {s: {**per_step(s), **common} for s in schemes}
    variants.update(
        {f"{s}+bf16": {**per_step(s), "sync.wire_dtype": "bfloat16", **common} for s in opts.bf16_schemes if not wide}
    )
    if not wide and ranks in opts.default_ranks:  # what `train <workload>` with that method and scheme runs
        variants.update({f"{s}{DEFAULTS}": per_step(s) for s in opts.default_schemes})
    if opts.reference:  # the toolkit's plain step: AdamW over every row, a dense gradient
        variants[REFERENCE] = {
            **common,
            **per_step("allreduce"),
            "train.embedding_update": "dense",
            "model.sparse_embedding": "false",
        }
    return variants


def auto_training_verdict(table) -> str:
    """``auto`` against the best fixed variant in each (workload, ranks, rate) of the natural part: tokens/s and their
    ratio (target: at least 0.95)."""
    lines, fixed_names = [], {*TRAIN_SCHEMES, *scheme_names()} - {"auto"}  # registered schemes: fixed ones too
    for (workload, ranks, rate), cell in table.groupby(["workload", "ranks", "bandwidth_gbps"]):
        auto = cell[cell["variant"] == "auto"]
        fixed = cell[cell["variant"].isin(fixed_names)].sort_values("tokens_per_s", ascending=False)
        if auto.empty or fixed.empty:
            continue
        a, best = auto.iloc[0], fixed.iloc[0]
        lines.append(
            f"{workload} {ranks} ranks {rate:g} Gbit/s: auto {a['tokens_per_s']:,.0f} tokens/s, best fixed "
            f"{best['variant']} {best['tokens_per_s']:,.0f}: {a['tokens_per_s'] / best['tokens_per_s']:.1%}"
        )
    return "\n".join(lines)


def defaults_verdict(table, scheme: str = "zen", target: float = 0.9) -> str:
    """The recipe's defaults against the bench's best, in each (workload, ranks, rate) where both ran: ``scheme``'s
    tokens/s over dense all-reduce's, each with only the scheme set (:data:`DEFAULTS`), beside the best lossless
    fixed variant's ratio (its tokens/s over ``allreduce``'s, both with the bench's settings; bf16 is lossy and
    ``auto`` not fixed), and the first as a fraction of the second against ``target``, the share of the bench's
    gain the defaults alone should carry (the verdict: the guide's "Against what PyTorch users already have")."""
    lines = []
    fixed = {*TRAIN_SCHEMES, *scheme_names()} - {"auto"}
    for (workload, ranks, rate), cell in table.groupby(["workload", "ranks", "bandwidth_gbps"]):
        tps = cell.set_index("variant")["tokens_per_s"]
        ours, dense = f"{scheme}{DEFAULTS}", f"allreduce{DEFAULTS}"
        bench = cell[cell["variant"].isin(fixed)].sort_values("tokens_per_s", ascending=False)
        if ours not in tps or dense not in tps or "allreduce" not in tps or bench.empty:
            continue
        ratio, best = tps[ours] / tps[dense], bench.iloc[0]
        best_ratio = best["tokens_per_s"] / tps["allreduce"]
        met = "met" if ratio >= target * best_ratio else "missed"
        lines.append(
            f"{workload} {ranks} ranks {rate:g} Gbit/s: {scheme} with the recipe's defaults {ratio:.2f}x dense "
            f"all-reduce's tokens/s ({tps[ours]:,.0f} against {tps[dense]:,.0f}); the bench's best, {best['variant']}, "
            f"{best_ratio:.2f}x: {ratio / best_ratio:.1%} (target {target:.0%}: {met})"
        )
    return "\n".join(lines)


def _over(table, key: list[str], variant: str):
    """Each row's tokens/s over ``variant``'s at the same ``key`` (NaN where ``variant`` did not run)."""

    base = table[table["variant"] == variant].set_index(key)["tokens_per_s"]
    return table["tokens_per_s"].to_numpy() / base.reindex(pd.MultiIndex.from_frame(table[key])).to_numpy()


def _train_topk(opts: TrainBenchSettings):
    """``bench train``'s ``topk`` part (:func:`bench_train`): wall-clock time to the dense run's final loss."""

    base = recipes.get(opts.topk_workload)
    base.name = f"bench-train-topk-{opts.topk_workload}-r{opts.topk_ranks}"
    base.dist.num_ranks = opts.topk_ranks
    base.train.workers_per_rank = opts.workers_per_rank
    base.train.min_lr_ratio = 1.0  # constant after warm-up: a longer run follows the dense run's schedule
    longer = math.ceil(opts.topk_steps * opts.topk_extra)
    common = {"sync.overlap": opts.overlap, "sync.bucket_mb": opts.bucket_mb}
    variants = {"allreduce": {**per_step("allreduce"), **common}}
    for s in opts.topk_schemes:
        variants[f"topk+{s}"] = {
            "sync.method": "topk",
            "sync.scheme": s,
            "sync.topk_ratio": opts.topk_ratio,
            "train.num_steps": longer,
            **common,
        }
    table = training_sweep(
        base,
        bandwidths=[opts.topk_rate],
        variants=variants,
        steps=opts.topk_steps,
        warmup=opts.warmup,
        progress=True,
    )
    dense = table.set_index("variant").loc["allreduce"]
    target = sum(dense["losses"][-5:]) / 5
    reached = [time_to_loss(r["losses"], r["step_times"], target) for _, r in table.iterrows()]
    table["target_loss"] = target
    table["final_loss"] = [sum(r[-5:]) / 5 for r in table["losses"]]
    table["time_to_loss_s"] = [t for t, _ in reached]
    table["steps_to_loss"] = [k for _, k in reached]
    dense_time = table.loc[table["variant"] == "allreduce", "time_to_loss_s"].iloc[0]
    table["time_to_loss_vs_dense"] = dense_time / table["time_to_loss_s"]
    table["speedup"] = table["tokens_per_s"] / table.set_index("variant").loc["allreduce", "tokens_per_s"]
    cols = [
        "ranks",
        "bandwidth_gbps",
        "variant",
        "step_s",
        "compute_s",
        "wait_s",
        "exchange_s",
        "rest_s",
        "tokens_per_s",
        "speedup",
        "target_loss",
        "final_loss",
        "steps_to_loss",
        "time_to_loss_s",
        "time_to_loss_vs_dense",
    ]
    publish(
        table,
        paths.derived_dir() / "train" / "bench_train_topk",
        table[cols].round(4),
        opts.options(),
        train_figs.time_to_loss,
        "train_time_to_loss",
    )
    return table


def _train_overlap(opts: TrainBenchSettings):
    """``bench train``'s ``overlap`` part (:func:`bench_train`): the sums started during backward against inline."""

    base = recipes.get(opts.overlap_workload)
    base.name = f"bench-train-overlap-{opts.overlap_workload}-r{opts.overlap_ranks}"
    base.dist.num_ranks = opts.overlap_ranks
    base.train.workers_per_rank = opts.workers_per_rank
    kinds = {
        "allreduce": per_step("allreduce"),
        "zen": per_step("zen"),
        "topk+zen": {"sync.method": "topk", "sync.scheme": "zen", "sync.topk_ratio": opts.topk_ratio},
    }
    variants = {
        f"{name}{'+overlap' * (ov == 'true')}": {
            **sets,
            "sync.overlap": ov,
            "sync.bucket_mb": opts.overlap_bucket_mb,
        }
        for name, sets in kinds.items()
        for ov in ("false", "true")
    }
    table = training_sweep(
        base,
        bandwidths=[opts.overlap_rate],
        variants=variants,
        steps=opts.overlap_steps,
        warmup=opts.warmup,
        progress=True,
    )
    table["kind"] = table["variant"].str.removesuffix("+overlap")
    inline = table[~table["variant"].str.endswith("+overlap")].set_index("kind")
    table["sum_inline_s"] = table["kind"].map(inline["sync_s"])  # the inline sum: all of it after backward
    table["hidden_fraction"] = table["hidden_s"] / table["overlap_s"]
    table["step_vs_inline"] = table["kind"].map(inline["step_s"]) / table["step_s"]
    table["losses_equal_inline"] = [r["losses"] == inline.loc[r["kind"], "losses"] for _, r in table.iterrows()]
    cols = [
        "ranks",
        "bandwidth_gbps",
        "variant",
        "step_s",
        "compute_s",
        "sync_s",
        "sum_inline_s",
        "overlap_s",
        "hidden_s",
        "hidden_fraction",
        "step_vs_inline",
        "losses_equal_inline",
    ]
    publish(table, paths.derived_dir() / "train" / "bench_train_overlap", table[cols].round(3), opts.options())
    return table
