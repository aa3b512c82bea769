"""The Zen paper's Fig. 11-15 and 17b at its scale, modelled from workloads with its stated statistics: training
throughput and communication time per scheme on 2-16 machines of 8 V100, at 25 Gbit/s TCP (``paper-tcp25``) and
100 Gbit/s EFA (``paper-efa100``).

:func:`paper_figures` draws every GPU's sparse index sets for one training step of each workload (the paper's table
sizes, batches and per-GPU densities: :func:`paper_workload`), sums them by each scheme as its published
implementation treats the 8-GPU node (:mod:`~zen_analysis.paper.hierarchy`: the traffic, the NVLink
collectives, the node's link shared), and prices a training step:

* ``compute_s``: a GPU run's measured step of the paper's LSTM or DeepFM on ``device`` where one exists (``h100``,
  ``h200``: :func:`~zen_analysis.paper.compute.measured_step_compute`, at the paper's batch); otherwise
  assumed: 6 x dense parameters x what one GPU's step computes on (:func:`compute_tokens`: the LSTM's 128 sequences
  of :data:`~zen_analysis.paper.compute.SHAPES`' 128 tokens, as the measured step; NMT's 64 pairs at
  IWSLT'14's own mean length; DeepFM's 1,024 samples, a sample one pass of its MLP) at ``device``'s peak x
  utilization (:data:`~zen_analysis.paper.compute.DEVICES`; the paper's V100 at 40% of its FP32 peak by
  default). Not the generator's ``tokens_per_gpu``: those are its id law's independent draws, fitted for the density,
  not tokens a model computes on. LLMs: 6 x parameters (the generator's one TP shard x 8) x 1,024 tokens per TP group
  / 8 GPUs, plus the TP group's activation all-reduces over NVLink (4 per layer, Megatron's two in forward and two in
  backward, of 1,024 x hidden float32; Table 2's hidden size and layers). ``compute_source`` says which, in every
  row.
* ``comm_s``: the sparse tensor's sum (the embedding; an LLM's whole top-k'd gradient) by the scheme, NVLink and
  network together (``intra_s``, ``inter_s``).
* ``dense_comm_s`` (natural workloads): the dense MLP parameters ring all-reduced over all GPUs for every scheme
  (NCCL's flat ring); at most ``overlap`` x backward of it hides behind backward, as its buckets are ready early
  (``hidden_s``). The embedding's sum is not hidden: its layer is the first, its gradient ready last. LLMs: the
  sparse sums run bucket by bucket in DDP's comm hook during backward (section 4.8), so at most ``overlap`` x
  backward of ``comm_s`` hides, for every scheme alike.
* ``step_s`` = compute + dense comm + comm - hidden; ``samples_per_s`` = data-parallel ranks (``ranks``: every GPU;
  LLMs: one TP group of 8 GPUs per machine) x samples per rank / step; ``speedup`` is throughput over AllReduce's,
  ``comm_speedup`` AllReduce's ``comm_s`` over the scheme's (Fig. 15).

The workloads are :mod:`~zen_analysis.sparsity.paper_workloads`' (each row's ``synthetic`` says what is generated).
An LLM's sets there are one TP shard's (``scale``: the shard's elements over those generated); a machine's link carries
its 8 shards, each summed by its own data-parallel group of one rank per machine, the 8 groups at once
(:func:`~zen_analysis.paper.hierarchy.topk_syncs`).

The paper's RESULTS never feed this: they sit beside it (:mod:`~zen_analysis.paper.numbers`), after
the model is priced.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from zen_analysis import paths
from zen_analysis.atomic import atomic_write_text
from zen_analysis.evaluation.calibrate import preset
from zen_analysis.paper import numbers as paper_numbers
from zen_analysis.paper.compute import SHAPES, StepCompute, assumed_step, measured_step_compute
from zen_analysis.paper.hierarchy import (
    AS_MODELLED,
    HIERARCHIES,
    Knobs,
    Links,
    Sync,
    natural_syncs,
    node_unions,
    ring_seconds,
    sync_seconds,
    topk_syncs,
)
from zen_analysis.pricing.topology import GBPS, Topology
from zen_analysis.sparsity.metrics import union_of
from zen_analysis.sparsity.paper_fits import IWSLT14_FIT
from zen_analysis.sparsity.paper_workloads import LLM_SEQ_LEN, LLM_TP, PAPER_WORKLOADS, paper_workload

FIGURE_SCHEMES = ("allreduce", "agsparse", "sparcml", "omnireduce", "sparse_ps", "zen", "bp_coo")
"""The schemes of Fig. 11-15 (Sparse PS: Fig. 15) and Zen with a COO pull (``bp_coo``, Fig. 17b)."""
TESTBEDS = ("paper-tcp25", "paper-efa100")
MACHINES = (2, 4, 8, 16)
TP = LLM_TP
"""The LLMs' tensor parallelism, one TP group per machine (section 5.1): also the GPUs per machine."""
LLM_SHAPES = {"llama": (3072, 28), "opt": (2560, 32), "gemma2": (2304, 26)}
"""Table 2: hidden size and layers, what the TP group's activation all-reduces move."""
MEASURED_DEVICES = ("h100", "h200")
"""Devices whose measured step (where a GPU run committed one) replaces the assumed compute."""


