"""Interactive density explorer (notebook 03): pick a run, tensor, step, number of workers, number of partitions
and granularity; four plots update in place.

The state and the computation live here, so tests drive it without a browser: build a
:class:`DensityExplorer`, set ``explorer.controls[...]`` values (exactly what a user's click does), and read
``explorer.stats`` and ``explorer.figure``. In a notebook, ``display(explorer.widget)`` shows the controls above
the plots.

Plots: (1) density map of the tensor's index space — non-zeros per bin of the flattened index range, one row per
worker plus the union; (2) share of non-zeros per contiguous partition, per worker; (3) densification ratio
gamma vs number of workers, with y = n; (4) histogram of pairwise overlap ratios.
"""

from __future__ import annotations

from functools import lru_cache

import matplotlib.pyplot as plt
import numpy as np
import torch

from zen_analysis import paths
from zen_analysis.capture.traces import TraceReader
from zen_analysis.plots import style
from zen_analysis.sparsity.characterize import worker_counts
from zen_analysis.sparsity.metrics import densification_ratio, pairwise_overlap_ratios, partition_shares, rows_of

NUM_BINS = 128


def available_runs() -> list[str]:
    """Run ids with a trace manifest under data/traces."""
    root = paths.traces_dir()
    return sorted(d.name for d in root.glob("*") if (d / "manifest.json").exists()) if root.is_dir() else []


@lru_cache(maxsize=8)
def _reader(run: str) -> TraceReader:
    return TraceReader(run)


@lru_cache(maxsize=32)
def _step_sets(run: str, tensor: str, step: int, granularity: str) -> tuple[int, dict[int, torch.Tensor]]:
    """(numel at this granularity, worker -> index set) of one tensor at one step."""
    reader = _reader(run)
    info = reader.manifest["tensors"][tensor]
    row = granularity == "row"
    numel = int(info["shape"][0]) if row else int(info["numel"])
    sets = {}
    for rec in reader.records(tensor=tensor, step=step, with_values=False):
        sets[rec.worker] = rows_of(rec.indices_K, int(info["shape"][-1])) if row else rec.indices_K.long()
    return numel, dict(sorted(sets.items()))


def explore_stats(run: str, tensor: str, step: int, num_workers: int, num_partitions: int, granularity: str) -> dict:
    """Everything the four plots show, for the first ``num_workers`` workers."""
    numel, sets = _step_sets(run, tensor, step, granularity)
    workers = list(sets)[:num_workers]
    chosen = [sets[w] for w in workers]
    union = torch.unique(torch.cat(chosen)) if chosen else torch.zeros(0, dtype=torch.long)
    edges = np.linspace(0, numel, NUM_BINS + 1)
    density_map = np.stack([np.histogram(s.numpy(), bins=edges)[0] / np.diff(edges) for s in chosen + [union]])
    shares = np.stack([partition_shares(s, numel, num_partitions) for s in chosen])
    ns = [1] + worker_counts(len(chosen))
    gammas = [densification_ratio(chosen[:n]) for n in ns]
    return {
        "workers": workers,
        "numel": numel,
        "density": [s.numel() / numel for s in chosen],
        "union_density": union.numel() / numel,
        "density_map": density_map,
        "shares": shares,
        "gamma_n": ns,
        "gamma": gammas,
        "overlaps": pairwise_overlap_ratios(chosen),
    }


