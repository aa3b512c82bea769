"""The benchmarks on the emulated network (registered in :mod:`zen_experiments.benchmarks`): ``zen-analysis
bench netlab``, schemes, flat vs hierarchical Zen, training, loopback twins, EDiT and sparse pseudo-gradients, each
rank behind a shaped link (tables in ``data/derived/netlab/``); ``bench lab-check``, the paper-scale model against a
lab whose ranks sleep their GPU compute (:mod:`~zen_experiments.lab_check`; ``data/derived/paper/``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib import pyplot as plt

from zen_analysis import paths, recipes
from zen_analysis.atomic import atomic_write_text
from zen_analysis.config.options import floats, ints, names
from zen_analysis.derived import read_table, write_table
from zen_analysis.plots import comm as comm_figs
from zen_analysis.plots import style
from zen_analysis.plots.local_sgd_figures import pseudo_gradients
from zen_analysis.plots.paper import lab_check_steps
from zen_analysis.ranks import netlab
from zen_analysis.runs.launch import ensure_run
from zen_experiments.bench_options import draw_figure, parse_sets, publish
from zen_experiments.lab_check import FIG11_SCHEMES, LAB_SCHEMES, lab_check, verdict
from zen_experiments.lab_sweeps import loopback_twins, node_comparison, scheme_sweep, training_sweep
from zen_experiments.local_sgd_runs import EDIT_TUNED, slow_network_check
from zen_experiments.pseudo_gradients import SHORT_SYNC, pseudo_gradient_sweep, short_base
from zen_experiments.run_ids import reproduce_run_id

NETLAB_DEFAULTS = {
    "parts": ["schemes", "nodes", "train"],
    "ranks": [4, 8],
    "bandwidths": [0.5, 1.0, 2.5, 10.0],
    "node_bandwidths": [1.0, 0.25],
    "train_bandwidths": [1.0],
    "train_steps": 12,
    "repeats": 10,
    "train_workers_per_rank": 8,
    "edit_bandwidth": 0.5,
    "edit_steps": 40,
    "pseudo_recipe": "default",
    "pseudo_ranks": [4, 8],
    "pseudo_bandwidths": [0.1, 0.5],
    "pseudo_wide_bandwidths": [0.5],
    "pseudo_steps": 40,
    "pseudo_variants": [],
    "pseudo_wide_variants": ["edit", "edit+topk+zen", "edit+topk+agsparse"],
}
"""``bench netlab``'s options and their defaults (``--set key=value``)."""


