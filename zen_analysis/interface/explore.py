"""Interactive density explorer (notebook 03): pick a run, tensor, step, number of workers, number of partitions
and granularity; four plots update in place.

The state and the computation live here, so tests drive it without a browser: build a
:class:`DensityExplorer`, set ``explorer.controls[...]`` values (exactly what a user's click does), and read
``explorer.stats`` and ``explorer.figure``. In a notebook, ``display(explorer.widget)`` shows the controls above
the plots.

Plots: (1) density map of the tensor's index space — non-zeros per bin of the flattened index range, one row per
worker plus the union; (2) share of non-zeros per contiguous partition, per worker; (3) densification ratio
gamma vs number of workers, with y = n; (4) histogram of pairwise overlap ratios.

Shape suffixes: K non-zeros of one captured record, W workers (one heatmap row each), B columns of a heatmap (bins along
the tensor, or partitions).
"""

from __future__ import annotations

import time
import warnings
from functools import lru_cache

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.ticker import MaxNLocator

from zen_analysis import paths
from zen_analysis.capture.reader import TraceReader
from zen_analysis.plots import style
from zen_analysis.sparsity.characterize import worker_counts
from zen_analysis.sparsity.metrics import densification_curve, pairwise_overlap_ratios, partition_shares, rows_of

__all__ = ["DensityExplorer", "available_runs", "explore_stats"]

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


MAX_MAP_ROWS = 64
"""Worker rows of the heatmaps at most (more workers are averaged in consecutive groups: a screen shows no more)."""
MAX_OVERLAP_WORKERS = 64
"""Pairwise overlap among the first this many workers (2,016 pairs): all pairs of 1,024 workers are 523,776."""


