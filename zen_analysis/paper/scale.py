"""The Zen paper's Fig. 11-14 at the paper's scale, modelled: training throughput per scheme on 16 machines x 8 GPUs.

:func:`paper_throughput` reads a captured trace store (a natural-sparsity LSTM or DeepFM run, or an LLM's top-k run)
and predicts one training step per scheme on a topology (``paper-tcp25``: 16 nodes of 8 V100, NVLink inside, 25 Gbit/s
TCP between): compute from a device profile (:data:`DEVICES`), communication from the traffic models, and the dense
buckets' overlap with backward. Every number is arithmetic on stated assumptions (the docstrings and the table's
columns say which); nothing here is a measurement of the paper's cluster. Where a GPU run timed the paper's LSTM or
DeepFM step on the card modelled (:mod:`~zen_analysis.paper.compute`, committed under ``data/gpu/``), that
measured step is the compute, in place of the assumed peak x utilization.

Shape suffixes: R rows of the table.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from zen_analysis.capture.reader import TraceReader
from zen_analysis.comm.schemes import BUILTIN_SCHEMES, build_scheme, sums_rows
from zen_analysis.comm.schemes import SCHEMES as REGISTRY
from zen_analysis.config import ExperimentConfig
from zen_analysis.evaluation.calibrate import preset
from zen_analysis.evaluation.crossover import stock_crossover, stock_seconds
from zen_analysis.paper.compute import (
    DEVICES,
    DeviceProfile,  # noqa: F401 - re-exported beside DEVICES
    StepCompute,
    assumed_step,
    measured_step_compute,
)
from zen_analysis.pricing.cost import phase_times, total_seconds
from zen_analysis.pricing.topology import GBPS, Topology
from zen_analysis.pricing.traffic import DDP_SPARSE, Traffic
from zen_analysis.workload.models import build_model

SCHEMES = ("allreduce", "agsparse", "sparcml", "omnireduce", "zen", DDP_SPARSE)
"""What the table prices: the paper's baselines with Zen, and stock DDP's sparse all-gather where it applies; with
every scheme registered from outside the package after them (:func:`table_schemes`)."""

PAPER_BATCH = {"lstm": 128, "deepfm": 1024}
"""The paper's per-GPU batch (section 5.1): LSTM 128 sequences, DeepFM 1,024 samples, held constant as n grows."""

PAPER_SIZE = {
    "lstm": {"dense": 20e6, "table": 406e6},
    "deepfm": {"dense": 68e6, "table": 214e6},
    "opt": {"dense": 2.7e9},
    "gemma2": {"dense": 2.6e9},
    "llama": {"dense": 3.2e9},
}
"""The paper's model sizes (Table 1: MLP and embedding sizes; the LLMs by name), for ``size="paper"``."""

PAPER_SPEEDUP = {  # Fig. 11 and 13, 16 machines at 25 Gbit/s, throughput over AllReduce
    ("lstm", "zen"): 3.1,
    ("lstm", "sparcml"): 3.1 / 1.67,
    ("opt", "zen"): 2.10,
    ("gemma2", "zen"): 2.04,
    ("llama", "zen"): 2.02,
    ("llama", "sparcml"): 2.02 / 2.19,
}
"""The paper's throughput speedups over AllReduce at 16 x 8 V100 and 25 Gbit/s (Fig. 11 and 13; SparCML's from Zen's
lead over it). DeepFM's Fig. 11 panel gives Zen's lead over OmniReduce only (1.44x): no ratio to AllReduce."""

LLM_ARCHS = ("llama", "gpt2", "opt", "gemma2")
LLM_SEQ_LEN = 1024
"""The paper's LLM runs: sequence length 1,024, batch 1 per TP group of 8 GPUs (one node), TP = 8."""


def table_schemes(*, by_rows: bool = False) -> tuple[str, ...]:
    """The table's schemes now: :data:`SCHEMES`, then every registered scheme that is not a built-in
    (``zen_analysis.comm.schemes.register_scheme``); ``by_rows``: of those, the ones that sum by rows."""
    plugins = [n for n, cls in REGISTRY.items() if n not in BUILTIN_SCHEMES and (sums_rows(cls) or not by_rows)]
    return (*SCHEMES, *plugins)