class Case(NamedTuple):
    """One workload on ``machines`` machines, its sums as traffic: what pricing on a testbed needs."""

    workload: object
    machines: int
    syncs: dict[str, Sync]
    density: float
    node_density: float
    union_density: float


def make_case(workload, machines: int, sets: list[torch.Tensor], schemes, *, seed: int = 0, hierarchy=None) -> Case:
    """``workload`` on ``machines`` machines from its GPUs' (natural: 8 per machine) or DP ranks' (top-k: one per
    machine, one TP shard each) ``sets``: every scheme's :class:`~zen_analysis.paper.hierarchy.Sync`, the
    mean per-GPU (top-k: per-rank) density, (natural) the mean density of a node's union of its 8 GPUs' rows
    (section 5.3 gives DeepFM's) and the density of the union of all the sets."""
    rows = workload.num_rows
    density = float(np.mean([s.numel() for s in sets])) / rows
    union = union_of(sets, rows).numel() / rows
    if workload.kind == "topk":
        syncs = topk_syncs(sets, rows, workload.scale, schemes, shards=TP, seed=seed)
        return Case(workload, machines, syncs, density, np.nan, union)
    nodes = node_unions(sets, rows, TP)
    syncs = natural_syncs(
        sets, rows, workload.width, schemes, seed=seed, hierarchy=hierarchy, nodes=nodes, scale=workload.scale
    )
    return Case(workload, machines, syncs, density, float(np.mean([s.numel() for s in nodes])) / rows, union)


def model_params(workload) -> float:
    """An LLM's parameters: the generator's sets stand for one TP shard (``num_rows x width x scale`` elements, the
    parameters / 8), so the model is :data:`TP` of them."""
    return workload.num_rows * workload.width * workload.scale * TP


def compute_tokens(workload) -> tuple[int, str]:
    """(count, unit) one GPU's step of a natural workload computes on: what its assumed compute multiplies.

    The paper states the batches (128 sequences, 1,024 samples, 64 pairs) but not the lengths, so: the LSTM's
    sequences are :data:`~zen_analysis.paper.compute.SHAPES`' 128 tokens (what a measured step times);
    NMT's pairs IWSLT'14's own mean source + target length (:data:`~zen_analysis.sparsity.paper_fits.IWSLT14_FIT`,
    tokens per 64-pair batch); DeepFM's unit is the sample (26 lookups and one pass of the MLP). Not
    ``tokens_per_gpu``: the generator's independent id draws, fitted to give Table 1's density, are no token count."""
    samples = workload.samples_per_gpu
    if workload.name == "lstm":
        return samples * SHAPES["paper"]["lstm"].seq_len, "tokens"
    if workload.name == "nmt":
        per_pair = sum(f.tokens for f in IWSLT14_FIT.values()) / samples
        return round(samples * per_pair), "tokens"
    return samples, "samples"