def _grouped(rows_WB: np.ndarray, max_rows: int) -> tuple[np.ndarray, int]:
    """Rows averaged in consecutive groups so at most ``max_rows`` remain; returns them and the group size."""
    group = -(-rows_WB.shape[0] // max_rows)
    if group == 1:
        return rows_WB, 1
    pad = (-rows_WB.shape[0]) % group
    padded = np.concatenate([rows_WB, np.full((pad, rows_WB.shape[1]), np.nan)]) if pad else rows_WB
    return np.nanmean(padded.reshape(-1, group, rows_WB.shape[1]), axis=1), group


def explore_stats(run: str, tensor: str, step: int, num_workers: int, num_partitions: int, granularity: str) -> dict:
    """Everything the four plots show, for the first ``num_workers`` workers (heatmaps averaged over groups of
    workers beyond :data:`MAX_MAP_ROWS` rows; overlap among the first :data:`MAX_OVERLAP_WORKERS`)."""
    numel, sets = _step_sets(run, tensor, step, granularity)
    workers = list(sets)[:num_workers]
    chosen = [sets[w] for w in workers]
    union = torch.unique(torch.cat(chosen)) if chosen else torch.zeros(0, dtype=torch.long)
    edges = np.linspace(0, numel, NUM_BINS + 1)
    per_worker = np.stack([np.histogram(s.numpy(), bins=edges)[0] / np.diff(edges) for s in chosen])
    worker_map, group = _grouped(per_worker, MAX_MAP_ROWS)
    union_row = np.histogram(union.numpy(), bins=edges)[0] / np.diff(edges)
    shares = np.stack([partition_shares(s, numel, num_partitions) for s in chosen])
    ns = [1] + worker_counts(len(chosen))
    gammas = densification_curve(chosen, ns, numel)
    return {
        "workers": workers,
        "numel": numel,
        "granularity": granularity,
        "density": [s.numel() / numel for s in chosen],
        "union_density": union.numel() / numel,
        "density_map": np.vstack([worker_map, union_row[None]]),
        "map_group": group,
        "shares": shares,
        "shares_map": _grouped(shares, MAX_MAP_ROWS)[0],
        "gamma_n": ns,
        "gamma": gammas,
        "overlaps": pairwise_overlap_ratios(chosen[:MAX_OVERLAP_WORKERS]),
        "overlap_workers": min(len(chosen), MAX_OVERLAP_WORKERS),
    }


def _worker_ticks(ax: plt.Axes, rows: int, group: int, *, union: bool) -> None:
    """Integer worker labels on a heatmap's rows (groups when averaged), the last row named "union"."""
    step = max(1, rows // 8)
    ticks = list(range(0, rows, step))
    labels = [str(t * group) if group == 1 else f"{t * group}-{(t + 1) * group - 1}" for t in ticks]
    if union:
        ticks, labels = ticks + [rows], labels + ["union"]
    ax.set_yticks(ticks, labels)
    ax.grid(False)


def draw(stats: dict, *, title: str = "") -> plt.Figure:
    """The four explorer plots for ``stats`` (from :func:`explore_stats`)."""
    style.apply()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    row_mode = stats.get("granularity") == "row"
    group = stats.get("map_group", 1)
    who = "worker" if group == 1 else f"workers (mean of {group})"
    ax = axes[0, 0]
    m = stats["density_map"]
    im = ax.imshow(
        m, aspect="auto", cmap="magma_r", interpolation="nearest", extent=(0, stats["numel"], m.shape[0] - 0.5, -0.5)
    )
    ax.axhline(m.shape[0] - 1.5, color="0.4", lw=0.8)
    _worker_ticks(ax, m.shape[0] - 1, group, union=True)
    ax.set(
        xlabel="token id (embedding row)" if row_mode else "flat index",
        ylabel=who,
        title="density map of the index space",
    )
    fig.colorbar(im, ax=ax, label="density per bin")
    ax = axes[0, 1]
    shares = stats.get("shares_map", stats["shares"])
    P = shares.shape[1]
    im = ax.imshow(100 * shares, aspect="auto", cmap="rocket_r", vmin=0, interpolation="nearest")
    _worker_ticks(ax, shares.shape[0], group, union=False)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel=f"contiguous partition (of {P})", ylabel=who, title="% of a worker's non-zeros per partition (C3)")
    fig.colorbar(im, ax=ax, label="%")
    ax = axes[1, 0]
    ax.plot(stats["gamma_n"], stats["gamma"], "o-", label="γⁿ = |union| / mean |set|")
    ax.plot(stats["gamma_n"], stats["gamma_n"], "k--", lw=1, label="y = n (no overlap)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(stats["gamma_n"], [str(n) for n in stats["gamma_n"]])
    ax.set(xlabel="workers n", ylabel="densification ratio γⁿ", title="densification (C2)")
    ax.legend()
    ax = axes[1, 1]
    ov = stats["overlaps"][~np.isnan(stats["overlaps"])]
    ax.hist(ov, bins=np.linspace(0, 1, 26), color="C2")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    among = stats.get("overlap_workers", len(stats["workers"]))
    first = f" among the first {among} workers" if among < len(stats["workers"]) else ""
    ax.set(
        xlabel="overlap ratio |A∩B| / min(|A|, |B|)",
        ylabel="worker pairs",
        title=f"pairwise overlap (C1): {len(ov):,} pairs{first}",
    )
    fig.suptitle(title)
    fig.tight_layout()
    return fig


class DensityExplorer:
    """ipywidgets controls + an output area; every user action redraws exactly once.

    A change first brings the dependent controls in line (a new run resets tensor, step and worker count; a new
    tensor its granularities) with every callback muted, then draws once from the final values, so the title always
    matches the controls. While it computes, the controls are disabled and the status line says so."""

    def __init__(self, run: str | None = None) -> None:
        import ipywidgets as w  # deferred: the notebooks extra

        runs = available_runs()
        if not runs:
            raise ValueError("no captured runs under data/traces: train one first (notebook 01 or `make reproduce`)")
        run = run or runs[0]
        self.controls = {
            "run": w.Dropdown(options=runs, value=run, description="run"),
            "tensor": w.Dropdown(description="tensor", layout=w.Layout(width="360px")),
            "step": w.Dropdown(description="step"),
            "num_workers": w.IntSlider(min=2, max=2, value=2, description="workers", continuous_update=False),
            "num_partitions": w.Dropdown(options=[2, 4, 8, 16, 32, 64, 128], value=8, description="partitions"),
            "granularity": w.ToggleButtons(options=["row", "element"], value="row", description="granularity"),
        }
        self.status = w.HTML()
        self.output = w.Output()
        self.widget = w.VBox(
            [
                w.HBox(list(self.controls.values())[:3]),
                w.HBox(list(self.controls.values())[3:]),
                self.status,
                self.output,
            ]
        )
        self.stats: dict = {}
        self.figure: plt.Figure | None = None
        self.title = ""
        self.num_updates = 0
        self.busy = False
        self.history: list[str] = []  # every status shown, in order (tests read it)
        self._syncing = False
        self._natural_granularity = "row"  # the last granularity chosen for a natural tensor (rows by default)
        self._drawn: tuple | None = None
        self._sync("run")
        self.update()
        for name, control in self.controls.items():
            control.observe(lambda change, name=name: self._changed(name), names="value")

    def _changed(self, name: str) -> None:
        if self._syncing:
            return
        if name == "granularity" and "row" in self.controls["granularity"].options:
            self._natural_granularity = self.controls["granularity"].value
        self._sync(name)
        self.update()

    def _sync(self, name: str) -> None:
        """Dependent controls follow ``name``'s new value, callbacks muted (no intermediate draws)."""
        self._syncing = True
        try:
            reader = _reader(self.controls["run"].value)
            if name == "run":
                tensors = reader.tensors()
                kinds = {t: reader.manifest["tensors"][t]["kind"] for t in tensors}
                self.controls["tensor"].options = tensors
                # the natural (embedding) tensor first: bucket names sort before it, and it is what one explores
                self.controls["tensor"].value = next((t for t in tensors if kinds[t] == "natural"), tensors[0])
                W = len(reader.workers())
                self.controls["num_workers"].max = max(2, W)
                self.controls["num_workers"].value = W
            if name in ("run", "tensor"):  # the steps this tensor was captured at (pseudo-gradients: outer syncs)
                steps = reader.steps(self.controls["tensor"].value)
                self.controls["step"].options = steps
                if self.controls["step"].value not in steps:
                    self.controls["step"].value = steps[0]
                kind = reader.manifest["tensors"][self.controls["tensor"].value]["kind"]
                options = ["row", "element"] if kind == "natural" else ["element"]
                self.controls["granularity"].options = options
                # back on an embedding after a bucket (element only): the granularity last chosen for one, rows
                # unless the user picked elements
                self.controls["granularity"].value = self._natural_granularity if kind == "natural" else "element"
        finally:
            self._syncing = False

    def _set_status(self, text: str) -> None:
        self.status.value = text
        self.history.append(text)

    def update(self) -> None:
        """Recompute and redraw for the current control values (once; nothing if they are what is drawn)."""

        from IPython.display import clear_output, display  # deferred: the notebooks extra

        c = {k: v.value for k, v in self.controls.items()}
        key = tuple(c.values())
        if key == self._drawn:
            return
        self.busy = True
        for control in self.controls.values():
            control.disabled = True
        self._set_status("<b>computing…</b> " + _cost_note(c, self._worker_count(c)))
        t0 = time.perf_counter()
        try:
            with self.output, warnings.catch_warnings():  # nothing of a redraw lands in JupyterLab's log console
                warnings.simplefilter("ignore")
                self.stats = explore_stats(
                    c["run"], c["tensor"], c["step"], c["num_workers"], c["num_partitions"], c["granularity"]
                )
                tensor = c["tensor"].removeprefix("model.")
                self.title = (
                    f"{c['run']} · {tensor} · step {c['step']} · {len(self.stats['workers'])} workers "
                    f"· {c['granularity']}"
                )
                if self.figure is not None:
                    plt.close(self.figure)
                self.figure = draw(self.stats, title=self.title)
                plt.close(self.figure)  # shown only through the output area, not again by the inline backend
                clear_output(wait=True)
                display(style.as_image(self.figure))
            self._drawn = key
            self.num_updates += 1
            self._set_status(f"ready ({time.perf_counter() - t0:.1f} s) · {self.title}")
        except Exception as e:
            self._set_status(f"<b>failed</b>: {type(e).__name__}: {e}")
            raise
        finally:
            for control in self.controls.values():
                control.disabled = False
            self.busy = False

    def summary(self) -> dict:
        """What the plots show, in one row: the run, tensor, step and workers drawn, the median density per worker,
        the union's density, gamma at the workers drawn (C2), the mean share of partition 1 (C3) and the mean
        pairwise overlap (C1); a row per run sets two runs side by side (notebook 03)."""
        s, c = self.stats, self.controls
        overlaps = s["overlaps"][~np.isnan(s["overlaps"])]
        return {
            "run": c["run"].value,
            "tensor": c["tensor"].value.removeprefix("model."),
            "step": c["step"].value,
            "workers": len(s["workers"]),
            "density (median)": float(np.median(s["density"])),
            "union density": s["union_density"],
            "gamma": float(s["gamma"][-1]),
            f"partition 1 of {c['num_partitions'].value}": float(s["shares"][:, 0].mean()),
            "overlap (mean)": float(overlaps.mean()) if overlaps.size else float("nan"),
        }

    def _worker_count(self, c: dict) -> int:
        return min(c["num_workers"], len(_reader(c["run"]).workers()))


def _cost_note(c: dict, workers: int) -> str:
    """What the redraw will take, roughly: element granularity over many workers is the slow case."""
    if c["granularity"] == "element" and workers > 128:
        return f"(element granularity over {workers} workers: a few seconds)"
    return ""