def bench_netlab(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Measured on the emulated network (root; :mod:`zen_experiments.lab_sweeps`), on the default run (trained
    first if ``make reproduce`` has not): ``schemes``, every scheme replaying its natural and top-k tensors at
    ``ranks`` x ``bandwidths`` (figure ``netlab_speedup``); ``nodes``, flat vs hierarchical Zen vs all-reduce on
    2 nodes x 2 ranks at ``node_bandwidths``; ``train``, the default recipe trained for ``train_steps`` steps per
    variant at ``train_bandwidths`` (figure ``netlab_training``); ``edit``, EDiT on a slow link against its sleep
    emulation; ``pseudo``, sparse pseudo-gradients against dense local SGD (:func:`_netlab_pseudo`).
    ``--set parts=schemes,nodes,train ranks=4,8
    bandwidths=0.5,1,2.5,10 train_bandwidths=1 train_steps=12 repeats=10``. Tables in ``data/derived/netlab/``."""

    ok, why = netlab.available()
    if not ok:
        raise RuntimeError(f"bench netlab needs the network lab, which is unavailable here: {why}")
    defaults = NETLAB_DEFAULTS
    types = {
        "parts": names,
        "ranks": ints,
        "bandwidths": floats,
        "node_bandwidths": floats,
        "train_bandwidths": floats,
        "pseudo_ranks": ints,
        "pseudo_bandwidths": floats,
        "pseudo_wide_bandwidths": floats,
        "pseudo_variants": names,
        "pseudo_wide_variants": names,
    }
    opts = parse_sets("netlab", overrides, defaults, types)
    cfg = recipes.default()
    cfg.run_id = reproduce_run_id("default")
    run = ensure_run(cfg)
    out_dir = paths.derived_dir() / "netlab"
    result: dict = {}
    parts = {
        "schemes": _netlab_schemes,
        "nodes": _netlab_nodes,
        "train": _netlab_train,
        "figures": _netlab_figures,
        "twins": _netlab_twins,
        "edit": _netlab_edit,
        "pseudo": _netlab_pseudo,
    }
    for part, fn in parts.items():  # in this order, whatever the order of --set parts
        if part in opts["parts"]:
            table = fn(run, opts, out_dir)
            if table is not None:
                result[part] = table
    return result


def _netlab_schemes(run: str, opts: dict, out_dir: Path) -> pd.DataFrame:
    """``schemes``: the scheme sweep, its table (printed wide) and figure ``netlab_speedup``."""

    sweep = scheme_sweep(run, ranks=opts["ranks"], bandwidths=opts["bandwidths"], repeats=opts["repeats"])
    cols = [
        "kind",
        "ranks",
        "bandwidth_gbps",
        "scheme",
        "bytes_sent_max_rank",
        "measured_s_median",
        "modelled_s",
        "speedup_measured",
        "speedup_modelled",
        "vs_best",
        "vs_dense",
        "choice",
        "lossless",
    ]
    publish(
        sweep,
        out_dir / "scheme_sweep",
        sweep[cols].round(4),
        opts,
        comm_figs.measured_speedup_vs_bandwidth,
        "netlab_speedup",
    )
    verdict = auto_verdict(sweep)
    print(verdict)

    atomic_write_text(out_dir / "auto_verdict.txt", verdict + "\n")
    return sweep


def auto_verdict(sweep: pd.DataFrame) -> str:
    """The planner's acceptance on a scheme sweep, cell by cell: ``auto``'s measured time against the fastest
    fixed scheme's (target: within 10%) and dense all-reduce's (target: at most 5% slower). Beside it, the chosen
    scheme's own row of the cell over the fastest's (``choice / best``): auto runs the scheme it picked, so where the
    two ratios differ, the difference is the spread between two measurements of one scheme, not the choice."""
    auto = sweep[sweep["scheme"] == "auto"]
    lines = []
    by_choice = 0
    for _, r in auto.iterrows():
        cell = sweep[
            (sweep["kind"] == r["kind"])
            & (sweep["ranks"] == r["ranks"])
            & (sweep["bandwidth_gbps"] == r["bandwidth_gbps"])
        ]
        fixed = cell[cell["scheme"] != "auto"].sort_values("measured_s_median").iloc[0]
        own = cell[cell["scheme"] == r["choice"]]["measured_s_median"]
        choice_vs_best = float(own.iloc[0] / fixed["measured_s_median"]) if len(own) else float("nan")
        by_choice += choice_vs_best <= 1.10
        lines.append(
            f"{r['kind']:>8} {int(r['ranks'])} ranks {r['bandwidth_gbps']:>4g} Gbit/s: auto picked {r['choice']:<10} "
            f"{1e3 * r['measured_s_median']:8.2f} ms; best fixed {fixed['scheme']:<10} "
            f"{1e3 * fixed['measured_s_median']:8.2f} ms; auto / best {r['vs_best']:.2f}, "
            f"auto / dense {r['vs_dense']:.2f}; choice / best {choice_vs_best:.2f}"
        )
    within = int((auto["vs_best"] <= 1.10).sum())
    not_slower = int((auto["vs_dense"] <= 1.05).sum())
    lines.append(
        f"auto within 10% of the best fixed scheme in {within} of {len(auto)} cells; "
        f"at most 5% slower than dense in {not_slower} of {len(auto)}; the chosen scheme's own row within 10% of "
        f"the best in {by_choice} of {len(auto)}"
    )
    return "\n".join(lines)


def _netlab_nodes(run: str, opts: dict, out_dir: Path) -> pd.DataFrame:
    """``nodes``: flat vs hierarchical Zen vs all-reduce at each of ``node_bandwidths``; every sum must be equal."""

    nodes = pd.concat(
        [node_comparison(run, bandwidth_gbps=b, repeats=opts["repeats"]) for b in opts["node_bandwidths"]],
        ignore_index=True,
    )
    text = nodes.round(4).to_string(index=False)
    atomic_write_text(out_dir / "node_comparison.txt", text + "\n")
    print(text)
    if not nodes["equal"].all():
        raise RuntimeError(f"a method's sum differs from all_reduce:\n{text}")
    return nodes


def _netlab_train(run: str, opts: dict, out_dir: Path) -> pd.DataFrame:
    """``train``: the default recipe trained per variant at ``train_bandwidths``; table and figure
    ``netlab_training`` (``-w<N>`` appended unless the recipe's workers per rank)."""

    base = recipes.default()
    workers = opts["train_workers_per_rank"]
    suffix = "" if workers == base.train.workers_per_rank else f"-w{workers}"
    base.name = f"bench-netlab{suffix}"
    base.train.workers_per_rank = workers
    train = training_sweep(base, bandwidths=opts["train_bandwidths"], steps=opts["train_steps"], progress=True)
    dense = train[train["variant"] == "dense"].set_index("bandwidth_gbps")["tokens_per_s"]
    train["speedup"] = train["tokens_per_s"] / train["bandwidth_gbps"].map(dense)  # over dense training's tokens/s
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

    for table, draw, name in (
        ("scheme_sweep", comm_figs.measured_speedup_vs_bandwidth, "netlab_speedup"),
        ("training", comm_figs.training_vs_bandwidth, "netlab_training"),
        ("training-w1", comm_figs.training_vs_bandwidth, "netlab_training-w1"),
    ):
        if (out_dir / f"{table}.parquet").exists():
            fig = draw(read_table(out_dir / f"{table}.parquet"))
            style.savefig(fig, name)
            plt.close(fig)
            print(f"{name} redrawn from {table}.parquet")


def _netlab_twins(run: str, opts: dict, out_dir: Path) -> pd.DataFrame:
    """``twins``: the trainings at 1 Gbit/s again on loopback: the same losses?"""

    suffix = "" if opts["train_workers_per_rank"] == 8 else f"-w{opts['train_workers_per_rank']}"
    trained = read_table(out_dir / f"training{suffix}.parquet")
    twins = loopback_twins(trained.loc[trained["bandwidth_gbps"] == 1.0, "run_id"].tolist())
    text = twins.to_string(index=False)
    atomic_write_text(out_dir / f"loopback_twins{suffix}.txt", text + "\n")
    print(text)
    return twins


def _netlab_edit(run: str, opts: dict, out_dir: Path) -> pd.DataFrame:
    """``edit``: EDiT with every rank behind an ``edit_bandwidth`` link, sleep emulation vs the lab."""

    base = short_base("default", "bench-netlab-edit", steps=opts["edit_steps"])
    check = slow_network_check(base, bandwidth_gbps=opts["edit_bandwidth"], **SHORT_SYNC)
    text = check.round(3).to_string(index=False)
    atomic_write_text(out_dir / "edit_slow_network.txt", text + "\n")
    print(
        f"EDiT with every rank behind a {opts['edit_bandwidth']:g} Gbit/s link: the perturb.bandwidth_gbps sleep "
        f"emulation vs the lab (loopback, no slow link: {check.attrs['loopback_tokens_per_s']:.0f} tokens/s)"
    )
    print(text)
    return check


def _netlab_pseudo(run: str, opts: dict, out_dir: Path) -> pd.DataFrame:
    """``pseudo``: sparse pseudo-gradients (``local_sgd.compress=topk``) against dense EDiT, DiLoCo and DDP, the
    default model with every rank behind ``pseudo_bandwidths`` links, ``pseudo_steps`` steps each (warm-up 4, a sync
    every 8; the short runs' outer optimizer, plain averaging); every variant at 4 ranks (``pseudo_variants``, empty:
    all), ``pseudo_wide_variants`` at ``pseudo_wide_bandwidths`` above 4 (8 ranks on 2 cores: a run takes twice as
    long). Table ``pseudo_gradients``, figure ``netlab_pseudo_gradients`` (loss against time)."""

    recipe = opts["pseudo_recipe"]
    name = "bench-netlab-pseudo" + ("" if recipe == "default" else f"-{recipe}")
    base = short_base(recipe, name, steps=opts["pseudo_steps"])
    settings = {**EDIT_TUNED, **SHORT_SYNC}
    tables = [
        pseudo_gradient_sweep(
            base,
            ranks=[n],
            bandwidths=opts["pseudo_bandwidths"] if n <= 4 else opts["pseudo_wide_bandwidths"],
            variants=(opts["pseudo_variants"] or None) if n <= 4 else opts["pseudo_wide_variants"],
            **settings,
        )
        for n in opts["pseudo_ranks"]
    ]
    metrics = pd.concat([t.attrs.pop("metrics") for t in tables], ignore_index=True)  # concat compares attrs
    table = pd.concat(tables, ignore_index=True)
    shown = table.drop(columns=["run_id"]).round(4)
    name = "pseudo_gradients" + _pseudo_suffix(opts)
    publish(table, out_dir / name, shown, opts)
    draw_figure(pseudo_gradients(metrics), "netlab_" + name)
    return table


def _pseudo_suffix(opts: dict) -> str:
    """The pseudo part's file-name suffix: empty for the default sweep, else its recipe, rank counts and rates
    (another selection of runs does not overwrite the default sweep's table and figure)."""
    keys = ("pseudo_recipe", "pseudo_ranks", "pseudo_bandwidths", "pseudo_wide_bandwidths", "pseudo_steps")
    keys += ("pseudo_variants", "pseudo_wide_variants")
    if all(opts[k] == NETLAB_DEFAULTS[k] for k in keys):
        return ""
    ranks = "-".join(str(n) for n in opts["pseudo_ranks"])
    rates = sorted({*opts["pseudo_bandwidths"], *opts["pseudo_wide_bandwidths"]})
    return f"-{opts['pseudo_recipe']}-r{ranks}-" + "-".join(f"{g:g}g".replace(".", "p") for g in rates)  # no dots


LAB_CHECK_DEFAULTS = {
    "workload": "lstm",
    "ranks": [8, 16],
    "bandwidth": 1.0,
    "schemes": list(LAB_SCHEMES),
    "repeats": 10,
    "steps": 1,
    "rows": 200_000,
    "width": 32,
    "device": "v100",
}
"""``bench lab-check``'s options and their defaults (``--set key=value``)."""
LAB_CHECK_SHOWN = ["ranks", "scheme", "measured_s", "modelled_s", "ratio", "compute_s", "comm_measured_s"]
LAB_CHECK_SHOWN += ["comm_modelled_s", "comm_ratio", "wire_modelled_s", "local_modelled_s", "measured_rank"]
LAB_CHECK_SHOWN += ["modelled_rank", "measured_spread_s", "modelled_netlab_s", "ratio_netlab", "equal"]
LAB_CHECK_SHOWN += ["others_cpu_share"]


def bench_lab_check(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The paper-scale model checked where communication dominates (:func:`~zen_experiments.lab_check.
    lab_check`): every rank sleeps its modelled GPU compute, dilated as its links are, then sums the workload's
    generated gradient with each scheme over ``bandwidth`` Gbit/s links, beside the lab's calibrated model (the
    first run at a rank count calibrates the lab there: minutes more). Writes ``data/derived/paper/lab_check.csv``
    (every column), ``lab_check_phases.csv`` (each phase's collective seconds and calls, measured beside modelled)
    and ``lab_check.txt`` (the verdict, issue 58's acceptance: for every scheme, and for Fig. 11's alone).
    ``--set workload=lstm ranks=8,16 bandwidth=1 schemes=allreduce,zen repeats=10 steps=1 rows=200000 width=32
    device=v100``."""

    opts = parse_sets("lab-check", overrides, LAB_CHECK_DEFAULTS, {"ranks": ints, "schemes": names})
    ok, why = netlab.available()
    if not ok:
        raise RuntimeError(f"bench lab-check runs every rank behind a shaped link: no network lab here ({why})")
    table = lab_check(
        opts["workload"],
        ranks=opts["ranks"],
        bandwidth_gbps=opts["bandwidth"],
        schemes=opts["schemes"],
        repeats=opts["repeats"],
        steps=opts["steps"],
        rows=opts["rows"],
        width=opts["width"],
        device=opts["device"],
    )
    out = paths.derived_dir() / "paper" / "lab_check.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, table.to_csv(index=False))
    first = table.iloc[0]
    stats = ", ".join(
        f"{k} {first[f'paper_{k}']:.3g} -> {first[f'lab_{k}']:.3g}"
        for k in ("density", "overlap_ratio", "gamma", "skewness_ratio")
    )
    setting = (
        f"{first['workload']} ({first['synthetic']}): {first['num_rows']} rows x {first['width']} in the lab, each "
        f"element standing for {first['scale']:.3g} of the paper's; the first rank count's sets, as generated -> in "
        f"the lab: {stats}; links {opts['bandwidth']:g} Gbit/s, dilation {first['dilation']:.3g}; compute "
        f"{first['paper_compute_s']:.3g} s per step at the paper's scale ({first['compute_source']})"
    )
    text = setting + "\n" + verdict(table)
    fig11 = table[table["scheme"].isin(FIG11_SCHEMES)]
    if len(fig11) < len(table):
        text += f"\nthe paper's Fig. 11 schemes alone ({', '.join(FIG11_SCHEMES)}):\n" + verdict(fig11)
    atomic_write_text(out.with_suffix(".txt"), text + "\n")
    phases = table.attrs["phases"]
    atomic_write_text(out.with_name("lab_check_phases.csv"), phases.to_csv(index=False))
    draw_figure(lab_check_steps(table), "lab_check_steps")
    shown = table[LAB_CHECK_SHOWN].round(4)
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(shown.to_string(index=False))
    print(text)
    return {"lab_check": shown, "phases": phases.round(4), "verdict": text}