def step_compute(workload, device: str, template: Topology, links: Links, measured: str | Path | None) -> StepCompute:
    """One GPU's compute per step (the module docstring's ``compute_s``)."""
    if workload.kind == "natural":
        if device in MEASURED_DEVICES:  # at the paper's batch: a measured step scales by samples (sequences) alone
            per = workload.samples_per_gpu
            got = measured_step_compute(workload.name, device, per_gpu=per, unit="samples", root=measured)
            if got is not None:
                return got
        per_gpu, unit = compute_tokens(workload)
        got = assumed_step(device, 6 * workload.dense_params * per_gpu)
        return got._replace(source=f"{got.source}; 6 x {workload.dense_params:.3g} params x {per_gpu:,} {unit}")
    params = model_params(workload)
    tokens = workload.samples_per_gpu * LLM_SEQ_LEN
    got = assumed_step(device, 6 * params * tokens / TP)
    hidden, layers = LLM_SHAPES[workload.name]
    topo = links.topology(template, per_node=False)
    tp_s = 4 * layers * ring_seconds(tokens * hidden, TP, topo)
    source = f"{got.source}; 6 x {params:.3g} params x {tokens} tokens / TP {TP}, + {tp_s * 1e3:.0f} ms TP all-reduces"
    return StepCompute(got.seconds + tp_s, got.backward + tp_s / 2, source)


def _links_text(t: Topology, links: Links) -> str:
    return (
        f"network {t.inter_bandwidth * links.inter / GBPS:g} Gbit/s per machine (alpha {t.inter_alpha_s * 1e6:g} us), "
        f"NVLink {t.intra_bandwidth * links.nvlink / 1e9:g} GB/s (alpha {t.intra_alpha_s * 1e6:g} us)"
    )


def price_case(
    case: Case, testbed: str, *, device: str, overlap: float, measured=None, knobs: Knobs = AS_MODELLED
) -> list[dict]:
    """One row per scheme of ``case`` on ``testbed``'s links (the module docstring's columns)."""
    w, m = case.workload, case.machines
    template = preset(testbed)
    links = knobs.links
    overlap = overlap if knobs.overlap is None else knobs.overlap
    compute = step_compute(w, device, template, links, measured)
    seconds, backward = compute.seconds * knobs.compute, compute.backward * knobs.compute
    gpus = m * TP
    natural = w.kind == "natural"
    dense = ring_seconds(w.dense_params, gpus, links.topology(template, per_node=False, ring=True)) if natural else 0.0
    replicas, samples = (gpus, w.samples_per_gpu) if natural else (m, w.samples_per_gpu)
    rows = []
    for name, sync in case.syncs.items():
        intra, inter = sync_seconds(sync, template, links)
        comm = intra + inter
        hidden = min(dense if natural else comm, overlap * backward)
        step = seconds + dense + comm - hidden
        rows.append(
            {
                "workload": w.name,
                "testbed": testbed,
                "machines": m,
                "gpus": gpus,
                "ranks": replicas,
                "scheme": name,
                "hierarchy": HIERARCHIES[sync.hierarchy],
                "step_s": step,
                "compute_s": seconds,
                "comm_s": comm,
                "intra_s": intra,
                "inter_s": inter,
                "dense_comm_s": dense,
                "hidden_s": hidden,
                "samples_per_s": replicas * samples / step,
                "density_per_gpu": case.density,
                "node_density": case.node_density,
                "union_density": case.union_density,
                "compute_source": compute.source,
                "links": _links_text(template, links),
                "synthetic": w.synthetic,
            }
        )
    df = pd.DataFrame(rows)
    base = df[df["scheme"] == "allreduce"]
    if len(base):
        df["speedup"] = df["samples_per_s"] / float(base["samples_per_s"].iloc[0])
        df["comm_speedup"] = float(base["comm_s"].iloc[0]) / df["comm_s"]
    else:
        df["speedup"] = df["comm_speedup"] = np.nan
    return df.to_dict("records")


