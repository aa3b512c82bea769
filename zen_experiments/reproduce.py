"""``make reproduce``: the main job on the embedded default data, stage by stage.

Stages (:data:`STAGES`; ``zen-analysis reproduce --only STAGE`` / ``--skip STAGE``):

1. ``train``: train and capture the reproduction workloads on several ranks (the small Llama: natural sparsity
   and DGC top-5% of every DDP-style bucket; the word-level LSTM LM: natural sparsity; a short Llama run with 128
   workers of one sequence each, so the figures reach n = 128; small OPT and Gemma 2, the paper's other two LLM
   families, with bucket top-k) and write a capture summary to ``data/derived/reproduce/``;
2. ``characterize``: their sparsity, the paper's Fig. 2-3 analogues plus drift and imbalance into ``figures/``,
   and the claims table;
3. ``schemes``: every communication scheme modelled on the captured traces (Fig. 8, the modelled half of Fig. 15,
   Fig. 17a), and the default run's embedding replayed through every scheme on 4 gloo
   ranks (calibrated first) for the measured half of Fig. 15 and the model-vs-measured figure;
4. ``netlab``: where the emulated network can be built (root), the same replay with each rank behind a 1 Gbit/s
   link plus flat vs hierarchical Zen on 2 lab nodes (skipped with the reason otherwise);
5. ``zen``: hashing cost (Fig. 16), the Theorem 2 imbalance check, COO vs hash-bitmap pull (Fig. 17b), and dense /
   Zen / top-k AGsparse / top-k Zen trainings of the default model on 4 ranks for loss parity (Fig. 18);
6. ``paper``: the paper's headline at its scale: its six workloads' index sets generated from its inputs,
   characterized at 128 GPUs (C1-C3), and Fig. 11-15 and 17b modelled from them beside every paper number
   (:mod:`~zen_experiments.paper_stage`);
7. ``edit``: synchronous training, Post-Local SGD, DiLoCo, EDiT and A-EDiT on the default Llama at equal tokens
   (loss curves, validation loss and its gap to synchronous training, tokens/s, bytes), and EDiT's penalty
   ablation with injected loss spikes; a short version of the sparse pseudo-gradient measurements (C1-C3 beside
   the gradients', and top-k through Zen and AGsparse behind 0.5 Gbit/s links where the lab can be built). The EDiT
   paper's stage (seven trainings) is the longest, so
   it runs with ``--full`` (``make reproduce-full``) or ``--only edit``; ``make reproduce`` keeps to the Zen
   paper's stages within its 30 minutes;
8. ``scale``: beyond the paper's 128 GPUs, a 1024-worker capture of the default Llama and every scheme modelled
   on it up to n = 1024 (the scale mode: with ``--full`` or ``--only scale``).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence

from matplotlib import pyplot as plt

from zen_analysis import paths, recipes
from zen_analysis.atomic import atomic_write_text
from zen_analysis.capture.summary import describe_run
from zen_analysis.config import apply_overrides
from zen_analysis.derived import read_table, write_table
from zen_analysis.evaluation.evaluate import evaluate_runs, normalized, speedups, wire_size_table
from zen_analysis.evaluation.measure import report, summarize
from zen_analysis.plots import comm as comm_figs
from zen_analysis.plots import local_sgd_figures as lsgd_figs
from zen_analysis.plots import style
from zen_analysis.plots import zen_figures as zen_figs
from zen_analysis.plots.sparsity import write_all
from zen_analysis.ranks import netlab
from zen_analysis.runs.launch import launch
from zen_analysis.sparsity.characterize import characterize
from zen_analysis.sparsity.report import claims_table, to_markdown
from zen_analysis.sparsity.workloads import combined_tables
from zen_experiments import results_pages
from zen_experiments.hashing_cost import hashing_cost
from zen_experiments.lab_sweeps import node_comparison, scheme_sweep
from zen_experiments.local_sgd_runs import (
    ABLATION_SPIKES,
    ABLATION_SYNC,
    EDIT_TUNED,
    compare_methods,
    penalty_ablation,
)
from zen_experiments.paper_stage import stage_paper
from zen_experiments.pseudo_gradients import (
    SHORT_SYNC,
    pseudo_gradient_claims,
    pseudo_gradient_sweep,
    short_base,
)
from zen_experiments.run_ids import (
    EVALUATE_STEPS,
    REPLAY_RANKS,
    REPRODUCE_RUNS,
    RUN_OVERRIDES,
    SCALE_RUN,
    reproduce_recipes,
    reproduce_run_id,
    reproduce_run_ids,
)
from zen_experiments.schemes import measured_replay, scale_mode
from zen_experiments.zen_runs import parity_config, parity_runs, parity_summary, theorem2_table

FULL_ONLY = results_pages.FULL_ONLY
"""Stages run by ``--full`` (``make reproduce-full``) or by naming them in ``--only``."""


def _stage_netlab() -> None:
    """Stage 4: every scheme measured with each of 4 ranks behind a 1 Gbit/s link (natural and top-k tensors), and flat
    vs hierarchical Zen on 2 nodes x 2 ranks; skipped, with the reason, where the lab cannot be built."""
    ok, why = netlab.available()
    if not ok:
        print(f"== the emulated network: skipped ({why})")
        return
    run_id = _run_ids()[0]
    print(
        f"== the emulated network: {run_id} replayed on {REPLAY_RANKS} ranks behind 1 Gbit/s links; flat vs "
        "hierarchical Zen on 2 nodes x 2 ranks (the full sweep: `zen-analysis bench netlab`)"
    )

    sweep = scheme_sweep(run_id, ranks=(REPLAY_RANKS,), bandwidths=(1.0,), repeats=5)
    nodes = node_comparison(run_id, bandwidth_gbps=1.0, repeats=5)
    cols = ["kind", "scheme", "bytes_sent_max_rank", "measured_s_median", "modelled_s", "speedup_measured", "lossless"]
    text = sweep[cols].round(4).to_string(index=False) + "\n\n" + nodes.round(4).to_string(index=False)
    atomic_write_text(paths.derived_dir() / "reproduce" / "netlab.txt", text + "\n")
    print(text)
    fig = comm_figs.measured_speedup_vs_bandwidth(sweep)
    style.savefig(fig, "netlab_speedup_reproduce")
    plt.close(fig)


def _train(names, overrides) -> list[str]:
    """Train and capture the recipes ``names`` as ``reproduce-<recipe>``; their capture reports."""
    reports = []
    for name in names:
        cfg = apply_overrides(recipes.get(name), [*RUN_OVERRIDES.get(name, ()), *overrides])
        cfg.run_id = reproduce_run_id(name)
        print(
            f"== training {name}: {cfg.num_workers} workers on {cfg.dist.num_ranks} ranks, {cfg.train.num_steps} steps"
        )
        launch(cfg, overwrite=True)  # reproduce-<recipe> is this job's own run: a rerun replaces it
        reports.append(describe_run(cfg.run_id))
        print(reports[-1])
    return reports


def _stage_train(overrides) -> None:
    """Stage 1: train and capture the reproduction workloads."""
    out = paths.derived_dir() / "reproduce" / "capture_summary.txt"
    for name in REPRODUCE_RUNS:
        if recipes.unavailable(name):
            print(f"== not training {name}: {recipes.unavailable(name)}")
    atomic_write_text(out, "\n\n".join(_train(reproduce_recipes(), overrides)) + "\n")
    print(f"summary written to {out}")


def _run_ids() -> list[str]:
    run_ids = reproduce_run_ids()
    missing = [r for r in run_ids if not (paths.trace_dir(r) / "manifest.json").exists()]
    if missing:
        raise ValueError(
            f"runs {missing} are not captured yet: run the train stage first (`zen-analysis reproduce --only train`)"
        )
    return run_ids


def _stage_characterize() -> None:
    """Stage 2: characterize the sparsity (Fig. 2-3, drift, imbalance) and the claims table."""
    run_ids = _run_ids()
    for run_id in run_ids:
        characterize(run_id)
    tables = combined_tables(run_ids)
    names = write_all(tables)
    print(f"figures written to {paths.figures_dir()}: {', '.join(names)}")
    claims = claims_table(tables)
    claims_path = paths.derived_dir() / "reproduce" / "claims.md"
    atomic_write_text(claims_path, to_markdown(claims) + "\n")
    print(claims.to_string(index=False))


def _stage_schemes() -> None:
    """Stage 3: every scheme modelled on the traces (Fig. 8, 15 left, 17a, the 1024-worker scale mode) and
    replayed on 4 gloo ranks (Fig. 15 right, model vs measured)."""
    run_ids = _run_ids()
    schemes = evaluate_runs(run_ids, steps=EVALUATE_STEPS)
    fig = comm_figs.normalized_time(schemes, topology="paper-tcp25")
    style.savefig(fig, "fig8_normalized_time")
    plt.close(fig)
    summary = normalized(schemes, topology="paper-tcp25").round(2)
    atomic_write_text(paths.derived_dir() / "reproduce" / "schemes_normalized.txt", summary.to_string() + "\n")
    print("modelled time / dense all-reduce on paper-tcp25 (mean over runs, steps and tensors):")
    print(summary.to_string())

    print(f"== replaying {run_ids[0]} through every scheme on {REPLAY_RANKS} gloo ranks (calibrating first if needed)")
    measured = measured_replay(run_ids[0], ranks=REPLAY_RANKS, steps=3)
    write_table(paths.derived_dir() / "reproduce" / "schemes_measured.parquet", measured, {"run": run_ids[0]})
    lines = report(summarize(measured))
    atomic_write_text(paths.derived_dir() / "reproduce" / "schemes_measured.txt", lines + "\n")
    print(lines)
    atomic_write_text(
        paths.derived_dir() / "reproduce" / "speedups.txt",
        speedups(schemes).pivot(index=["workload", "n"], columns="scheme", values="speedup").round(2).to_string()
        + "\n",
    )
    for fig, name in (
        (comm_figs.speedup(speedups(schemes), measured), "fig15_speedup"),
        (comm_figs.model_vs_measured(measured), "model_vs_measured"),
        (comm_figs.wire_size(wire_size_table(runs=run_ids)), "fig17a_wire_size"),
    ):
        style.savefig(fig, name)
        plt.close(fig)
    print(
        f"scheme figures written to {paths.figures_dir()}: fig8_normalized_time, fig15_speedup, "
        "fig17a_wire_size, model_vs_measured"
    )


def _stage_zen(overrides) -> None:
    """Stage 5: Zen's hashing cost (Fig. 16), Theorem 2, COO vs hash-bitmap pull (Fig. 17b), loss parity (Fig. 18)."""
    print(
        "== Zen: hashing cost (Fig. 16), Theorem 2 check, COO vs hash-bitmap pull (Fig. 17b), training parity (Fig. 18)"
    )

    run_ids = _run_ids()
    schemes = evaluate_runs(run_ids, steps=EVALUATE_STEPS)  # the tables stage 3 wrote (recomputed only if stale)
    measured_path = paths.derived_dir() / "reproduce" / "schemes_measured.parquet"
    if not measured_path.exists():
        raise ValueError(
            "the measured replay is missing: run the schemes stage first (`zen-analysis reproduce --only schemes`)"
        )
    measured = read_table(measured_path)
    cost = hashing_cost(numel=1 << 24)
    balance = theorem2_table(run_ids)
    parity = parity_runs(apply_overrides(parity_config("default"), overrides), progress=True)
    out_dir = paths.derived_dir() / "reproduce"
    for name, table in (
        ("hashing_cost", cost),
        ("theorem2_imbalance", balance),
        ("parity_summary", parity_summary(parity)),
    ):
        atomic_write_text(out_dir / f"{name}.txt", table.to_string(index=False) + "\n")
    for fig, name in (
        (zen_figs.hashing_cost(cost), "fig16_hashing_cost"),
        (zen_figs.theorem2(balance), "theorem2_imbalance"),
        (zen_figs.pull_format_speedup(speedups(schemes), measured), "fig17b_pull_format"),
        (zen_figs.loss_parity(parity), "fig18_loss_parity"),
    ):
        style.savefig(fig, name)
        plt.close(fig)
    print(parity_summary(parity).to_string(index=False))
    print(
        f"Zen figures written to {paths.figures_dir()}: fig16_hashing_cost, theorem2_imbalance, fig17b_pull_format, "
        f"fig18_loss_parity; tables in {out_dir}"
    )


