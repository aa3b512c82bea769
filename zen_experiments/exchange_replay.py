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

Beside Zen's hashed rows the sweep runs the ownership users adopted: each rank owns a contiguous slice of the table,
a touched row's gradient goes to its owner and only touched rows move (modded-nanogpt's "sparse bigram gradient
comms"). With a replicated optimizer, as in a DDP drop-in, the owners then hand their summed rows back: that is
``sparse_ps`` by rows (even contiguous owners, COO push, COO pull), labelled so in the table. For each scheme that
places rows on owners the table gives the busiest rank's rows (:func:`busiest_rows`), measured from the ranks'
byte records and checked against the owners' model.

Shape suffixes: K non-zeros (a captured record's elements, or one rank's distinct rows), D values per row (the table's
width), W ranks.
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
from zen_analysis.comm.schemes.agsparse import AGSparse
from zen_analysis.comm.schemes.parallelism import PushPullCOO
from zen_analysis.comm.schemes.zen import Zen
from zen_analysis.evaluation.calibrate import netlab
from zen_analysis.evaluation.evaluate import stock_seconds
from zen_analysis.pricing.cost import total_seconds
from zen_analysis.ranks.netlab import NetLab
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.sparsity.metrics import imbalance_ratios
from zen_analysis.wire.coo import index_bytes
from zen_analysis.wire.dtypes import value_bytes
from zen_analysis.zen.bitmap import bitmap_bytes, hash_partition_sizes
from zen_analysis.zen.hashing import hash_owner

EXCHANGE_SCHEMES = ("stock", "zen", "sparse_ps", "agsparse", "sparcml")
"""What :func:`exchange_sweep` replays by default: stock DDP's sparse all-reduce, Zen, the users' contiguous row
ownership (``sparse_ps``) and the toolkit's other row sums."""

EXCHANGE_LABELS = {
    "stock": "stock DDP sparse all-reduce",
    "zen": "hashed rows (zen)",
    "sparse_ps": "contiguous rows (sparse_ps)",
    "bp_coo": "hashed rows, COO pull (bp_coo)",
    "agsparse": "all-gather of rows (agsparse)",
    "sparcml": "recursive doubling (sparcml)",
}
"""The ``label`` column: what each scheme is to a reader, the users' contiguous row ownership named as such."""


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
    summed = sum_every_way(rows_K, values_KD, num_rows, width, schemes, repeats)
    return {"_rows": rows_K, "_shape": (num_rows, width), **summed}