def gpu_row_sets(pool: list[torch.Tensor], num_rows: int, merge: float, n: int, *, seed: int = 0) -> list[torch.Tensor]:
    """``n`` GPUs' distinct rows when each GPU's batch is ``merge`` times a captured worker's: row r is in a GPU's set
    with probability 1 - (1 - f_r)^merge, f_r the fraction of captured worker sets (``pool``) holding it, drawn
    independently per GPU and row. Exact for ids drawn independently (a worker of T ids holds r with probability
    1 - (1 - q_r)^T, so f_r fixes q_r, and m T ids hold it with 1 - (1 - f_r)^m); rows no captured worker touched
    stay out, which undercounts the tail of a larger batch."""
    if not pool:
        raise ValueError("no captured row sets to scale: the trace has no natural records")
    counts_R = torch.zeros(num_rows, dtype=torch.float64)
    for rows in pool:
        counts_R[rows] += 1
    p_R = 1 - (1 - counts_R / len(pool)) ** merge
    gen = torch.Generator().manual_seed(seed)
    return [torch.nonzero(torch.rand(num_rows, generator=gen, dtype=torch.float64) < p_R).view(-1) for _ in range(n)]


def _check_options(size: str, device: str, overlap: float) -> None:
    """:func:`paper_throughput`'s options checked: a ValueError naming the allowed values."""
    if size not in ("trace", "paper"):
        raise ValueError(
            f"size must be 'trace' (the captured model) or 'paper' (the paper's model sizes), got {size!r}"
        )
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose from {sorted(DEVICES)}")
    if not 0 <= overlap <= 1:
        raise ValueError(f"overlap is the fraction of backward the dense buckets can hide behind: 0..1, got {overlap}")


class ModelledStep(NamedTuple):
    """One modelled training step of :func:`paper_throughput` before compute: a row per scheme with its
    ``sparse_comm_s``, the GPUs, the dense parameters, samples and tokens per GPU and the dense buckets' seconds."""

    rows: list[dict]
    gpus: int
    params: float
    samples_per_gpu: float
    tokens_per_gpu: float
    dense_comm: float


def _llm_step(reader: TraceReader, topk: dict, topo_t: Topology, machines: int, total: int, arch: str, size: str):
    """An LLM's step (top-k runs): ``machines`` data-parallel ranks, one per node with the node's link, each summing
    the captured top-k tensors of ``machines`` (step, worker) records scaled to all ``total`` parameters (the
    paper's with ``size="paper"``); every gradient top-k'd, so no dense buckets; stock DDP has no top-k path."""
    n = machines
    topo = Topology(**{**topo_t.to_dict(), "gpus_per_node": 1}).for_ranks(n)
    paper_total = PAPER_SIZE.get(arch, {}).get("dense", total)
    params = paper_total if size == "paper" else total
    captured = sum(int(i["numel"]) for i in topk.values())
    factor = params / captured
    sets: dict[str, list[torch.Tensor]] = {t: [] for t in topk}
    for step in reader.steps(next(iter(topk))):  # rank j: the j-th (step, worker) record of every tensor
        by_tensor = reader.index_sets(step)
        for t in topk:
            sets[t] += by_tensor[t]
    if min(len(v) for v in sets.values()) < n:
        raise ValueError(
            f"run {reader.run_id}: {min(len(v) for v in sets.values())} captured top-k sets (workers x steps) for "
            f"{n} data-parallel ranks; capture more workers (the `opt` recipe has 32) or model fewer machines"
        )
    rows = []
    for name in table_schemes():
        if name == DDP_SPARSE:
            continue
        s = sum(_comm_seconds(name, sets[t][:n], int(i["numel"]), 0, topo, factor) for t, i in topk.items())
        rows.append({"scheme": name, "sparse_comm_s": s})
    # batch 1 per TP group of 8 GPUs; every gradient is top-k'd: one sparse sum, after backward
    return ModelledStep(rows, n * 8, params, 1 / 8, LLM_SEQ_LEN / 8, 0.0)