def _stage_edit(overrides) -> None:
    """Stage 6: EDiT and A-EDiT against synchronous training and other local SGD, and the penalty ablation."""
    out_dir = paths.derived_dir() / "reproduce"
    print(
        "== EDiT: sync, Post-Local SGD, DiLoCo, EDiT and A-EDiT on the default Llama (4 ranks x 8 micro-batches), "
        "60 steps each; the penalty ablation with injected spikes"
    )

    base = recipes.default()
    base.name = "reproduce-edit"
    base.train.eval_every = 0
    base = apply_overrides(base, overrides)
    runs = compare_methods(
        base,
        progress=True,
        per_method={"edit": EDIT_TUNED, "a_edit": EDIT_TUNED},
        **{"local_sgd.warmup_steps": 10, "local_sgd.interval": 4},
    )
    fig = lsgd_figs.loss_curves(runs)
    style.savefig(fig, "edit_loss_curves")
    plt.close(fig)
    abl_base = recipes.default()
    abl_base.name = "reproduce-ablation"
    abl_base.train.workers_per_rank = 1
    abl_base.train.num_steps = 160
    abl_base = apply_overrides(abl_base, overrides)
    ablation = penalty_ablation(
        abl_base,
        spikes=ABLATION_SPIKES,
        variants={"full penalty": "default", "no penalty": "none"},
        progress=True,
        **ABLATION_SYNC,
    )
    fig = lsgd_figs.penalty_ablation(ablation, spike_steps=ablation.attrs["spike_steps"])
    style.savefig(fig, "edit_penalty_ablation")
    plt.close(fig)
    atomic_write_text(out_dir / "edit_penalty_ablation.txt", ablation.attrs["summary"].to_string(index=False) + "\n")
    print(ablation.attrs["summary"].to_string(index=False))
    table = runs.attrs["summary"]
    atomic_write_text(out_dir / "edit_methods.txt", table.to_string(index=False) + "\n")
    print(table.to_string(index=False))
    _edit_pseudo_gradients(overrides, out_dir)