def sum_every_way(rows_K, values_KD, num_rows: int, width: int, schemes, repeats: int) -> dict:
    """On every rank of the default group: each of ``schemes`` sums this rank's ``rows_K`` / ``values_KD`` of a
    ``num_rows`` x ``width`` table ``repeats`` times (a barrier before each), ``stock`` first (stock DDP's path:
    ``dist.all_reduce`` of the sparse COO tensor), the others' sums checked against stock's (the same rows; the
    values' largest difference kept). Per scheme: ``median_s`` (after two warm-up repeats), ``written_bytes`` (what
    the process wrote in the last repeat, gloo's headers too), ``bytes_sent`` (the scheme's own count; stock's:
    the written bytes), ``max_diff_vs_stock``, ``phases_s`` and ``payload`` (phase -> (payload bytes sent,
    received) of the last repeat, the scheme's own records; empty for stock)."""

    out, reference = {}, None
    for name in sorted(schemes, key=lambda n: n != "stock"):
        times, written, phases, payload = [], -1, {}, {}
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
            moved = m[m["kind"] == "payload"]
            pairs = zip(moved["phase"], moved["bytes_sent"], moved["bytes_received"])
            payload = {p: (int(a), int(b)) for p, a, b in pairs}
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
            "payload": payload,
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
    (:func:`~zen_analysis.evaluation.evaluate.stock_seconds`: its local sum is not priced). Each row also has
    ``label`` (:data:`EXCHANGE_LABELS`: ``sparse_ps`` is the users' contiguous row ownership) and the busiest rank's
    rows, measured (:func:`busiest_rows`)."""

    unknown = set(schemes) - {"stock", *SCHEMES}
    if unknown:
        raise ValueError(f"unknown schemes {sorted(unknown)}; choose stock or from {sorted(SCHEMES)}")
    if "stock" not in schemes:
        raise ValueError("the sweep measures against stock DDP's sparse all-reduce: keep 'stock' in schemes")
    if repeats < 3:
        raise ValueError(f"repeats={repeats}: at least 3 (two warm-up ones are left out of the median)")
    if min(ranks, default=2) < 2:
        raise ValueError(f"ranks={list(ranks)}: a sum over one rank moves nothing; at least 2")
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
            modelled = _modelled(run, [r["_rows"] for r in res], n, bw, schemes, tensor) if model else {}
            rows += [_row(res, n, bw, name, modelled.get(name, float("nan"))) for name in schemes]
    df = pd.DataFrame(rows)
    stock = df[df["scheme"] == "stock"].set_index(["ranks", "bandwidth_gbps"])
    key = list(zip(df["ranks"], df["bandwidth_gbps"]))
    df["lead_vs_stock"] = [stock.loc[k, "measured_s"] for k in key] / df["measured_s"]
    df["lead_vs_stock_modelled"] = [stock.loc[k, "modelled_s"] for k in key] / df["modelled_s"]
    return df


def _row(res: list[dict], n: int, bw: float, name: str, modelled_s: float) -> dict:
    """The sweep's row for scheme ``name`` from every lab rank's result ``res`` at ``n`` ranks behind ``bw``."""
    sets = [r["_rows"] for r in res]
    num_rows, width = res[0]["_shape"]
    return {
        "ranks": n,
        "bandwidth_gbps": bw,
        "scheme": name,
        "label": EXCHANGE_LABELS.get(name, name),
        "measured_s": max(r[name]["median_s"] for r in res),
        "written_bytes": res[0][name]["written_bytes"],
        "rows_mean": sum(int(s.numel()) for s in sets) / n,
        "rows_union": int(torch.unique(torch.cat(sets)).numel()),
        "max_diff_vs_stock": max(r[name]["max_diff_vs_stock"] for r in res),
        "modelled_s": modelled_s,
        **busiest_rows(name, [r[name]["payload"] for r in res], sets, num_rows, width),
        **{f"{k}_s": v for k, v in res[0][name]["phases_s"].items()},
    }


BUSIEST = ("push_rows_max", "owned_rows_max", "rows_moved_max")
"""The busiest rank's rows (:func:`busiest_rows`), each the largest over the ranks."""


def busiest_rows(name: str, payloads: list[dict], sets: list[torch.Tensor], num_rows: int, width: int) -> dict:
    """The busiest rank's rows in scheme ``name``'s sum of the ranks' row ``sets`` (of a ``num_rows`` x ``width``
    float32 table), measured from each rank's payload records (``payloads[r]``: phase -> (bytes sent, received),
    :func:`sum_every_way`'s): ``push_rows_max``, the most rows any rank receives from the others in the push (the
    owner's load); ``owned_rows_max``, the most rows any rank owns after the push, sums and hands every other rank
    in the pull; ``rows_moved_max``, the most rows any rank sends plus receives over the whole sum, every copy
    counted (its link's load). ``rows_match_model``: whether every rank's measured rows equal those the scheme's
    owner mapping gives the sets (:func:`owner_rows`). With ``push_imbalance`` / ``pull_imbalance``, the paper's
    Def. 8 of the owners (:func:`~zen_analysis.sparsity.metrics.imbalance_ratios`: 1 is perfect balance). A scheme
    without owners (``agsparse``: ``rows_moved_max`` alone) or without row records (stock, ``sparcml``, whose
    streams may turn dense) has NaN there."""

    nan = float("nan")
    out = dict.fromkeys(BUSIEST, nan) | {"push_imbalance": nan, "pull_imbalance": nan, "rows_match_model": None}
    world, cls = len(sets), SCHEMES.get(name)
    entry = index_bytes(num_rows) + value_bytes(torch.float32) * width  # one row in COO: its index, its values
    if cls is not None and issubclass(cls, AGSparse):
        measured = np.array([sum(a + b for a, b in p.values()) / entry for p in payloads])
        counts = np.array([s.numel() for s in sets])
        modelled = counts * (world - 1) + (counts.sum() - counts)  # to every other rank, from every other rank
        return out | {"rows_moved_max": float(measured.max()), "rows_match_model": bool((measured == modelled).all())}
    owner = _owner(name, num_rows, world)
    if owner is None:
        return out
    measured = [_measured_rows(name, p, r, world, num_rows, width) for r, p in enumerate(payloads)]
    modelled = owner_rows(sets, owner)
    push, pull = imbalance_ratios(sets, num_rows, owner, world)
    for key, k in zip(BUSIEST, ("push_in", "owned", "moved")):
        out[key] = float(max(m[k] for m in measured))
    match = all(np.array_equal([m[k] for m in measured], modelled[k]) for k in modelled)
    return out | {"push_imbalance": push, "pull_imbalance": pull, "rows_match_model": match}


def _owner(name: str, num_rows: int, world: int):
    """The owner mapping of a scheme that pushes rows to owners and pulls their sums (``zen``, ``sparse_ps``,
    ``bp_coo``) with its default seed, as the sweep builds it; None for any other."""
    cls = SCHEMES.get(name)
    if cls is None or not issubclass(cls, (Zen, PushPullCOO)):
        return None
    scheme = build_scheme(name, seed=0)
    if isinstance(scheme, Zen):
        return hash_owner(world, scheme.seed, numel=num_rows)
    return scheme.owner(num_rows, world, model=True)


def owner_rows(sets: list[torch.Tensor], owner) -> dict[str, np.ndarray]:
    """Per rank (W,), in a push to owners and a pull of their sums: ``push_in`` (rows the others send it),
    ``owned`` (distinct rows of the union it owns) and ``moved`` (rows it sends plus receives, each copy)."""
    world = len(sets)
    to_WW = np.stack([np.bincount(owner(s).numpy(), minlength=world) for s in sets])  # sender x owner
    kept_W = np.diag(to_WW)  # a rank's own rows stay local
    union = torch.unique(torch.cat(sets))
    owned_W = np.bincount(owner(union).numpy(), minlength=world)
    push_in, push_out = to_WW.sum(0) - kept_W, to_WW.sum(1) - kept_W
    moved = push_in + push_out + owned_W * (world - 1) + (union.numel() - owned_W)
    return {"push_in": push_in, "owned": owned_W, "moved": moved}


def _measured_rows(name: str, payload: dict, rank: int, world: int, num_rows: int, width: int) -> dict[str, float]:
    """Rank ``rank``'s rows from its payload bytes (phase -> (sent, received)): both pushes carry a row as a COO
    entry (Zen's index is the row's position in its owner's hash set, as wide); ``sparse_ps``'s and ``bp_coo``'s
    pulls carry COO too, Zen's pull a hash bitmap per owner (its size fixed by h0) and D values per row."""
    row = value_bytes(torch.float32) * width
    entry = index_bytes(num_rows) + row
    push_out, push_in = (b / entry for b in payload.get("push", (0, 0)))
    pull_sent, pull_received = payload.get("pull", (0, 0))
    if issubclass(SCHEMES[name], Zen):
        bitmaps = [bitmap_bytes(s) for s in hash_partition_sizes(num_rows, world, 0)]
        owned = (pull_sent / (world - 1) - bitmaps[rank]) / row
        pulled = (pull_received - (sum(bitmaps) - bitmaps[rank])) / row
    else:
        owned, pulled = pull_sent / (world - 1) / entry, pull_received / entry
    return {"push_in": push_in, "owned": owned, "moved": push_in + push_out + owned * (world - 1) + pulled}


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
