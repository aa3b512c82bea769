"""The benchmarks against what a DDP user already runs (``zen-analysis bench ddp | exchange``; registered in
:mod:`zen_experiments.benchmarks`): a user's own DDP script with stock DDP's paths and Zen's hooks, and
a captured run's embedding rows summed by stock DDP's sparse all-gather and by the schemes, both behind the
network lab's shaped links (loopback where the lab cannot be built). Tables in ``data/derived/ddp/`` and
``data/derived/exchange/``."""

from __future__ import annotations

import pandas as pd

from zen_analysis import paths
from zen_analysis.atomic import atomic_write_text
from zen_analysis.config.options import flag, floats, ints, names
from zen_analysis.derived import write_table
from zen_analysis.ranks import netlab
from zen_experiments.bench_options import parse_sets, publish
from zen_experiments.exchange_replay import BUSIEST, EXCHANGE_SCHEMES, exchange_sweep
from zen_experiments.lab_sweeps import DDP_DEFAULT_VARIANTS, ddp_script_sweep


def _bandwidths(value: str) -> list[float | None]:
    """``loopback,1`` -> ``[None, 1.0]`` (None: loopback, no shaped link)."""
    return [None if v == "loopback" else float(v) for v in value.split(",")]


def bench_ddp(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """A user's own DDP training (``scripts/ddp_transformers.py``, the default Llama under torchrun) as stock DDP,
    with Zen's natural hook, with top-k + Zen, and with what a DDP user already has (torch's fp16 / bf16 / PowerSGD
    hooks, a ``sparse=True`` embedding) (:func:`~zen_experiments.lab_sweeps.ddp_script_sweep`): median step
    time and bytes per step of rank 0, on loopback and, as root, behind 1 Gbit/s links (``model=lstm
    size=lstm-words``: the paper's word-level LSTM in plain PyTorch instead, in a table of its own,
    ``ddp_script-lstm-lstm-words``; other ranks or batch add ``-r<ranks>-b<batch>``); the lossy variants' time to
    stock DDP's loss at ``target_step`` and their loss gap at stock's time, the lossless ones' loss difference
    from their baseline. ``--set ranks=4 bandwidths=loopback,1 steps=12 rounds=2 bucket_mb=25 optimizer=sgd
    lr=0.1 target_step=7 variants=...`` (default :data:`~zen_experiments.lab_sweeps.DDP_DEFAULT_VARIANTS`,
    all of ``DDP_VARIANTS`` selectable). Table in ``data/derived/ddp/ddp_script.txt``."""

    defaults = {
        "ranks": 4,
        "bandwidths": [None, 1.0],
        "steps": 12,
        "rounds": 2,
        "warmup": 2,
        "batch": 8,
        "size": "default",
        "model": "llama",
        "variants": list(DDP_DEFAULT_VARIANTS),
        "bucket_mb": None,  # the script's: DDP's 25 MB, PowerSGD on gloo in one bucket
        "optimizer": "adamw",
        "lr": None,  # the script's
        "target_step": None,  # two thirds into the run
        "window": 5,
    }
    types = {"bandwidths": _bandwidths, "variants": names, "bucket_mb": float, "lr": float, "target_step": int}
    opts = parse_sets("ddp", overrides, defaults, types)
    if any(b is not None for b in opts["bandwidths"]):
        ok, why = netlab.available()
        if not ok:
            print(f"no network lab here ({why}): loopback only")
            opts["bandwidths"] = [b for b in opts["bandwidths"] if b is None]
    summary, steps = ddp_script_sweep(**opts)
    out_dir = paths.derived_dir() / "ddp"
    stamp = {"options": {k: str(v) for k, v in opts.items()}}
    # the default workload keeps its table's name; another model or size writes a table of its own beside it
    stem = "ddp_script" + (
        "" if (opts["model"], opts["size"]) == ("llama", "default") else f"-{opts['model']}-{opts['size']}"
    )
    if (opts["ranks"], opts["batch"]) != (defaults["ranks"], defaults["batch"]):  # another shape: a table of its own
        stem += f"-r{opts['ranks']}-b{opts['batch']}"
    write_table(out_dir / f"{stem}.parquet", summary, stamp)
    write_table(out_dir / f"{stem}_steps.parquet", steps, stamp)
    cols = [
        "network",
        "variant",
        "step_s_median",
        "speedup_vs_stock",
        "bytes_per_step",
        "sync_s_median",
        "exposed_s_median",
        "loss_max_diff_vs_stock",
        "lossless_baseline",
        "loss_max_diff_vs_baseline",
        "target_loss",
        "time_to_stock_loss_s",
        "loss_gap_at_equal_time",
        "status",
    ]
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_colwidth", 400):
        text = summary[cols].round(4).to_string(index=False)
    atomic_write_text(out_dir / f"{stem}.txt", text + "\n")
    print(text)
    return {"ddp": summary}


def bench_exchange(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The gradient exchange alone against stock DDP's own sparse path
    (:func:`~zen_experiments.exchange_replay.exchange_sweep`): a captured run's rank-steps of its embedding
    (each lab rank one real rank's rows per step) summed by stock DDP's sparse all-reduce and by the toolkit's row sums,
    each rank behind a shaped link, measured beside the lab's model. ``sparse_ps`` is the users' contiguous row
    ownership (modded-nanogpt's sparse bigram gradient comms, with the owners' sums pulled back as a replicated
    optimizer needs them), labelled so; every owner scheme's row has the busiest rank's rows
    (:func:`~zen_experiments.exchange_replay.busiest_rows`). ``--set run=reproduce-lstm-words ranks=4,8,16
    bandwidths=1 schemes=stock,zen,sparse_ps,agsparse,sparcml repeats=12 workers_per_rank=8 model=true``. Table in
    ``data/derived/exchange/<run>.txt``."""

    defaults = {
        "run": "reproduce-lstm-words",
        "ranks": [4, 8, 16],
        "bandwidths": [1.0],
        "schemes": list(EXCHANGE_SCHEMES),
        "repeats": 12,
        "workers_per_rank": None,  # the run's: one training rank's micro-batches
        "model": True,
    }
    types = {"ranks": ints, "bandwidths": floats, "schemes": names, "workers_per_rank": int, "model": flag}
    opts = parse_sets("exchange", overrides, defaults, types)
    ok, why = netlab.available()
    if not ok:
        raise RuntimeError(f"bench exchange runs every rank behind a shaped link: no network lab here ({why})")
    df = exchange_sweep(**opts)
    cols = ["ranks", "bandwidth_gbps", "label", "measured_s", "modelled_s", "lead_vs_stock"]
    cols += ["lead_vs_stock_modelled", "written_bytes", "rows_mean", "rows_union", "max_diff_vs_stock"]
    cols += [*BUSIEST, "pull_imbalance", "rows_match_model"]
    rounded = {"measured_s": 4, "modelled_s": 4, "lead_vs_stock": 2, "lead_vs_stock_modelled": 2}
    shown = df[cols].round(rounded | {"pull_imbalance": 2})
    publish(df, paths.derived_dir() / "exchange" / str(opts["run"]), shown, {k: str(v) for k, v in opts.items()})
    return {"exchange": df}