def _edit_pseudo_gradients(overrides, out_dir) -> None:
    """The edit stage's short version of the guide's "Sparse pseudo-gradients": C1-C3 of top-2% pseudo-gradients
    beside the gradients' (one EDiT run capturing both), and, where the emulated network can be built, dense EDiT
    against EDiT with top-k pseudo-gradients through Zen and AGsparse behind 0.5 Gbit/s links (the full sweep:
    ``zen-analysis bench netlab --set parts=pseudo``)."""
    base = short_base("default", "reproduce-pseudo", steps=28, overrides=overrides)  # 3 outer syncs
    print("== sparse pseudo-gradients: C1-C3 of EDiT's top-2% pseudo-gradients beside the gradients' (4 ranks)")
    claims = pseudo_gradient_claims(base, mode="sent", progress=True, **EDIT_TUNED, **SHORT_SYNC)
    text = claims[["claim", "signal", "workload", "we measure", "holds"]].to_string(index=False)
    atomic_write_text(out_dir / "edit_pseudo_claims.txt", text + "\n")
    print(text)
    ok, why = netlab.available()
    if not ok:
        print(f"== sparse pseudo-gradients on slow links: skipped ({why})")
        return
    print("== sparse pseudo-gradients on 4 x 0.5 Gbit/s links: dense EDiT, EDiT + top-k through Zen and AGsparse")
    sweep = pseudo_gradient_sweep(
        base,
        ranks=[4],
        bandwidths=[0.5],
        variants=["edit", "edit+topk+zen", "edit+topk+agsparse"],
        progress=True,
        **EDIT_TUNED,
        **SHORT_SYNC,
    )
    fig = lsgd_figs.pseudo_gradients(sweep.attrs.pop("metrics"))
    style.savefig(fig, "edit_pseudo_gradients")
    plt.close(fig)
    text = sweep.drop(columns=["run_id"]).round(4).to_string(index=False)
    atomic_write_text(out_dir / "edit_pseudo_gradients.txt", text + "\n")
    print(text)


