"""Experiments measured on the emulated network (:mod:`zen_analysis.ranks.netlab`): every rank behind a shaped link.

* :func:`scheme_sweep`: the measured Fig. 15 — every scheme replaying a run's captured tensors (natural and top-k)
  at several rank counts and link rates; per scheme the end-to-end time (median over repeats of the slowest
  rank), its model (the lab's per-call costs, the link's rate, the fitted local work) and the speedup over dense
  all-reduce, measured and modelled.
* :func:`training_sweep`: the measured analogue of Fig. 11-14 — the default recipe trained in the lab with dense
  all-reduce, Zen, AGsparse and top-k + either, per link rate: median step time split into compute and sync
  (rank 0's time inside ``synchronize``), the exchange alone (sync less the wait for the slowest rank's compute:
  4 ranks share 2 cores here, so ranks finish their micro-batches tens of ms apart), tokens/s and the per-step
  losses (equal to a loopback run's: the network changes time, not numbers).
* :func:`ddp_script_sweep`: a user's own DDP training — ``scripts/ddp_transformers.py`` (torchrun, DDP, a
  transformers Llama) as stock DDP, with Zen's natural hook and with top-k + Zen (inline and overlapped), and against
  what a DDP user already has (a ``sparse=True`` embedding, torch's fp16/bf16 and PowerSGD hooks) — on loopback and
  behind shaped links: step time, bytes per step, and for the lossy ones the time to stock DDP's loss.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from zen_analysis.config import ExperimentConfig

TRAINING_VARIANTS = {
    "dense": {"sync.scheme": "allreduce"},
    "zen": {"sync.scheme": "zen"},
    "agsparse": {"sync.scheme": "agsparse"},
    "top-k + zen": {"sync.scheme": "zen", "sync.compress": "topk"},
    "top-k + agsparse": {"sync.scheme": "agsparse", "sync.compress": "topk"},
}
"""What :func:`training_sweep` trains by default: name -> config overrides."""


def scheme_sweep(
    run: str,
    *,
    ranks: Sequence[int] = (4, 8),
    bandwidths: Sequence[float] = (0.5, 1.0, 2.5, 10.0),
    kinds: Sequence[str] = ("natural", "topk"),
    steps: int = 1,
    repeats: int = 10,
    progress: bool = True,
    tensor: str | None = None,
) -> pd.DataFrame:
    """Replay ``run``'s first captured tensor of each kind in ``kinds`` (or ``tensor``, of its own kind) through
    every scheme, and ``auto`` (the
    planner on the lab's calibrated model, :class:`~zen_analysis.comm.planner.AutoScheme`), at each rank count and
    bandwidth in the lab. One row per (kind, ranks, bandwidth, scheme): the ``measure --out`` columns plus
    ``tensor``, ``kind``, ``speedup_measured`` / ``speedup_modelled`` (dense all-reduce's time / the scheme's), and
    ``vs_best`` (measured time / the fastest fixed scheme's in the cell) and ``vs_dense`` (/ dense all-reduce's)."""
    from zen_analysis.capture.reader import TraceReader
    from zen_analysis.comm import SCHEMES
    from zen_analysis.derived import variant
    from zen_analysis.evaluation.measure import write_summary
    from zen_analysis.evaluation.replay import replay_run

    reader = TraceReader(run)
    tensors = reader.manifest["tensors"]
    frames = []
    if tensor is not None:
        if tensor not in tensors:
            raise ValueError(f"run {reader.run_id} captured no tensor {tensor!r}; it has {sorted(tensors)}")
        kinds = [tensors[tensor]["kind"]]
    chosen = tensor
    for kind in kinds:
        tensor = chosen or next((t for t, info in tensors.items() if info["kind"] == kind), None)
        if tensor is None:
            raise ValueError(f"run {reader.run_id} captured no {kind} tensor; it has {sorted(tensors)}")
        for n in ranks:
            for gbps in bandwidths:
                df = replay_run(
                    run,
                    ranks=n,
                    steps=steps,
                    tensor=tensor,
                    repeats=repeats,
                    bandwidth_gbps=gbps,
                    progress=progress,
                    schemes=[*SCHEMES, "auto"],
                )
                name = variant(
                    "netlab_summary", {"tensor": tensor, "ranks": n, "bw": gbps, "steps": steps, "repeats": repeats}, {}
                )
                out = write_summary(df, reader.derived_dir / f"{name}.parquet")
                dense = out.set_index("scheme").loc["allreduce"]
                out["speedup_measured"] = dense["measured_s_median"] / out["measured_s_median"]
                out["speedup_modelled"] = dense["modelled_s"] / out["modelled_s"]
                fixed = out[out["scheme"] != "auto"]["measured_s_median"].min()
                out["vs_best"] = out["measured_s_median"] / fixed
                out["vs_dense"] = out["measured_s_median"] / dense["measured_s_median"]
                frames.append(out.assign(tensor=tensor, kind=kind))
    return pd.concat(frames, ignore_index=True)


REST = ("clip_s", "optimizer_s", "zero_grad_s", "stats_s")
"""The rest of a step after the sync, as the loop times it: clipping, optimizer, zero_grad, the loss mean."""
PARTS = ("sparse_s", "overlap_s", "hidden_s", *REST)
"""The step's parts :func:`training_sweep` reports beside step, compute, sync and exchange: the sparse path's
seconds (inside the sync), with ``sync.overlap`` the seconds the sums started during backward took and those of
them before backward ended, and :data:`REST`."""


def training_sweep(
    base: ExperimentConfig,
    *,
    bandwidths: Sequence[float] = (1.0,),
    variants: dict[str, dict[str, object]] | None = None,
    steps: int = 12,
    warmup: int = 2,
    rounds: int = 1,
    progress: bool = False,
) -> pd.DataFrame:
    """Train ``base`` for ``steps`` steps in the lab at each bandwidth with each variant (name -> overrides, which
    may set ``train.num_steps`` of their own; default :data:`TRAINING_VARIANTS`), capture off, the variants
    interleaved ``rounds`` times (each round runs every variant once; the machine's drift then falls on all of them
    alike, and a row's times are the median over rounds of each round's medians). One row per
    (bandwidth, variant): medians over the steps after ``warmup`` of rank 0's step, compute, sync (its time in
    ``synchronize``) and exchange (sync less the wait for the slowest rank's compute, ``wait_s``) seconds, the step's
    other parts (:data:`PARTS`; ``rest_s``: the medians of :data:`REST` added), tokens/s at the median step, and the
    per-step losses and step times; for ``auto`` the schemes the planner chose (``choice``) and what its statistics
    cost on rank 0 over the run (``planner_stats_s``)."""
    from zen_analysis.config import apply_overrides
    from zen_analysis.runs.launch import launch

    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    rows = []
    for rnd, gbps in ((r, g) for r in range(rounds) for g in bandwidths):
        for name, sets in (variants or TRAINING_VARIANTS).items():
            cfg = apply_overrides(
                copy.deepcopy(base),
                [
                    "dist.network=netlab",
                    f"dist.bandwidth_gbps={gbps}",
                    f"train.num_steps={steps}",
                    "capture.enabled=false",
                    *[f"{k}={v}" for k, v in sets.items()],
                ],
            )
            cfg.name = f"{base.name}-netlab"
            cfg.run_id = f"{base.name}-netlab-{gbps:g}-{re.sub(r'[^A-Za-z0-9._-]+', '-', name)}"
            result = launch(cfg, overwrite=True, progress=progress, echo=False)
            m = result.metrics()
            timed = m.iloc[warmup:]
            planner = (result.summary or {}).get("planner") or {}  # auto: what it chose, per tensor
            step_s = float(timed["step_s"].median())
            rows.append(
                {
                    "round": rnd,
                    "bandwidth_gbps": gbps,
                    "variant": name,
                    "scheme": cfg.sync.scheme,
                    "compress": cfg.sync.compress,
                    "ranks": cfg.dist.num_ranks,
                    "workers_per_rank": cfg.train.workers_per_rank,
                    "step_s": step_s,
                    "sync_s": float(timed["sync_s"].median()),
                    "exchange_s": float(timed["exchange_s"].median()),
                    "compute_s": float(timed["compute_s"].median()),
                    "tokens_per_s": cfg.global_batch * cfg.train.seq_len / step_s,
                    "losses": m["loss"].tolist(),
                    "step_times": m["step_s"].tolist(),
                    "run_id": cfg.run_id,
                    "choice": ",".join(sorted({d["scheme"] for d in planner.values()})) if planner else "",
                    "planner_stats_s": sum(d["stats_seconds"] for d in planner.values()) if planner else 0.0,
                    **{c: float(timed[c].median()) for c in PARTS if c in timed},
                }
            )
    out = _median_over_rounds(pd.DataFrame(rows))
    out["wait_s"] = out["sync_s"] - out["exchange_s"]  # waiting for the slowest rank's compute, inside the sync
    out["rest_s"] = out[[c for c in REST if c in out]].sum(1)
    return out


def _median_over_rounds(rounds: pd.DataFrame) -> pd.DataFrame:
    """One row per (bandwidth, variant) of :func:`training_sweep`'s rounds: every measured number the median over
    rounds (tokens/s from the median step), the losses, step times and the rest from the first round, ``rounds``
    how many ran."""
    key = ["bandwidth_gbps", "variant"]
    timed = [c for c in ("step_s", "sync_s", "exchange_s", "compute_s", "planner_stats_s", *PARTS) if c in rounds]
    tokens_per_step = rounds["tokens_per_s"] * rounds["step_s"]
    first = rounds.assign(tokens_per_step=tokens_per_step)[rounds["round"] == 0]
    first = first.drop(columns=["round", "tokens_per_s", *timed]).set_index(key)
    out = first.join(rounds.groupby(key, sort=False)[timed].median()).reset_index()
    out["tokens_per_s"] = out.pop("tokens_per_step") / out["step_s"]
    out["rounds"] = int(rounds["round"].max()) + 1
    return out


def time_to_loss(
    losses: Sequence[float], step_times: Sequence[float], target: float, *, window: int = 5
) -> tuple[float, int]:
    """(wall-clock seconds, steps) a run took until the mean of its last ``window`` per-step losses first reached
    ``target``: the sum of its step times up to that step, the first one (set-up, Zen's static sets) included; (nan,
    -1) if it never did. A trailing mean, as one step's loss moves with its batch by more than the schemes differ."""
    for k in range(window - 1, len(losses)):
        if sum(losses[k - window + 1 : k + 1]) / window <= target:
            return float(sum(step_times[: k + 1])), k + 1
    return float("nan"), -1


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


def time_to_quality(
    losses: Sequence[float],
    step_times: Sequence[float],
    stock_losses: Sequence[float],
    stock_times: Sequence[float],
    target_step: int,
    *,
    window: int = 5,
) -> dict[str, float]:
    """A lossy run judged against fp32 stock DDP: ``target_loss`` (stock's mean loss over the ``window`` steps ending
    at ``target_step``), ``time_to_stock_loss_s`` / ``steps_to_stock_loss`` (:func:`time_to_loss` of this run to that
    loss: nan / -1 if it never got there) and ``loss_gap_at_equal_time`` (this run's trailing mean at its last step
    ended within the seconds stock took to ``target_step``, less ``target_loss``: positive is worse; nan if it had not
    done ``window`` steps by then). Both, because a variant faster per step but worse per step can win either way."""
    if not window - 1 <= target_step < len(stock_losses):
        raise ValueError(
            f"target_step {target_step} is outside stock's {len(stock_losses)} steps with a window of {window}: "
            f"choose {window - 1} <= target_step < {len(stock_losses)}"
        )
    target = sum(stock_losses[target_step - window + 1 : target_step + 1]) / window
    seconds, steps = time_to_loss(losses, step_times, target, window=window)
    budget, elapsed, gap = sum(stock_times[: target_step + 1]), 0.0, float("nan")
    for k, t in enumerate(step_times):
        elapsed += t
        if elapsed > budget:
            break
        if k >= window - 1:
            gap = sum(losses[k - window + 1 : k + 1]) / window - target
    return {
        "target_loss": target,
        "time_to_stock_loss_s": seconds,
        "steps_to_stock_loss": steps,
        "loss_gap_at_equal_time": gap,
    }


def example_script() -> Path:
    """``scripts/ddp_transformers.py`` of this checkout (it is an example to read, not part of the package)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "ddp_transformers.py"
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
    import json
    import shutil
    import subprocess
    import sys
    import tempfile

    from zen_analysis.ranks.procs import run_in_lab

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
    script, rows, runs, unable = example_script(), [], {}, {}
    with tempfile.TemporaryDirectory(prefix="zen-ddp-sweep-") as tmp:
        for bw in bandwidths:
            network = "loopback" if bw is None else f"{bw:g} Gbit/s"
            for rnd in range(rounds):
                for variant in variants:
                    if (network, variant) in unable:
                        continue
                    out = Path(tmp) / f"{len(rows)}-{variant}-{rnd}.json"
                    program = [
                        str(script),
                        "--size",
                        size,
                        "--model",
                        model,
                        "--steps",
                        str(steps),
                        "--batch",
                        str(batch),
                        "--out",
                        str(out),
                        "--optimizer",
                        optimizer,
                        *(["--bucket-mb", str(bucket_mb)] if bucket_mb is not None else []),
                        *(["--lr", str(lr)] if lr is not None else []),
                        *DDP_VARIANTS[variant],
                    ]
                    if progress:
                        print(f"[ddp sweep] {network}, round {rnd + 1}/{rounds}: {variant}", flush=True)
                    if bw is None:
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
                        code, text = proc.returncode, proc.stdout + proc.stderr
                        tail = text[-3000:]
                    else:
                        log = Path(tmp) / f"logs-{len(rows)}-{variant}-{rnd}"
                        code = run_in_lab(program, nodes=ranks, bandwidth_gbps=bw, log_dir=log)
                        text = (
                            "".join(f"--- {f.name}\n{f.read_text(errors='replace')}" for f in sorted(log.glob("*")))
                            if code
                            else ""
                        )
                        if code:  # the sweep's folder goes at the end: keep this run's logs where the error says
                            kept = Path(tempfile.mkdtemp(prefix=f"zen-ddp-failed-{variant}-"))
                            shutil.copytree(log, kept, dirs_exist_ok=True)
                            tail = f"{text[-3000:]}\n(every rank's log in {kept})"
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
    return summary, steps_df


def _node_replay(
    rank: int, world: int, sets: list, numel: int, ranks_per_node: int, repeats: int, seed: int
) -> list[dict]:
    import time

    import torch
    import torch.distributed as dist

    from zen_analysis.wire.exchange import Exchange
    from zen_analysis.zen.sparse_allreduce import NodeGroups, zen_sum, zen_sum_hierarchical

    gen = torch.Generator().manual_seed(rank)
    x = torch.zeros(numel)
    idx = torch.as_tensor(sets[rank], dtype=torch.long)
    x[idx] = torch.randint(1, 5, (idx.numel(),), generator=gen).float()  # integers: every sum bit for bit
    ref = x.clone()
    dist.all_reduce(ref)
    groups = NodeGroups(ranks_per_node)
    flat = Exchange()
    methods = {
        "allreduce": lambda y: (dist.all_reduce(y), y)[1],
        "zen": lambda y: zen_sum(y, flat, seed=seed),
        "zen hierarchical, dense in node": lambda y: zen_sum_hierarchical(y, groups, seed=seed, node_sum="dense"),
        "zen hierarchical, sparse in node": lambda y: zen_sum_hierarchical(y, groups, seed=seed, node_sum="sparse"),
    }
    rows = []
    for name, fn in methods.items():
        for rep in range(repeats + 2):  # 2 warm-up runs
            y = x.clone()
            dist.barrier()
            t0 = time.perf_counter()
            out = fn(y)
            seconds = time.perf_counter() - t0
            if rep >= 2:
                rows.append(
                    {"method": name, "rep": rep, "rank": rank, "seconds": seconds, "equal": bool(torch.equal(out, ref))}
                )
    return rows


def node_comparison(
    run: str,
    *,
    nodes: int = 2,
    ranks_per_node: int = 2,
    bandwidth_gbps: float = 1.0,
    step: int | None = None,
    tensor: str | None = None,
    repeats: int = 10,
    seed: int = 0,
) -> pd.DataFrame:
    """Zen's hierarchical mode where it belongs: ``nodes`` lab nodes of ``ranks_per_node`` ranks (loopback inside a
    node, a ``bandwidth_gbps`` link per node), rank r holding worker r's captured index set of ``tensor`` (default
    the natural one) at ``step`` (default the first captured) with integer values. Dense all-reduce, flat Zen and
    hierarchical Zen (the node's sum split over its ranks, Zen across nodes, gathered in the node; the node's part
    dense, as the paper on NVLink, or by Zen's own push and pull), each end to end:
    one row per method with the median over repeats of the slowest rank, the speedup over all-reduce and whether
    every rank's result equals ``all_reduce`` bit for bit."""
    from zen_analysis.capture.reader import TraceReader
    from zen_analysis.ranks.netlab import NetLab
    from zen_analysis.ranks.procs import fork_launch

    reader = TraceReader(run)
    tensors = reader.manifest["tensors"]
    tensor = tensor or next(t for t, info in tensors.items() if info["kind"] == "natural")
    world = nodes * ranks_per_node
    step = reader.steps(tensor)[0] if step is None else step
    recs = sorted(reader.records(tensor=tensor, step=step), key=lambda r: r.worker)[:world]
    if len(recs) < world:
        raise ValueError(f"run {reader.run_id} has {len(recs)} workers at step {step}; need {world}")
    numel = int(tensors[tensor]["numel"])
    with NetLab(world, bandwidth_gbps, ranks_per_node=ranks_per_node) as lab:
        results = fork_launch(
            _node_replay,
            world,
            [r.indices_K.long() for r in recs],
            numel,
            ranks_per_node,
            repeats,
            seed,
            lab=lab,
            timeout_s=600,
        )
    raw = pd.DataFrame([row for rows in results for row in rows])
    per_rep = raw.groupby(["method", "rep"]).agg(seconds=("seconds", "max"), equal=("equal", "all"))
    out = per_rep.groupby("method").agg(measured_s_median=("seconds", "median"), equal=("equal", "all")).reset_index()
    out["speedup"] = float(out.set_index("method").loc["allreduce", "measured_s_median"]) / out["measured_s_median"]
    return out.assign(
        nodes=nodes, ranks_per_node=ranks_per_node, bandwidth_gbps=bandwidth_gbps, numel=numel, tensor=tensor
    )


def loopback_twins(run_ids: Sequence[str], *, progress: bool = False) -> pd.DataFrame:
    """Each finished lab run of ``run_ids`` trained again with the same config on loopback (run id
    ``<id>-loopback``): whether the per-step losses are identical (the network changes time, not numbers), and the
    largest difference."""
    from zen_analysis import paths
    from zen_analysis.config import ExperimentConfig
    from zen_analysis.runs.launch import launch

    rows = []
    for run_id in run_ids:
        cfg = ExperimentConfig.from_json((paths.run_dir(run_id) / "config.json").read_text())
        lab = pd.read_json(paths.run_dir(run_id) / "metrics.jsonl", lines=True)["loss"].tolist()
        cfg.dist.network, cfg.run_id = "loopback", f"{run_id}-loopback"
        loop = launch(cfg, overwrite=True, progress=progress, echo=False).metrics()["loss"].tolist()
        diff = max((abs(a - b) for a, b in zip(lab, loop)), default=0.0)
        rows.append({"run_id": run_id, "steps": len(lab), "identical": lab == loop, "max_abs_diff": diff})
    return pd.DataFrame(rows)
