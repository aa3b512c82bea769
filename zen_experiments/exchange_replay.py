"""The gradient exchange alone, against stock DDP's own sparse path: a captured run's embedding rows replayed through
each scheme's row sum (:meth:`~zen_analysis.comm.schemes.base.CommScheme.sum_rows`, what Zen's DDP drop-in sums a
sparse embedding with) and through what stock DDP does with an ``nn.Embedding(sparse=True)`` gradient on gloo
(``dist.all_reduce`` of the sparse COO tensor: three ring all-gathers,
:func:`~zen_analysis.pricing.traffic.ddp_sparse`), every rank behind a shaped link of the network lab, measured beside
the model.

Each lab rank holds one *rank-step* of the run: the union of the micro-batches one training rank summed at one
captured step (``workers_per_rank`` of the trace's workers), with their summed captured values. A run captured on R
training ranks lends its other captured steps to more lab ranks: lab rank r holds training rank ``r % R`` at the
``r // R``-th captured step. So each lab rank's rows are what one real rank sends per step (the lstm-words recipe:
8 micro-batches x 4 x 128 tokens, about 1% of its table, near the 1.13% the Zen paper gives per GPU for its LSTM),
while ranks of different steps overlap as batches of a later step do.

Shape suffixes: K non-zeros (a captured record's elements, or one rank's distinct rows), D values per row (the table's
width).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from zen_analysis.capture.reader import TraceReader
from zen_analysis.comm import SCHEMES, build_scheme
from zen_analysis.evaluation.calibrate import netlab
from zen_analysis.evaluation.evaluate import stock_seconds
from zen_analysis.pricing.cost import total_seconds
from zen_analysis.ranks.netlab import NetLab
from zen_analysis.ranks.procs import fork_launch

EXCHANGE_SCHEMES = ("stock", "zen", "agsparse", "sparcml")
"""What :func:`exchange_sweep` replays by default: stock DDP's sparse all-reduce and the toolkit's row sums."""


def rank_step_rows(run, world: int, rank: int, *, tensor: str | None = None, workers_per_rank: int | None = None):
    """Lab rank ``rank`` of ``world``'s rows of ``run``'s natural tensor (or ``tensor``, a 2-D table): returns
    ``(rows_K, values_KD, num_rows, width)``, the distinct rows of one training rank's micro-batches at one captured
    step (see the module docstring) and their values summed over those micro-batches."""

    reader = TraceReader(run)
    tensors = reader.manifest["tensors"]
    name = tensor or next((t for t, i in tensors.items() if i["kind"] == "natural"), None)
    if name not in tensors:
        raise ValueError(f"run {reader.run_id} has no captured tensor {name!r}; it has {sorted(tensors)}")
    shape = tensors[name].get("shape") or []
    if len(shape) != 2:
        raise ValueError(f"{name} of run {reader.run_id} has shape {shape}: the row replay needs a 2-D table")
    num_rows, width = int(shape[0]), int(shape[1])
    per_rank = workers_per_rank or int(reader.manifest.get("workers_per_rank", 1))
    trained = int(reader.manifest["num_workers"]) // per_rank
    if trained < 1:
        raise ValueError(f"run {reader.run_id} has {reader.manifest['num_workers']} workers: fewer than {per_rank}")
    steps = reader.steps(name)
    step_index, source = divmod(rank, trained)
    if step_index >= len(steps):
        raise ValueError(
            f"run {reader.run_id} holds {len(steps)} captured steps x {trained} ranks = {len(steps) * trained} "
            f"rank-steps of {per_rank} workers; {world} lab ranks need {world}: fewer ranks or workers_per_rank"
        )
    workers = range(source * per_rank, (source + 1) * per_rank)
    summed, held = torch.zeros(num_rows * width), []
    for rec in reader.records(tensor=name, step=steps[step_index]):
        if rec.worker in workers:
            summed.index_add_(0, rec.indices_K.long(), rec.values_K.float())
            held.append(rec.indices_K.long() // width)
    if not held:
        raise ValueError(f"run {reader.run_id} captured no worker of {list(workers)} at step {steps[step_index]}")
    rows_K = torch.unique(torch.cat(held))
    return rows_K, summed.view(num_rows, width)[rows_K].clone(), num_rows, width


def written_bytes() -> int:
    """Bytes this process has passed to write-like system calls so far (gloo's sockets included; Linux)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return -1


def _exchange_rank(rank: int, world: int, run, tensor, per_rank, schemes, repeats) -> dict:
    """One lab rank: its rank-step (:func:`rank_step_rows`) through :func:`sum_every_way`, with its rows."""
    rows_K, values_KD, num_rows, width = rank_step_rows(run, world, rank, tensor=tensor, workers_per_rank=per_rank)
    return {"_rows": rows_K, **sum_every_way(rows_K, values_KD, num_rows, width, schemes, repeats)}


def sum_every_way(rows_K, values_KD, num_rows: int, width: int, schemes, repeats: int) -> dict:
    """On every rank of the default group: each of ``schemes`` sums this rank's ``rows_K`` / ``values_KD`` of a
    ``num_rows`` x ``width`` table ``repeats`` times (a barrier before each), ``stock`` first (stock DDP's path:
    ``dist.all_reduce`` of the sparse COO tensor), the others' sums checked against stock's (the same rows; the
    values' largest difference kept). Per scheme: ``median_s`` (after two warm-up repeats), ``written_bytes`` (what
    the process wrote in the last repeat, gloo's headers too), ``bytes_sent`` (the scheme's own count; stock's:
    the written bytes), ``max_diff_vs_stock`` and ``phases_s``."""

    out, reference = {}, None
    for name in sorted(schemes, key=lambda n: n != "stock"):
        times, written, phases = [], -1, {}
        if name == "stock":
            grad = torch.sparse_coo_tensor(rows_K[None], values_KD, (num_rows, width), check_invariants=True)
            for _ in range(repeats):
                summed = grad.clone()
                dist.barrier()
                t0, w0 = time.perf_counter(), written_bytes()
                dist.all_reduce(summed)
                times.append(time.perf_counter() - t0)
                written = written_bytes() - w0
            summed = summed.coalesce()
            reference = (summed.indices()[0], summed.values())
            diff, sent = 0.0, written
        else:
            scheme = build_scheme(name, seed=0)
            for _ in range(repeats):
                dist.barrier()
                t0, w0 = time.perf_counter(), written_bytes()
                got_rows, got_values = scheme.sum_rows(rows_K, values_KD, num_rows)
                times.append(time.perf_counter() - t0)
                written = written_bytes() - w0
            m = scheme.last_measured()
            phases, sent = m.groupby("phase")["seconds"].sum().to_dict(), int(m["bytes_sent"].sum())
            diff = float("nan")
            if reference is not None:
                order = torch.argsort(got_rows)
                if not torch.equal(got_rows[order], reference[0]):
                    raise AssertionError(f"{name}'s summed rows differ from stock's all_reduce of the sparse gradient")
                diff = float((got_values[order] - reference[1]).abs().max()) if got_rows.numel() else 0.0
        out[name] = {
            "median_s": float(np.median(times[min(2, repeats - 1) :])),
            "written_bytes": written,
            "bytes_sent": sent,
            "max_diff_vs_stock": diff,
            "phases_s": phases,
        }
    return out


def exchange_sweep(
    run,
    *,
    ranks: Sequence[int] = (4, 8, 16),
    bandwidths: Sequence[float] = (1.0,),
    schemes: Sequence[str] = EXCHANGE_SCHEMES,
    repeats: int = 12,
    tensor: str | None = None,
    workers_per_rank: int | None = None,
    model: bool = True,
    progress: bool = True,
) -> pd.DataFrame:
    """Replay ``run``'s rank-steps (:func:`rank_step_rows`) through ``schemes`` (``stock``: stock DDP's sparse
    all-reduce; the others by name, :data:`~zen_analysis.comm.SCHEMES`) at each rank count and link rate of the lab.
    One row per (ranks, bandwidth, scheme): ``measured_s`` (the slowest rank's median over the repeats after two
    warm-up ones), ``written_bytes`` (rank 0's, as the kernel counts them: the payload and gloo's headers),
    ``rows_mean`` / ``rows_union`` (rows per rank, distinct rows over ranks), ``max_diff_vs_stock`` (the largest
    difference of the summed values from stock's; the rows are checked equal), ``lead_vs_stock`` (stock's measured
    time / the scheme's) and with ``model`` the same priced by the lab's calibrated model
    (:func:`~zen_analysis.evaluation.calibrate.netlab`, calibrated on first use): ``modelled_s`` and
    ``lead_vs_stock_modelled``. Stock's model is its three ring all-gathers alone
    (:func:`~zen_analysis.evaluation.evaluate.stock_seconds`: its local sum is not priced)."""

    unknown = set(schemes) - {"stock", *SCHEMES}
    if unknown:
        raise ValueError(f"unknown schemes {sorted(unknown)}; choose stock or from {sorted(SCHEMES)}")
    if "stock" not in schemes:
        raise ValueError("the sweep measures against stock DDP's sparse all-reduce: keep 'stock' in schemes")
    if repeats < 3:
        raise ValueError(f"repeats={repeats}: at least 3 (two warm-up ones are left out of the median)")
    rows = []
    for n in ranks:
        rank_step_rows(run, n, n - 1, tensor=tensor, workers_per_rank=workers_per_rank)  # enough rank-steps?
        for bw in bandwidths:
            if progress:
                print(f"[exchange] {n} ranks behind {bw:g} Gbit/s: {', '.join(schemes)}", flush=True)
            with NetLab(ranks=n, bandwidth_gbps=bw) as lab:
                res = fork_launch(
                    _exchange_rank,
                    n,
                    run,
                    tensor,
                    workers_per_rank,
                    list(schemes),
                    repeats,
                    lab=lab,
                    timeout_s=600.0,
                )
            sets = [r["_rows"] for r in res]
            counts = [int(s.numel()) for s in sets]
            union = int(torch.unique(torch.cat(sets)).numel())
            modelled = _modelled(run, sets, n, bw, schemes, tensor) if model else {}
            for name in schemes:
                rows.append(
                    {
                        "ranks": n,
                        "bandwidth_gbps": bw,
                        "scheme": name,
                        "measured_s": max(r[name]["median_s"] for r in res),
                        "written_bytes": res[0][name]["written_bytes"],
                        "rows_mean": sum(counts) / n,
                        "rows_union": union,
                        "max_diff_vs_stock": max(r[name]["max_diff_vs_stock"] for r in res),
                        "modelled_s": modelled.get(name, float("nan")),
                        **{f"{k}_s": v for k, v in res[0][name]["phases_s"].items()},
                    }
                )
    df = pd.DataFrame(rows)
    stock = df[df["scheme"] == "stock"].set_index(["ranks", "bandwidth_gbps"])
    key = list(zip(df["ranks"], df["bandwidth_gbps"]))
    df["lead_vs_stock"] = [stock.loc[k, "measured_s"] for k in key] / df["measured_s"]
    df["lead_vs_stock_modelled"] = [stock.loc[k, "modelled_s"] for k in key] / df["modelled_s"]
    return df


def _modelled(run, sets, n: int, bw: float, schemes, tensor) -> dict[str, float]:
    """Each scheme's modelled seconds for these row sets on the lab's calibrated topology at ``n`` ranks."""

    tensors = TraceReader(run).manifest["tensors"]
    name = tensor or next(t for t, i in tensors.items() if i["kind"] == "natural")
    num_rows, width = (int(x) for x in tensors[name]["shape"])
    topo = netlab(n, bw).for_ranks(n)
    out = {"stock": stock_seconds([int(s.numel()) for s in sets], width, topo)}
    for scheme in schemes:
        if scheme != "stock":
            out[scheme] = total_seconds(build_scheme(scheme).model(sets, num_rows, width=width), topo, scheme)
    return out