def draw(stats: dict, *, title: str = "") -> plt.Figure:
    """The four explorer plots for ``stats`` (from :func:`explore_stats`)."""
    style.apply()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    ax = axes[0, 0]
    im = ax.imshow(stats["density_map"], aspect="auto", cmap="magma_r", interpolation="nearest",
                   extent=(0, stats["numel"], len(stats["workers"]) + 0.5, -0.5))  # fmt: skip
    ax.set(xlabel="flat index", ylabel="worker (last row: union)", title="density map of the index space")
    fig.colorbar(im, ax=ax, label="density per bin")
    ax = axes[0, 1]
    P = stats["shares"].shape[1]
    im = ax.imshow(100 * stats["shares"], aspect="auto", cmap="rocket_r", vmin=0, interpolation="nearest")
    ax.set(xlabel=f"contiguous partition (of {P})", ylabel="worker", title="% of non-zeros per partition")
    fig.colorbar(im, ax=ax, label="%")
    ax = axes[1, 0]
    ax.plot(stats["gamma_n"], stats["gamma"], "o-", label="γⁿ")
    ax.plot(stats["gamma_n"], stats["gamma_n"], "k--", lw=1, label="y = n")
    ax.set(xlabel="workers n", ylabel="densification ratio", title="densification")
    ax.legend()
    ax = axes[1, 1]
    ov = stats["overlaps"][~np.isnan(stats["overlaps"])]
    ax.hist(ov, bins=np.linspace(0, 1, 26), color="C2")
    ax.set(xlabel="overlap ratio", ylabel="worker pairs", title=f"pairwise overlap ({len(ov)} pairs)")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


class DensityExplorer:
    """ipywidgets controls + an output area redrawn on every change."""

    def __init__(self, run: str | None = None) -> None:
        import ipywidgets as w

        runs = available_runs()
        if not runs:
            raise ValueError("no captured runs under data/traces: train one first (notebook 01 or `make reproduce`)")
        run = run or runs[0]
        self.controls = {
            "run": w.Dropdown(options=runs, value=run, description="run"),
            "tensor": w.Dropdown(description="tensor"),
            "step": w.Dropdown(description="step"),
            "num_workers": w.IntSlider(min=2, max=2, value=2, description="workers"),
            "num_partitions": w.Dropdown(options=[2, 4, 8, 16, 32, 64, 128], value=8, description="partitions"),
            "granularity": w.ToggleButtons(options=["row", "element"], value="row", description="granularity"),
        }
        self.output = w.Output()
        self.widget = w.VBox([w.HBox(list(self.controls.values())[:3]), w.HBox(list(self.controls.values())[3:]), self.output])
        self.stats: dict = {}
        self.figure: plt.Figure | None = None
        self.num_updates = 0
        self._syncing = False
        self._on_run()
        self.controls["run"].observe(lambda _: self._on_run(), names="value")
        self.controls["tensor"].observe(lambda _: self._on_tensor(), names="value")
        for name in ("step", "num_workers", "num_partitions", "granularity"):
            self.controls[name].observe(lambda _: self.update(), names="value")

    def _on_run(self) -> None:
        reader = _reader(self.controls["run"].value)
        self._syncing = True
        self.controls["tensor"].options = reader.tensors()
        self.controls["tensor"].value = reader.tensors()[0]
        self.controls["step"].options = reader.steps()
        self.controls["step"].value = reader.steps()[0]
        W = len(reader.workers())
        self.controls["num_workers"].max = max(2, W)
        self.controls["num_workers"].value = W
        self._syncing = False
        self._on_tensor()

    def _on_tensor(self) -> None:
        reader = _reader(self.controls["run"].value)
        kind = reader.manifest["tensors"][self.controls["tensor"].value]["kind"]
        self._syncing = True
        options = ["row", "element"] if kind == "natural" else ["element"]
        keep = self.controls["granularity"].value
        self.controls["granularity"].options = options
        self.controls["granularity"].value = keep if keep in options else options[0]
        self._syncing = False
        self.update()

    def update(self) -> None:
        """Recompute and redraw for the current control values."""
        if self._syncing:
            return
        from IPython.display import clear_output, display

        c = {k: v.value for k, v in self.controls.items()}
        self.stats = explore_stats(c["run"], c["tensor"], c["step"], c["num_workers"], c["num_partitions"], c["granularity"])
        title = f"{c['run']} · {c['tensor']} · step {c['step']} · {len(self.stats['workers'])} workers · {c['granularity']}"
        if self.figure is not None:
            plt.close(self.figure)
        self.figure = draw(self.stats, title=title)
        plt.close(self.figure)  # shown only through the output area, not again by the inline backend
        with self.output:
            clear_output(wait=True)
            display(self.figure)
        self.num_updates += 1
