"""A user's own DDP training measured: ``scripts/ddp_transformers.py`` (torchrun, DDP, a transformers Llama) as
stock DDP, with Zen's natural hook and with top-k + Zen (inline and overlapped), and against what a DDP user already
has (a ``sparse=True`` embedding, torch's fp16/bf16 and PowerSGD hooks), on loopback and behind shaped links
(:func:`ddp_script_sweep`): step time, bytes per step, and for the lossy ones the time to stock DDP's loss."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from zen_analysis.ranks.procs import run_in_lab
from zen_experiments.loss_targets import time_to_quality
from zen_experiments.scripts import SCRIPTS_DIR

__all__ = ["DDP_VARIANTS", "ddp_script_sweep"]

DDP_VARIANTS = {
    "stock": ["--zen", "off"],
    "natural": ["--zen", "natural"],
    "topk": ["--zen", "topk"],
    "topk-overlap": ["--zen", "topk", "--overlap"],
    "stock-sparse": ["--zen", "off", "--sparse-embedding"],
    "natural-sparse": ["--zen", "natural", "--sparse-embedding"],
    "fp16": ["--zen", "off", "--hook", "fp16"],
    "bf16": ["--zen", "off", "--hook", "bf16"],
    **{f"powersgd-{r}": ["--zen", "off", "--hook", "powersgd", "--powersgd-rank", str(r)] for r in (1, 2, 4)},
}
"""What :func:`ddp_script_sweep` can run: name -> the example script's flags (stock DDP; Zen's natural hook; DGC
top-5% + Zen inline; the same on the hook's worker thread; with ``nn.Embedding(sparse=True)``, stock DDP, which
all-gathers its rows on gloo, and the natural hook; torch's fp16 and bf16 compression hooks; torch's PowerSGD at
rank 1, 2 and 4)."""

DDP_DEFAULT_VARIANTS = ("stock", "natural", "topk", "fp16", "powersgd-2")
"""What :func:`ddp_script_sweep` (and ``bench ddp``) runs unless told: Zen, its top-k, and the two stock DDP
compressions a user reaches for first; ``topk-overlap``, the sparse embedding, bf16 and the other PowerSGD ranks are
a ``variants=`` away."""

LOSSLESS_BASELINE = {"natural": "stock", "natural-sparse": "stock-sparse", "stock-sparse": "natural-sparse"}
"""The lossless variants and the run each one's losses must equal up to float noise: the natural hook sums what stock
DDP sums; with a ``sparse=True`` embedding stock DDP (rows all-gathered) and the natural hook (rows summed by Zen)
compare to each other (a sparse embedding trains differently from a dense one under AdamW + SparseAdam). Every other
variant but ``stock`` is lossy and judged by time to stock's loss."""

UNABLE = "unable to run here: "
"""What ``scripts/ddp_transformers.py`` prints before exit 3 for a variant this backend cannot run (PowerSGD on gloo
in more than one bucket); the sweep reports the line instead of failing."""


def example_script() -> Path:
    """``scripts/ddp_transformers.py`` of this checkout (it is an example to read, not part of the package)."""
    script = SCRIPTS_DIR / "ddp_transformers.py"
    if not script.exists():
        raise FileNotFoundError(
            f"{script} is missing: the DDP example lives in the repository's scripts/, run from a clone"
        )
    return script


