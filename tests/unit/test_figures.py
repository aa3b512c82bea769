"""Figures as a reader sees them: every scheme in its one colour in every figure, and no log axis with fewer than
three labelled ticks (the plotting functions on small synthetic tables of the shapes they are given)."""

import itertools

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from zen_analysis.plots import comm, local_sgd_figures, sparsity, style, zen_figures  # noqa: E402

SCHEMES = ["allreduce", "agsparse", "sparcml", "omnireduce", "sparse_ps", "bp_coo", "zen"]
rng = np.random.default_rng(0)


def _schemes_df():
    rows = [
        {
            "topology": "paper-tcp25",
            "scheme": s,
            "seconds": (1.0 if s == "allreduce" else rng.uniform(0.3, 1.6)) * n,
            "run": "r",
            "tensor": t,
            "step": 0,
            "n": n,
            "workload": f"llama {t}",
            "kind": "natural",
        }
        for s, n, t in itertools.product(SCHEMES, (2, 4, 8, 16), ("emb", "top"))
    ]
    return pd.DataFrame(rows)


def _measured():
    rows = []
    for s, step, phase in itertools.product(SCHEMES, (0, 1), ("push", "pull", "local", "total")):
        t = rng.uniform(0.002, 0.05)
        rows.append(
            {
                "scheme": s,
                "step": step,
                "phase": phase,
                "wire_model_s": t * rng.uniform(0.8, 1.2),
                "wire_measured_s": t,
                "wire_measured_median_s": t,
                "bytes_model": 1000,
                "bytes_sent": 1000,
                "bytes_equal": True,
                "lossless": True,
                "phase_measured_s": t,
                "ranks": 4,
                "run": "r",
            }
        )
    return pd.DataFrame(rows)