def _natural_step(
    reader: TraceReader,
    tensor: str,
    table: tuple[int, int],
    topo_t: Topology,
    machines: int,
    dense: int,
    workload: str,
    size: str,
    train: dict,
    *,
    seed: int,
) -> ModelledStep:
    """A natural workload's step: every GPU of ``machines`` nodes holding the rows of the paper's batch
    (:data:`PAPER_BATCH`, else the run's ``train`` config's; :func:`gpu_row_sets`), summed by rows, the table's traffic
    scaled to the paper's with ``size="paper"``; the dense parameters in ring all-reduced buckets."""
    seq_len, per_worker = int(train.get("seq_len", 1)), int(train.get("batch_per_worker", 1))
    batch = PAPER_BATCH.get(workload, per_worker)
    n = machines * topo_t.gpus_per_node
    topo = topo_t.for_ranks(n)
    R, D = table
    sets = gpu_row_sets(_row_pool(reader, tensor, D), R, batch / per_worker, n, seed=seed)
    paper = PAPER_SIZE.get(workload, {})
    factor = paper.get("table", R * D) / (R * D) if size == "paper" else 1.0
    params = paper.get("dense", dense) if size == "paper" else dense
    ring = Traffic(n)  # DDP's dense buckets: ring all-reduces, no agreement check of the toolkit's
    ring.ring_all_reduce("dense", int(params), 4)
    dense_comm = float(phase_times(ring, topo)["seconds"].sum())
    rows = [
        {"scheme": name, "sparse_comm_s": _comm_seconds(name, sets, R, D, topo, factor)}
        for name in table_schemes(by_rows=True)
    ]
    return ModelledStep(rows, n, params, batch, batch * seq_len, dense_comm)


def _step_table(step: ModelledStep, workload: str, compute: float, backward: float, overlap: float) -> pd.DataFrame:
    """:func:`paper_throughput`'s table from a modelled step: at most ``overlap`` x ``backward`` of the dense buckets
    hidden, the step, samples and tokens per second, and the speedup over ``allreduce``'s beside the paper's."""
    hidden = min(step.dense_comm, overlap * backward)
    df = pd.DataFrame(step.rows)
    df.insert(0, "workload", workload)
    df["gpus"] = step.gpus
    df["compute_s"] = compute
    df["dense_comm_s"] = step.dense_comm
    df["hidden_s"] = hidden
    df["step_s"] = compute + step.dense_comm - hidden + df["sparse_comm_s"]
    df["samples_per_s"] = step.gpus * step.samples_per_gpu / df["step_s"]
    df["tokens_per_s"] = step.gpus * step.tokens_per_gpu / df["step_s"]
    base = float(df.loc[df["scheme"] == "allreduce", "samples_per_s"].iloc[0])
    df["speedup"] = df["samples_per_s"] / base
    df["paper"] = [PAPER_SPEEDUP.get((workload, s), np.nan) for s in df["scheme"]]
    return df


def _dense_params(manifest: dict, table: tuple[int, int] | None) -> int:
    """Parameters of the captured model outside its natural (embedding) table, counted on the meta device."""
    cfg = ExperimentConfig.from_dict(manifest["config"])
    vocab = table[0] if table else cfg.data.vocab_size
    extra = {"num_fields": 26, "num_dense": cfg.data.ctr_dense} if cfg.model.arch == "deepfm" else {}
    with torch.device("meta"):
        model = build_model(cfg.model, vocab_size=vocab, max_seq_len=cfg.train.seq_len, **extra)
    total = sum(p.numel() for p in model.parameters())
    return total - (table[0] * table[1] if table else 0)


def modelled_compute(
    step: ModelledStep, workload: str, device: str, size: str, measured: str | Path | None
) -> StepCompute:
    """The step's compute on ``device``: with ``size="paper"``, a GPU run's measured step of the paper's model on that
    card where one exists (:func:`~zen_analysis.paper.compute.measured_step_compute` under ``measured``,
    the folder of GPU runs; None: ``data/gpu``), its forward and backward scaled by the modelled tokens per GPU over
    the measured (batch x sequence length) where they differ; else 6 x dense parameters x tokens per GPU / (peak x
    utilization) (:func:`~zen_analysis.paper.compute.assumed_step`), 2/3 of it backward."""
    if size == "paper" and workload in PAPER_BATCH:
        got = measured_step_compute(workload, device, per_gpu=step.tokens_per_gpu, root=measured)
        if got is not None:
            return got
    return assumed_step(device, 6 * step.params * step.tokens_per_gpu)