def ddp_script_sweep(
    *,
    ranks: int = 4,
    bandwidths: Sequence[float | None] = (None, 1.0),
    variants: Sequence[str] = DDP_DEFAULT_VARIANTS,
    steps: int = 12,
    warmup: int = 2,
    rounds: int = 1,
    size: str = "default",
    model: str = "llama",
    batch: int = 8,
    bucket_mb: float | None = None,
    optimizer: str = "adamw",
    lr: float | None = None,
    target_step: int | None = None,
    window: int = 5,
    progress: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The example DDP script per variant (:data:`DDP_VARIANTS`) and link rate (``None``: loopback, one ``torchrun
    --standalone``; a rate: one torchrun per lab node, :func:`~zen_analysis.ranks.procs.run_in_lab`), ``rounds``
    times interleaved, the script's ``model`` (``llama``, ``gpt2``, ``lstm``: with ``size="lstm-words"``;
    ``deepfm``: with ``size="deepfm"``, ``batch`` samples a rank) at the recipe ``size``, every variant with the
    same ``optimizer`` (``sgd``: one plain SGD, the sparse embedding's too), ``lr`` (None: the script's) and
    ``bucket_mb`` (None: the script's, DDP's 25 MB; PowerSGD on gloo one bucket). One row per (network, variant):
    rank 0's median step time and bytes per step (the hooks' measured sparse bytes + the dense all-reduces' ring
    volume; torch's hooks' from their shapes) after ``warmup`` steps, the sum's seconds and the part backward waited
    for (top-k), ``speedup_vs_stock``, the largest per-step loss difference from stock DDP's and, for the lossless
    variants, from their baseline (:data:`LOSSLESS_BASELINE`: float noise only), and against fp32 stock's loss at
    ``target_step`` (default two thirds in, so a slower-learning variant has steps left to get there)
    :func:`time_to_quality`'s columns (medians over rounds). A variant the backend cannot run (the script's "unable
    to run here: ..."; exit 3) is a row whose ``status`` says why, its numbers NaN; the rest say ``ok``. Returns
    that summary and every measured step."""
    target_step, window = _check_options(variants, optimizer, steps, target_step, window)
    script, rows, runs, unable = example_script(), [], {}, {}
    before_out = ["--size", size, "--model", model, "--steps", str(steps), "--batch", str(batch)]
    after_out = ["--optimizer", optimizer, *(["--bucket-mb", str(bucket_mb)] if bucket_mb is not None else [])]
    after_out += ["--lr", str(lr)] if lr is not None else []
    with tempfile.TemporaryDirectory(prefix="zen-ddp-sweep-") as tmp:
        for bw in bandwidths:
            network = "loopback" if bw is None else f"{bw:g} Gbit/s"
            for rnd in range(rounds):
                for variant in variants:
                    if (network, variant) in unable:
                        continue
                    out = Path(tmp) / f"{len(rows)}-{variant}-{rnd}.json"
                    program = [str(script), *before_out, "--out", str(out), *after_out, *DDP_VARIANTS[variant]]
                    if progress:
                        print(f"[ddp sweep] {network}, round {rnd + 1}/{rounds}: {variant}", flush=True)
                    log = Path(tmp) / f"logs-{len(rows)}-{variant}-{rnd}"
                    code, text, tail = _run_script(program, ranks=ranks, bandwidth_gbps=bw, log=log, variant=variant)
                    if code and UNABLE in text:
                        reason = text[text.index(UNABLE) :].splitlines()[0]
                        unable[(network, variant)] = reason
                        if progress:
                            print(f"[ddp sweep] {network}: {variant}: {reason}", flush=True)
                        continue
                    if code:
                        raise RuntimeError(f"{variant} at {network} exited with {code}:\n{tail}")
                    result = json.loads(out.read_text())
                    runs.setdefault((network, variant), []).append(
                        ([s["loss"] for s in result["steps"]], [s["step_s"] for s in result["steps"]])
                    )
                    for s in result["steps"][warmup:]:
                        rows.append({"network": network, "bandwidth_gbps": bw, "variant": variant, "round": rnd, **s})
    steps_df = pd.DataFrame(rows)
    summary = _summary(steps_df, runs, unable, variants, bandwidths, target_step=target_step, window=window)
    return summary, steps_df


def _check_options(
    variants: Sequence[str], optimizer: str, steps: int, target_step: int | None, window: int
) -> tuple[int, int]:
    """:func:`ddp_script_sweep`'s options checked; returns its (target_step, window): by default two thirds in, a
    short run (a notebook's 4 steps) trailing over what it has."""
    unknown = set(variants) - set(DDP_VARIANTS)
    if unknown:
        raise ValueError(f"unknown variants {sorted(unknown)}; choose from {list(DDP_VARIANTS)}")
    if optimizer not in ("adamw", "sgd"):
        raise ValueError(f"optimizer {optimizer!r}: the script trains with adamw or sgd")
    if target_step is None:  # two thirds in; a short run (a notebook's 4 steps) trails over what it has
        target_step = max(0, (2 * steps) // 3 - 1)
        window = min(window, target_step + 1)
    if not window - 1 <= target_step < steps:
        raise ValueError(
            f"target_step {target_step} with {steps} steps and a window of {window}: choose "
            f"{window - 1} <= target_step < {steps} (or more steps)"
        )
    return target_step, window


def _run_script(
    program: list[str], *, ranks: int, bandwidth_gbps: float | None, log: Path, variant: str
) -> tuple[int, str, str]:
    """One run of the script: on loopback one ``torchrun --standalone`` of ``ranks`` processes, behind links one
    torchrun per lab node (every rank's log under ``log``). Returns (exit code, its output, the tail an error shows:
    a failed lab run's logs are copied to a folder of their own, as the sweep's folder goes at its end)."""
    if bandwidth_gbps is None:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={ranks}",
                *program,
            ],
            capture_output=True,
            text=True,
        )
        text = proc.stdout + proc.stderr
        return proc.returncode, text, text[-3000:]
    code = run_in_lab(program, nodes=ranks, bandwidth_gbps=bandwidth_gbps, log_dir=log)
    if not code:
        return code, "", ""
    text = "".join(f"--- {f.name}\n{f.read_text(errors='replace')}" for f in sorted(log.glob("*")))
    kept = Path(tempfile.mkdtemp(prefix=f"zen-ddp-failed-{variant}-"))
    shutil.copytree(log, kept, dirs_exist_ok=True)
    return code, text, f"{text[-3000:]}\n(every rank's log in {kept})"