def _figures():
    speed = pd.DataFrame(
        [{"scheme": s, "speedup": rng.uniform(0.8, 1.9), "workload": w, "n": 8} for s in SCHEMES for w in ("a", "b")]
    )
    sweep = pd.DataFrame(
        [
            {
                "kind": "natural",
                "ranks": 4,
                "bandwidth_gbps": b,
                "scheme": s,
                "speedup_measured": rng.uniform(0.9, 1.5),
                "speedup_modelled": rng.uniform(0.9, 1.5),
            }
            for s in SCHEMES
            for b in (0.5, 1.0)
        ]
    )
    variants = ["dense", "zen", "agsparse", "top-k + zen", "top-k + agsparse"]
    train = pd.DataFrame(
        [
            {
                "variant": v,
                "bandwidth_gbps": b,
                "exchange_s": rng.uniform(0.1, 0.3),
                "tokens_per_s": rng.uniform(900, 1000),
                "compute_s": 0.5,
                "sync_s": 0.4,
                "ranks": 4,
                "workers_per_rank": 1,
            }
            for v in variants
            for b in (0.5, 1.0, 2.5)
        ]
    )
    bench = pd.DataFrame(
        [
            {
                "workload": w,
                "ranks": r,
                "bandwidth_gbps": 1.0,
                "variant": s,
                "tokens_per_s": rng.uniform(900, 3000),
                "compute_s": 0.3,
                "wait_s": 0.05,
                "exchange_s": rng.uniform(0.1, 1.0),
                "rest_s": 0.05,
            }
            for w in ("lstm-words", "deepfm")
            for r in (4, 8, 16)
            for s in SCHEMES
        ]
    )
    sizes = pd.DataFrame(
        [
            {"density": d, "format": f, "relative": d * k, "source": "uniform", "num_partitions": 8}
            for d in (0.01, 0.05, 0.2)
            for f, k in (("coo", 2), ("bitmap", 1.1))
        ]
    )
    cost = pd.DataFrame(
        [
            {
                "sweep": sw,
                "setting": st,
                "density": d,
                "seconds": d * rng.uniform(1, 2),
                "numel": 1 << 20,
                "device": "cpu",
                "num_partitions": 8,
            }
            for sw, st in (("r1", "r1=1x"), ("r1", "r1=2x"), ("k", "k=1"), ("k", "k=3"), ("argsort", "argsort"))
            for d in (0.01, 0.05, 0.1)
        ]
    )
    dens = pd.DataFrame([{"workload": w, "n": n, "gamma": n**0.6} for w in ("a", "b") for n in (2, 4, 8, 16)])
    skew = pd.DataFrame([{"workload": "a", "worker": 0, "num_partitions": p, "skewness": p**0.5} for p in (2, 8, 32)])
    pseudo = pd.DataFrame(
        [
            {
                "variant": v,
                "ranks": n,
                "bandwidth_gbps": b,
                "step": s,
                "loss": 6 - s / (10 + i),
                "elapsed_s": s * (i + 1),
            }
            for i, v in enumerate(("ddp", "edit", "edit+topk+zen"))
            for n, b in ((4, 0.1), (4, 0.5), (8, 0.5))
            for s in range(5)
        ]
    )
    methods = pd.DataFrame(
        [
            {"method": m, "step": s, "loss": 5 - s / 10, "elapsed_s": s}
            for m in ("sync", "diloco", "edit", "a_edit")
            for s in range(5)
        ]
    )
    rates = pd.concat([bench.assign(bandwidth_gbps=b) for b in (0.5, 1.0, 2.5)], ignore_index=True)
    topk = pd.DataFrame(
        [
            {
                "variant": v,
                "ranks": 8,
                "bandwidth_gbps": 1.0,
                "losses": list(6 - np.arange(12) / 10 + k / 20),
                "step_times": [1.0] * 12,
                "target_loss": 5.0,
                "final_loss": 5.0 + k / 20,
                "time_to_loss_s": 12.0 if k == 0 else float("nan"),
            }
            for k, v in enumerate(("allreduce", "topk+zen", "topk+agsparse"))
        ]
    )
    imbalance = pd.DataFrame(
        [
            {
                "workload": f"run{w}: embedding",
                "n": n,
                "push": 1.0 + w / 100,
                "pull": 1.02,
                "mean_nnz": 1000,
                "union_nnz": 4000,
            }
            for w in range(12)
            for n in (2, 4, 8)
        ]
    )  # more workloads than a palette's 10
    timed = pd.DataFrame(
        [
            {"kind": "natural", "ranks": 4, "bandwidth_gbps": b, "scheme": s, "measured_s_median": t / b**k}
            for b in (0.5, 1.0, 2.5, 10.0)
            for s, t, k in (("allreduce", 0.1, 1.0), ("zen", 0.03, 0.4), ("agsparse", 0.035, 0.4), ("auto", 0.03, 0.4))
        ]
    )
    grid = np.geomspace(0.25, 40, 50)
    curve = pd.DataFrame(
        {"allreduce": 0.005 + 0.1 / grid, "zen": 0.02 + 0.01 / grid, "agsparse": 0.018 + 0.015 / grid}, index=grid
    )
    predicted = {"rate_gbps": 6.0, "curve": curve}
    return {
        "crossover": comm.crossover(timed, predicted),
        "fig8": comm.normalized_time(_schemes_df()),
        "fig15": comm.speedup(speed, _measured()),
        "model_vs_measured": comm.model_vs_measured(_measured()),
        "netlab_speedup": comm.measured_speedup_vs_bandwidth(sweep),
        "netlab_training": comm.training_vs_bandwidth(train),
        "train_vs_ranks": comm.training_vs_ranks(bench),
        "train_vs_rate": comm.training_vs_rate(rates),
        "train_time_to_loss": comm.time_to_loss(topk),
        "theorem2": zen_figures.theorem2(imbalance),
        "fig17a": comm.wire_size(sizes),
        "fig16": zen_figures.hashing_cost(cost),
        "fig2b": sparsity.densification(dens),
        "fig3b": sparsity.skewness(skew),
        "edit": local_sgd_figures.loss_curves(methods),
        "pseudo": local_sgd_figures.pseudo_gradients(pseudo),
    }


@pytest.fixture(scope="module")
def figures():
    figs = _figures()
    for fig in figs.values():
        fig.canvas.draw()
    return figs


