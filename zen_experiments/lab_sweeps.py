"""Experiments measured on the emulated network (:mod:`zen_analysis.ranks.netlab`): every rank behind a shaped link.

* :func:`scheme_sweep`: the measured Fig. 15 — every scheme replaying a run's captured tensors (natural and top-k)
  at several rank counts and link rates; per scheme the end-to-end time (median over repeats of the slowest
  rank), its model (the lab's per-call costs, the link's rate, the fitted local work) and the speedup over dense
  all-reduce, measured and modelled.
* :func:`training_sweep`: the measured analogue of Fig. 11-14 — the default recipe trained in the lab with dense
  all-reduce, Zen, AGsparse and top-k + either, per link rate: median step time split into compute and sync
  (rank 0's time inside ``synchronize``), the exchange alone (sync less the wait for the slowest rank's compute:
  ranks sharing fewer cores finish their micro-batches at different times, and that wait is compute, not the
  network), tokens/s and the per-step losses (equal to a loopback run's: the network changes time, not numbers).
* :func:`node_comparison`: Zen's hierarchical mode on lab nodes of several ranks, against flat Zen and all-reduce.

A user's own DDP training measured on loopback and behind shaped links, :func:`ddp_script_sweep`, is
:mod:`zen_experiments.ddp_sweep` (re-exported here for callers that import it from this module).

Shape suffixes: K non-zeros of one captured record.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Sequence

import pandas as pd
import torch
import torch.distributed as dist

from zen_analysis import paths
from zen_analysis.capture.reader import TraceReader
from zen_analysis.comm import SCHEMES
from zen_analysis.config import ExperimentConfig, apply_overrides
from zen_analysis.derived import variant
from zen_analysis.evaluation.measure import write_summary
from zen_analysis.evaluation.replay import replay_run
from zen_analysis.ranks.netlab import NetLab
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.runs.launch import launch
from zen_analysis.wire.exchange import Exchange
from zen_analysis.zen.sparse_allreduce import NodeGroups, zen_sum, zen_sum_hierarchical
from zen_experiments.ddp_sweep import (  # noqa: F401 - re-exported for callers importing them from here
    DDP_DEFAULT_VARIANTS,
    DDP_VARIANTS,
    ddp_script_sweep,
)

__all__ = ["scheme_sweep", "training_sweep"]

TRAINING_VARIANTS = {
    "dense": {"sync.method": "dense"},
    "zen": {"sync.method": "natural", "sync.scheme": "zen"},
    "agsparse": {"sync.method": "natural", "sync.scheme": "agsparse"},
    "top-k + zen": {"sync.method": "topk", "sync.scheme": "zen"},
    "top-k + agsparse": {"sync.method": "topk", "sync.scheme": "agsparse"},
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
                    "compress": "topk" if cfg.sync.method == "topk" else "none",  # the table's column: top-k or not
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


def _node_replay(
    rank: int, world: int, sets: list, numel: int, ranks_per_node: int, repeats: int, seed: int
) -> list[dict]:
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
    rows = []
    for run_id in run_ids:
        cfg = ExperimentConfig.from_json((paths.run_dir(run_id) / "config.json").read_text())
        lab = pd.read_json(paths.run_dir(run_id) / "metrics.jsonl", lines=True)["loss"].tolist()
        cfg.dist.network, cfg.run_id = "loopback", f"{run_id}-loopback"
        loop = launch(cfg, overwrite=True, progress=progress, echo=False).metrics()["loss"].tolist()
        diff = max((abs(a - b) for a, b in zip(lab, loop)), default=0.0)
        rows.append({"run_id": run_id, "steps": len(lab), "identical": lab == loop, "max_abs_diff": diff})
    return pd.DataFrame(rows)