def _summary(
    steps_df: pd.DataFrame,
    runs: dict,
    unable: dict,
    variants: Sequence[str],
    bandwidths: Sequence[float | None],
    *,
    target_step: int,
    window: int,
) -> pd.DataFrame:
    """:func:`ddp_script_sweep`'s summary: one row per (network, variant) in the order asked for, medians of the
    measured steps, a row per variant the backend could not run (its ``status`` the reason), the loss differences
    from stock and from the lossless baseline (of the first round), the time to stock's loss (medians over rounds)
    and the speedup over stock."""
    if steps_df.empty:
        summary = pd.DataFrame(columns=["network", "variant", "bandwidth_gbps", "step_s_median"])
    else:
        summary = (
            steps_df.groupby(["network", "variant"], sort=False)
            .agg(
                step_s_median=("step_s", "median"),
                bytes_per_step=("bytes", "median"),
                sparse_bytes=("sparse_bytes", "median"),
                dense_bytes=("dense_bytes", "median"),
                sync_s_median=("sync_s", "median"),
                exposed_s_median=("exposed_s", "median"),
                bandwidth_gbps=("bandwidth_gbps", "first"),
            )
            .reset_index()
        )
    summary["status"] = "ok"
    missing = [
        {"network": n, "variant": v, "bandwidth_gbps": None if n == "loopback" else float(n.split()[0]), "status": why}
        for (n, v), why in unable.items()
    ]
    if missing:
        summary = pd.concat([summary, pd.DataFrame(missing)], ignore_index=True)
    order = {v: k for k, v in enumerate(variants)}
    nets = {("loopback" if b is None else f"{b:g} Gbit/s"): k for k, b in enumerate(bandwidths)}
    summary = summary.sort_values(
        ["network", "variant"], key=lambda c: c.map(nets if c.name == "network" else order)
    ).reset_index(drop=True)

    def max_diff(network: str, variant: str, other: str | None) -> float:
        mine, theirs = runs.get((network, variant)), runs.get((network, other))
        if mine is None or theirs is None:
            return float("nan")
        return max(abs(a - b) for a, b in zip(mine[0][0], theirs[0][0]))

    pairs = list(zip(summary["network"], summary["variant"]))
    summary["loss_max_diff_vs_stock"] = [max_diff(n, v, "stock") for n, v in pairs]
    summary["lossless_baseline"] = [LOSSLESS_BASELINE.get(v, "") for _, v in pairs]
    summary["loss_max_diff_vs_baseline"] = [max_diff(n, v, LOSSLESS_BASELINE.get(v)) for n, v in pairs]
    quality = []
    for network, variant in pairs:
        mine, stock = runs.get((network, variant), []), runs.get((network, "stock"), [])
        per_round = [
            time_to_quality(losses, times, s_losses, s_times, target_step, window=window)
            for (losses, times), (s_losses, s_times) in zip(mine, stock)
        ]
        keys = ("target_loss", "time_to_stock_loss_s", "steps_to_stock_loss", "loss_gap_at_equal_time")
        quality.append({k: pd.Series([q[k] for q in per_round], dtype=float).median() for k in keys})
    summary = pd.concat([summary, pd.DataFrame(quality, index=summary.index)], axis=1)
    stock = summary[summary["variant"] == "stock"].set_index("network")["step_s_median"]
    summary["speedup_vs_stock"] = summary["network"].map(stock) / summary["step_s_median"]
    return summary