def _comm_seconds(name: str, sets, numel: int, width: int, topo: Topology, factor: float) -> float:
    """One sparse sum's modelled seconds on ``topo``: a scheme's traffic (by rows when ``width``) scaled by ``factor``,
    or stock DDP's ring all-gather of the rows' counts (rows only)."""
    if name == DDP_SPARSE:
        return stock_seconds([round(s.numel() * factor) for s in sets], width, topo)
    traffic = build_scheme(name).model(sets, numel, width=width)
    return total_seconds(traffic.scaled(factor) if factor != 1 else traffic, topo, name)


def paper_throughput(
    run,
    *,
    topology: str | Topology = "paper-tcp25",
    machines: int = 16,
    device: str = "v100",
    overlap: float = 0.5,
    size: str = "trace",
    seed: int = 0,
    measured: str | Path | None = None,
) -> pd.DataFrame:
    """Modelled training throughput per scheme of the workload captured in ``run`` on ``machines`` nodes of
    ``topology`` (8 GPUs each on the paper's presets), one row per scheme of :func:`table_schemes` that applies.

    Per GPU and step (``size="trace"``: the captured model; ``"paper"``: its traffic scaled to the paper's model size,
    :data:`PAPER_SIZE`, with the trace's densities, and compute from the paper's parameter count):

    * ``compute_s``: with ``size="paper"`` and a GPU run's measured step of the paper's LSTM or DeepFM on ``device``
      (under ``measured``, the folder of GPU runs, default ``data/gpu``), forward + backward + optimizer as measured,
      its backward the measured one (:func:`modelled_compute`). Else assumed: 6 x dense parameters x tokens per GPU /
      (peak x utilization) of ``device`` (:data:`DEVICES`); dense parameters are the model's outside its embedding
      table (a lookup, not a matrix product). DeepFM: a sample is a token (its FM term and lookups, a few hundred
      FLOPs per field, are left out). Backward is 2/3 of it. ``compute_source`` (and the ``device`` attr) says which.
    * ``dense_comm_s``: a ring all-reduce of the dense parameters (float32), for every scheme; at most ``overlap`` x
      backward of it hides behind backward (buckets launched as their gradients are ready).
    * ``sparse_comm_s``: the embedding's sum by the scheme, none of it hidden: the table's gradient is ready last (its
      layer is the first), so its bucket starts when backward ends. Natural workloads: each GPU holds the rows of the
      paper's batch (:data:`PAPER_BATCH`; :func:`gpu_row_sets` from the captured workers' rows), summed by rows (an
      index and ``D`` values per row), as Zen's drop-in sums a sparse embedding; ``allreduce`` all-reduces the
      dense table. LLMs (top-k runs): data parallelism across machines only (the paper's TP = 8 inside a node), so
      ``machines`` ranks, one per node with the node's link, each summing the whole gradient: the captured top-k
      tensors of ``machines`` captured (step, worker) records, scaled to all parameters, 1,024 tokens per TP group
      (:data:`LLM_SEQ_LEN`); stock DDP has no top-k path (no row).
    * ``step_s`` = compute + unhidden dense comm + sparse comm; ``samples_per_s`` = GPUs x samples per GPU / step.

    ``speedup`` is samples/s over ``allreduce``'s; ``paper`` the paper's (:data:`PAPER_SPEEDUP`, NaN where it gives
    none); ``reason`` one sentence on the difference."""
    _check_options(size, device, overlap)
    reader = TraceReader(run)
    m = reader.manifest
    cfg = m.get("config", {})
    arch = cfg.get("model", {}).get("arch", "")
    workload = "lstm" if arch == "lstm" else arch
    tensors = m["tensors"]
    natural = next(((t, i) for t, i in tensors.items() if i["kind"] == "natural" and len(i["shape"]) == 2), None)
    topk = {t: i for t, i in tensors.items() if i["kind"] == "topk"}
    llm = arch in LLM_ARCHS
    if llm and not topk:
        raise ValueError(f"run {reader.run_id}: an LLM's Fig. 13 needs its top-k tensors; the trace has none")
    if not llm and natural is None:
        raise ValueError(f"run {reader.run_id}: no natural 2-D table captured (arch {arch!r}): nothing to model")
    topo_t = preset(topology) if isinstance(topology, str) else topology
    table = (natural[1]["shape"][0], natural[1]["shape"][1]) if natural else None
    dense = _dense_params(m, table)
    if llm:
        step = _llm_step(reader, topk, topo_t, machines, dense + (table[0] * table[1] if table else 0), arch, size)
    else:
        train = cfg.get("train", {})
        step = _natural_step(reader, natural[0], table, topo_t, machines, dense, workload, size, train, seed=seed)
    params = step.params
    compute = modelled_compute(step, workload, device, size, measured)
    df = _step_table(step, workload, compute.seconds, compute.backward, overlap)
    df["compute_source"] = compute.source
    ar_step = float(df.loc[df["scheme"] == "allreduce", "step_s"].iloc[0])
    df["reason"] = [_reason(r, workload, compute.seconds / ar_step, params, size) for r in df.itertuples()]
    df.attrs.update(
        run_id=reader.run_id,
        device=compute.source,
        topology=topology if isinstance(topology, str) else topology.name,
        size=size,
        overlap=overlap,
        dense_params=params,
    )
    return df