def _stage_scale(overrides) -> None:
    """Stage 7: the 1024-worker capture and every scheme modelled on it up to n = 1024 (the scale mode)."""
    out = paths.derived_dir() / "reproduce" / "capture_summary_scale.txt"
    atomic_write_text(out, "\n\n".join(_train((SCALE_RUN,), overrides)) + "\n")
    scale, scale_table = scale_mode(reproduce_run_id(SCALE_RUN), max_workers=1024)
    fig = comm_figs.normalized_time(scale, topology="paper-tcp25")
    style.savefig(fig, "fig8_scale_1024")
    plt.close(fig)
    atomic_write_text(paths.derived_dir() / "reproduce" / "schemes_scale_1024.txt", scale_table.to_string() + "\n")
    print(scale_table.to_string())
    print(f"written: {out}, schemes_scale_1024.txt, {paths.figures_dir() / 'fig8_scale_1024.png'}")


STAGES = {
    "train": _stage_train,
    "characterize": _stage_characterize,
    "schemes": _stage_schemes,
    "netlab": _stage_netlab,
    "zen": _stage_zen,
    "paper": stage_paper,
    "edit": _stage_edit,
    "scale": _stage_scale,
}
"""``make reproduce``'s stages in order (Getting started: "What `make reproduce` does"); each reads what the earlier
ones wrote, so ``--only zen`` works on a data root where the train and schemes stages have run. The stages that train
(``train``, ``zen``'s parity runs, ``edit``, ``scale``) take the ``--set`` overrides, applied last to every run they
train; the others train nothing and take none."""