def _check(workloads, testbeds, machines, schemes, overlap: float) -> None:
    unknown = sorted(set(workloads) - set(PAPER_WORKLOADS))
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; choose from {PAPER_WORKLOADS}")
    if "allreduce" not in schemes:
        raise ValueError("the schemes must include allreduce: every speedup is over it")
    if not machines or min(machines) < 1:
        raise ValueError(f"machines must be positive counts, got {machines}")
    if not 0 <= overlap <= 1:
        raise ValueError(f"overlap is the fraction of backward the dense buckets can hide behind: 0..1, got {overlap}")
    for t in testbeds:
        preset(t)


def paper_figures(
    workloads=PAPER_WORKLOADS,
    testbeds=TESTBEDS,
    machines=MACHINES,
    *,
    schemes=FIGURE_SCHEMES,
    device: str = "v100",
    overlap: float = 0.5,
    seed: int = 0,
    step: int = 0,
    measured: str | Path | None = None,
    hierarchy: dict[str, str] | None = None,
    workload_of=None,
) -> pd.DataFrame:
    """Fig. 11-15 and 17b modelled: a row per (workload, testbed, machines, scheme) with the module docstring's
    columns, and the paper's number beside the model's where it gives one (``paper``, ``paper_ratio`` naming the
    ratio, ``model_ratio`` the model's, ``cause`` one computed sentence where they differ by more than 25%:
    :func:`~zen_analysis.paper.numbers.attach`). One step (``step``, ``seed``) of each workload is drawn
    at the largest machine count and its first GPUs serve the smaller ones (the GPUs are exchangeable).
    ``hierarchy``: a scheme's hierarchy for the natural workloads in place of
    :data:`~zen_analysis.paper.hierarchy.HIERARCHY`'s (``{"sparcml": "flat"}``: SparCML's library over
    every GPU). ``workload_of``: a function from a name to a workload (default :func:`paper_workload`). The table's
    attrs hold the comparison with every paper number (``attrs["paper"]``)."""
    _check(workloads, testbeds, machines, schemes, overlap)
    workload_of = workload_of or paper_workload
    cases = {}
    for name in workloads:
        w = workload_of(name)
        per_machine = TP if w.kind == "natural" else 1
        sets = w.row_sets(max(machines) * per_machine, step=step, seed=seed)
        for m in machines:
            cases[(name, m)] = make_case(w, m, sets[: m * per_machine], schemes, seed=seed, hierarchy=hierarchy)

    def reprice(workload: str, testbed: str, m: int, knobs: Knobs = AS_MODELLED) -> pd.DataFrame:
        rows = price_case(cases[(workload, m)], testbed, device=device, overlap=overlap, measured=measured, knobs=knobs)
        return pd.DataFrame(rows)

    df = pd.concat([reprice(w, t, m) for (w, m) in cases for t in testbeds], ignore_index=True)
    df, comparison = paper_numbers.attach(df, reprice)
    df.attrs.update(device=device, overlap=overlap, seed=seed, step=step, paper=comparison)
    return df


CSV = "fig11_15.csv"
PAPER_CSV = "fig11_15_paper.csv"


def write_paper_figures(table: pd.DataFrame, folder: Path | None = None) -> tuple[Path, Path]:
    """The data contract: ``table`` (:func:`paper_figures`) as ``<folder>/fig11_15.csv`` (default folder
    ``data/derived/paper``: :func:`~zen_analysis.paths.derived_dir`) and its comparison with every paper number
    (``attrs["paper"]``) as ``fig11_15_paper.csv`` beside it, each written whole or not at all; returns both paths."""
    folder = folder or paths.derived_dir() / "paper"
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / CSV, folder / PAPER_CSV
    atomic_write_text(out[0], table.to_csv(index=False))
    atomic_write_text(out[1], table.attrs["paper"].to_csv(index=False))
    return out