def _reason(row, workload: str, compute_share: float, params: float, size: str) -> str:
    """One sentence on why the modelled speedup differs from the paper's (or why there is none to set beside it)."""
    if row.scheme == "allreduce":
        return "the baseline: 1 by definition"
    if row.scheme == DDP_SPARSE:
        return (
            "not in the paper (its AGsparse ran on NCCL, which cannot sum sparse tensors); gloo's ring crosses each "
            "node's link once per block, where the toolkit's AGsparse sends every block to every GPU"
        )
    sized = f"the paper's {params / 1e6:.0f}M dense parameters" if size == "paper" else "the captured model"
    if np.isnan(row.paper):
        return (
            f"the paper gives no ratio to AllReduce for {workload} / {row.scheme}; compute is {compute_share:.0%} "
            "of dense's step here"
        )
    if abs(row.speedup / row.paper - 1) < 0.15:
        return f"within 15% of the paper with {sized}; compute is {compute_share:.0%} of dense's step"
    side = "above" if row.speedup > row.paper else "below"
    return (
        f"{side} the paper: with {sized} compute is {compute_share:.0%} of dense's step, and the captured density "
        "and skew (not the paper's One Billion Word / Criteo / RedPajama) set the sparse bytes"
    )


def _row_pool(reader: TraceReader, tensor: str, width: int) -> list[torch.Tensor]:
    """Every captured (step, worker) record's distinct rows of a ``width``-wide table."""
    return [
        torch.unique(idx.long() // width) for step in reader.steps(tensor) for idx in reader.index_sets(step)[tensor]
    ]


def paper_crossover(
    run,
    *,
    topology: str = "paper-tcp25",
    ranks=(8, 16, 32, 64, 128),
    rates=(1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0),
    seed: int = 0,
) -> dict:
    """Where Zen's row sum starts to lead stock DDP's sparse all-gather for the natural workload captured in ``run``,
    at the paper's rows per GPU (:data:`PAPER_BATCH`, :func:`gpu_row_sets`): :func:`~zen_analysis.evaluation.crossover.
    stock_crossover` on ``topology`` with its links between nodes at each of ``rates`` Gbit/s (the NVLink inside a
    node as it is), for n of ``ranks`` GPUs placed node by node."""
    reader = TraceReader(run)
    tensors = reader.manifest["tensors"]
    natural = next((t for t, i in tensors.items() if i["kind"] == "natural" and len(i["shape"]) == 2), None)
    if natural is None:
        raise ValueError(f"run {reader.run_id}: no natural 2-D table captured: stock DDP has no sparse path to price")
    R, D = tensors[natural]["shape"]
    cfg = reader.manifest.get("config", {})
    arch = cfg.get("model", {}).get("arch", "")
    per_worker = int(cfg.get("train", {}).get("batch_per_worker", 1))
    sets = gpu_row_sets(
        _row_pool(reader, natural, D), R, PAPER_BATCH.get(arch, per_worker) / per_worker, max(ranks), seed=seed
    )
    base = preset(topology)
    out = stock_crossover(
        sets, R, D, lambda rate, n: replace(base, inter_bandwidth=rate * GBPS), ranks=ranks, rates=rates
    )
    out["run_id"] = reader.run_id
    return out