def _legend_colors(fig):
    """label -> colour of every legend entry on the figure (axes legends and figure legends)."""
    out = {}
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    for leg in legends:
        for handle, text in zip(leg.legend_handles, leg.get_texts()):
            color = (
                handle.get_color() if hasattr(handle, "get_color") and not hasattr(handle, "get_facecolor") else None
            )
            if color is None:
                fc = handle.get_facecolor()
                color = fc[0] if np.ndim(fc) == 2 else fc
            out[text.get_text()] = to_hex(color)
    return out


def test_every_scheme_has_its_one_colour_in_every_figure(figures):
    seen = {}
    for name, fig in figures.items():
        for label, color in _legend_colors(fig).items():
            try:
                expected = style.color(label)
            except KeyError:
                continue
            assert color == expected.lower(), f"{name}: {label} is {color}, not {expected}"
            seen.setdefault(label, set()).add(name)
    assert {"zen", "allreduce", "agsparse"} <= set(seen) and len(seen["zen"]) >= 2
    assert style.color("zen") != style.color("top-k + zen")  # the top-k variant is its lighter shade
    assert len({style.color(s) for s in SCHEMES}) == len(SCHEMES)


def test_no_log_axis_has_fewer_than_three_tick_labels(figures):
    checked = 0
    for name, fig in figures.items():
        for ax in fig.axes:
            for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
                if axis.get_scale() != "log" or not ax.get_visible():
                    continue
                if not any(t.get_visible() for t in axis.get_ticklabels()):
                    continue  # a panel sharing the axis of one that is labelled
                lo, hi = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
                shown = [
                    t.get_text()
                    for t, v in zip(axis.get_ticklabels(), axis.get_ticklocs())
                    if t.get_text() and lo <= v <= hi
                ]
                assert len(shown) >= 3, f"{name}: {which} axis shows {shown}"
                checked += 1
    assert checked >= 8


def test_the_palette_keeps_unknown_names_apart_from_the_schemes():
    p = style.palette(["zen", "my scheme", "other"])
    assert p["zen"] == style.SCHEME_COLORS["zen"] and len(set(p.values())) == 3
    assert not set(p.values()) - {p["zen"]} & set(style.SCHEME_COLORS.values())


def test_fig16_legend_names_each_line_once_without_headers(figures):
    for ax in figures["fig16"].axes:
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert len(labels) == len(set(labels)) and not {"setting", "sweep"} & set(labels), labels


def test_pseudo_gradient_figure_has_a_panel_per_cell_and_a_line_per_variant(figures):
    fig = figures["pseudo"]
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["4 ranks x 0.1 Gbit/s", "4 ranks x 0.5 Gbit/s", "8 ranks x 0.5 Gbit/s"]
    assert all(len(ax.get_lines()) >= 3 for ax in panels)
    assert set(_legend_colors(fig)) == {"ddp", "edit", "edit+topk+zen"}


def test_the_straggler_figure_has_one_bar_per_method_and_scenario():
    from zen_experiments.bench_local_sgd import straggler_scenarios

    table = pd.DataFrame(
        {
            "ranks": [2, 2, 2, 4, 4, 4],
            "method": ["edit", "edit", "a_edit"] * 2,
            "straggler": ["none", "rank 1 x2", "rank 1 x2", "none", "rank 3 x2", "rank 3 x2"],
            "tokens_per_s": [5400.0, 3000.0, 4000.0, 5300.0, 3800.0, 4900.0],
        }
    )
    frame = straggler_scenarios(table)
    assert list(frame["scenario"].unique()) == [
        "2 ranks, straggler: none",
        "2 ranks, straggler: rank 1 x2",
        "4 ranks, straggler: none",
        "4 ranks, straggler: rank 3 x2",
    ]
    fig = local_sgd_figures.throughput(frame)
    heights = sorted(p.get_height() for p in fig.axes[0].patches if p.get_height() > 0)
    assert heights == sorted(table["tokens_per_s"])  # every run one bar, at its own tokens/s
    assert _legend_colors(fig)["edit"] == style.color("edit").lower()