def reproduce(
    overrides: list[str] | tuple[str, ...] = (),
    *,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    full: bool = False,
) -> None:
    """Run the stages of :data:`STAGES` in order: all of them but :data:`FULL_ONLY` (all with ``full``), or
    ``only`` these, less ``skip``."""
    unknown = sorted((set(only) | set(skip)) - set(STAGES))
    if unknown:
        raise ValueError(f"unknown stages {unknown}; the stages are {', '.join(STAGES)}")
    chosen = [name for name in STAGES if (name in only if only else full or name not in FULL_ONLY) and name not in skip]
    left = [name for name in FULL_ONLY if not only and not full and name not in skip]
    if left:
        print(f"=== not running {', '.join(left)} (`make reproduce-full` or `zen-analysis reproduce --full` does)")
    for i, name in enumerate(chosen, 1):
        print(f"=== stage {list(STAGES).index(name) + 1}/{len(STAGES)}: {name} ({i} of {len(chosen)} chosen)")
        stage = STAGES[name]
        before, start = results_pages.snapshot(), time.perf_counter()
        stage(overrides) if inspect.signature(stage).parameters else stage()  # the stages that train take them
        results_pages.record(name, before, time.perf_counter() - start)  # its page's tables and figures, its time
    if results_pages.writes_pages():
        pages = results_pages.write_pages()
        print(f"=== results pages: {', '.join(p.name for p in pages)} in {pages[0].parent} (`make docs` shows them)")
