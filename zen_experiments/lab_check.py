"""A lab that keeps the Zen paper's proportion of compute to communication: the paper-scale model checked against
real schemes on shaped links.

Context. On 2 shared cores every measured training step of the lab is mostly compute (8 ranks computing at once), so
the lab could not check the paper's headline regime (section 5, Fig. 11-15), where a GPU computes a step in a fraction
of the time the sparse sum takes over 25 Gbit/s. Here the ranks do not compute: each WAITS OUT its modelled compute
(``time.sleep``), which leaves the cores to the schemes, then sums a generated gradient with a real scheme over the
network lab's shaped links (:class:`~zen_analysis.ranks.netlab.NetLab`, one rank per node).

* Workload. Each GPU's rows come from :func:`lab_workload`
  (:func:`~zen_analysis.sparsity.paper_workloads.paper_workload`, the paper-scale generator), drawn at the paper's
  size and per-GPU density, then scaled down to what the lab holds (:func:`lab_sets`): a consistent sample of the
  table's rows (the same rows on every rank, in index order: :mod:`zen_analysis.sparsity.sketch`), which keeps the
  density, the overlap ratio, the densification ratio gamma and the skewness ratio, and fewer values per row.
  ``scale`` (the table's paper elements per lab element) is the factor; the sets' measured statistics are in the
  table beside it.
* Values are integers (1-4), so every scheme's sum is checked equal, bit for bit, to ``dist.all_reduce`` of the dense
  tables, on every rank, step and repeat (``equal``).
* Time dilation. Bytes shrink by ``scale`` and the link runs at ``bandwidth_gbps`` instead of the paper's 25 Gbit/s,
  so a bandwidth-bound transfer takes ``dilation = (25 / bandwidth_gbps) / scale`` lab seconds per paper second; the
  compute slept is the paper-scale model's (:mod:`~zen_analysis.paper.scale`: a GPU run's measured step,
  else 6 x dense parameters x tokens per GPU at the device's assumed FLOP/s) times the same factor, so compute and
  transfer keep the paper's proportion. What does not dilate: a collective's fixed cost (gloo over TCP, a scheduler
  tick) and the CPU's local work (hashing, packing, summing, on 2 cores shared by every rank, not on a GPU). Those
  are measured, not dilated: the lab's calibration (:func:`~zen_analysis.evaluation.calibrate.netlab`, fitted in the
  lab at the same rank count) prices them, and the model adds them (``local_modelled_s``) as the measurement holds
  them. Where they are a large part of a scheme's sum, the lab is further from the cluster than the dilation says.

The model beside each measurement (:func:`lab_check`): the same sets, the lab's calibrated topology at that rank
count, the compute as slept plus the scheme's modelled sum (every phase's calls and bytes,
:func:`~zen_analysis.pricing.cost.phase_times`, and the fitted local work). The lab's stored calibration was fitted
with every rank busy; in this lab every sum starts with idle cores, where a call costs less, so by default its
per-call costs and local work are refitted in this regime first, on other sets
(:mod:`~zen_experiments.lab_calibration`), and the stored calibration's prediction is kept beside
(``modelled_netlab_s``): the difference is the regime's.

How far this is from a real cluster: the sums run on a CPU (2 cores for up to 16 ranks: local work per element is
slower than a GPU's, and ranks contend for the cores when they all wake from their compute together), over gloo and
TCP rather than NCCL on RDMA or TCP; the links are a token bucket (``tc tbf``) per node on a software bridge, with no
added latency (the kernel lacks ``netem``) and no switch or NIC queues; one rank per node, where the paper's nodes
hold 8 GPUs behind one NIC; compute is a sleep, which frees the core (a GPU's step frees the host too, but its memory
traffic and kernel launches are not emulated); and the dense parameters' all-reduce beside the sparse tensor (the
same for every scheme, partly hidden behind backward) is left out: a step here is compute and the sparse sum.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from zen_analysis.comm.schemes import SCHEMES, build_scheme
from zen_analysis.evaluation.calibrate import netlab as netlab_topology
from zen_analysis.paper.scale import ModelledStep, modelled_compute
from zen_analysis.pricing.cost import local_time, phase_features, phase_times
from zen_analysis.pricing.topology import Topology
from zen_analysis.sparsity.paper_workloads import PaperWorkload, paper_workload
from zen_analysis.sparsity.sketch import compact_sets, layout, sample_indices
from zen_analysis.sparsity.synthetic import describe
from zen_experiments.lab_calibration import idle_calibration
from zen_experiments.lab_ranks import run_lab

LAB_SCHEMES = ("allreduce", "agsparse", "sparcml", "omnireduce", "zen", "sparse_ps", "bp_coo")
"""What :func:`lab_check` sums with by default: the paper's baselines and Zen, Sparse PS (Fig. 15) and Balanced
Parallelism with COO (Fig. 17b's Algorithm 1 + COO)."""
FIG11_SCHEMES = ("allreduce", "agsparse", "sparcml", "omnireduce", "zen")
"""The schemes of the paper's throughput figures (Fig. 11-14): the ones issue 58's ranking is about."""
PAPER_GBPS = 25.0
"""The paper's testbed A link (section 5.1): what a lab second is dilated against."""
COLUMNS = ["ranks", "scheme", "measured_s", "modelled_s", "compute_s", "comm_measured_s", "comm_modelled_s"]
COLUMNS += ["bandwidth_gbps"]
"""The table's contract: these first, in this order."""


def lab_workload(name: str) -> PaperWorkload:
    """The paper-scale workload ``name`` as the generator draws it at the paper's inputs. What the lab uses of it
    (any object with these fields will do): ``kind, num_rows, width, scale, dense_params, samples_per_gpu,
    tokens_per_gpu, density, row_sets(gpus, step=, seed=)``."""
    return paper_workload(name)


class LabSets(NamedTuple):
    """The lab's sets of a workload: per step one sorted int64 set per rank, over ``num_rows`` units of ``width``
    values (0: elements, a top-k gradient), ``scale`` paper elements per lab element, and the measured statistics
    of the first step's sets before and after the sample (``paper_*`` / ``lab_*``: density, overlap ratio, gamma,
    skewness ratio over 8 partitions)."""

    sets_by_step: list[list[torch.Tensor]]
    num_rows: int
    width: int
    scale: float
    stats: dict


def lab_sets(workload, ranks: int, *, steps: int = 1, rows: int = 200_000, width: int = 32, seed: int = 0) -> LabSets:
    """``workload``'s sets for ``ranks`` GPUs at steps 0..``steps``-1 scaled to the lab: at most ``rows`` units (a
    consistent sample of the table's rows, or of a top-k gradient's elements: :func:`~zen_analysis.sparsity.sketch.
    layout`, the same on every rank and step) and at most ``width`` values per row (natural workloads; top-k ones
    keep width 0, one value per element)."""
    lay = layout(workload.num_rows, seed, units=rows)
    sets_by_step, stats = [], {}
    for step in range(steps):
        full = workload.row_sets(ranks, step=step, seed=seed)
        sampled = compact_sets([sample_indices(s, lay) for s in full])
        sets_by_step.append(sampled)
        if step == 0:
            stats |= {f"paper_{k}": v for k, v in describe(full, workload.num_rows).items()}
            stats |= {f"lab_{k}": v for k, v in describe(sampled, lay.size).items()}
    w = min(width, workload.width) if workload.kind == "natural" else 0
    scale = workload.num_rows * workload.width * workload.scale / (lay.size * max(w, 1))
    return LabSets(sets_by_step, lay.size, w, scale, stats)


def paper_compute(workload, device: str = "v100") -> tuple[float, str]:
    """(seconds, where they come from) of one GPU's step of ``workload`` at the paper's scale, as
    :mod:`~zen_analysis.paper.scale` models it: a GPU run's measured step of the paper's model on
    ``device`` where one is committed, else 6 x parameters x tokens per GPU at the device's assumed FLOP/s (natural
    workloads: the dense parameters, the table being a lookup; top-k: every parameter)."""
    params = (
        workload.dense_params if workload.kind == "natural" else workload.num_rows * workload.width * workload.scale
    )
    step = ModelledStep([], 1, float(params), workload.samples_per_gpu, workload.tokens_per_gpu, 0.0)
    got = modelled_compute(step, workload.name, device, "paper", None)
    return got.seconds, got.source


def dilation(scale: float, bandwidth_gbps: float, paper_gbps: float = PAPER_GBPS) -> float:
    """Lab seconds per paper second of a bandwidth-bound transfer: the link ``paper_gbps / bandwidth_gbps`` times
    slower, the bytes ``scale`` times fewer."""
    return paper_gbps / bandwidth_gbps / scale


def _model(
    sets_by_step: list, num_rows: int, width: int, names: Sequence[str], topo: Topology
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per scheme the modelled sum on ``topo`` (mean over steps): ``comm_modelled_s`` in all, ``wire_modelled_s``
    of it the phases (calls x alpha + bytes / bandwidth), ``local_modelled_s`` the fitted local work; and per
    (scheme, phase) its modelled seconds and the calls of its slowest rank (``phase_features``)."""
    rows, phases = [], []
    for name in names:
        wire, local = [], []
        for step, sets in enumerate(sets_by_step):
            traffic = build_scheme(name, seed=0).model(sets, num_rows, width=width)
            times = phase_times(traffic, topo)
            wire.append(float(times["seconds"].sum()))
            work = local_time(traffic, topo, name)
            local.append(work[0] if work else 0.0)
            calls = phase_features(traffic).set_index("phase")["calls"]
            for phase, seconds in zip(times["phase"], times["seconds"]):
                phases.append({"scheme": name, "step": step, "phase": phase, "modelled_s": seconds})
                phases[-1]["modelled_calls"] = int(calls.get(phase, 0))
        rows.append({"scheme": name, "wire_modelled_s": np.mean(wire), "local_modelled_s": np.mean(local)})
    out = pd.DataFrame(rows)
    out["comm_modelled_s"] = out["wire_modelled_s"] + out["local_modelled_s"]
    by_phase = pd.DataFrame(phases).groupby(["scheme", "phase"], sort=False)[["modelled_s", "modelled_calls"]].mean()
    return out, by_phase.reset_index()


def _phase_profile(raw: pd.DataFrame, modelled: pd.DataFrame) -> pd.DataFrame:
    """Per (scheme, phase): the seconds inside its collective calls (slowest rank per repeat, median over repeats,
    mean over steps) and its calls (the most any rank made) beside the model's."""
    slowest = raw.groupby(["scheme", "phase", "step", "rep"]).agg(wire_s=("wire_s", "max"), calls=("calls", "max"))
    per_step = slowest.groupby(["scheme", "phase", "step"]).median()
    measured = per_step.groupby(["scheme", "phase"]).mean().reset_index()
    measured = measured.rename(columns={"wire_s": "measured_s", "calls": "measured_calls"})
    return measured.merge(modelled, on=["scheme", "phase"], how="outer")


def _measured(raw: pd.DataFrame) -> pd.DataFrame:
    """Per scheme from the ranks' rows: the slowest rank of each (step, repeat), the median over repeats, the mean
    over steps; ``measured_spread_s``, the interquartile range of the slowest rank's step over the repeats (mean over
    steps): how far apart two schemes must be for the repeats to order them; ``equal`` over every rank, step and
    repeat."""
    slowest = raw.groupby(["scheme", "step", "rep"]).agg(
        step_s=("step_s", "max"), sum_s=("sum_s", "max"), slept_s=("slept_s", "max"), equal=("equal", "all")
    )
    per_step = slowest.groupby(["scheme", "step"]).agg(
        measured_s=("step_s", "median"),
        measured_mean_s=("step_s", "mean"),
        measured_spread_s=("step_s", lambda s: s.quantile(0.75) - s.quantile(0.25)),
        comm_measured_s=("sum_s", "median"),
        slept_s=("slept_s", "median"),
        equal=("equal", "all"),
    )
    agg = {c: (c, "mean") for c in ("measured_s", "measured_mean_s", "measured_spread_s", "comm_measured_s", "slept_s")}
    return per_step.groupby("scheme").agg(**agg, equal=("equal", "all")).reset_index()


CALIBRATIONS = ("idle", "netlab")
"""What :func:`lab_check` prices on: the lab's calibration refitted with idle cores (:mod:`~zen_experiments.
lab_calibration`), or the lab's calibration as stored (``netlab``, fitted with every rank busy)."""


def lab_check(
    workload="lstm",
    *,
    ranks: Sequence[int] = (8, 16),
    bandwidth_gbps: float = 1.0,
    schemes: Sequence[str] = LAB_SCHEMES,
    repeats: int = 10,
    steps: int = 1,
    rows: int = 200_000,
    width: int = 32,
    device: str = "v100",
    seed: int = 0,
    compute_dilation: float | None = None,
    calibration: str = "idle",
    topology: Callable[[int], Topology] | None = None,
    network: str = "netlab",
) -> pd.DataFrame:
    """Each scheme's training step in the lab beside the model's, at each rank count: one row per (ranks, scheme)
    with :data:`COLUMNS` first (``measured_s``: median over ``repeats`` of the slowest rank's compute + sum, mean over
    ``steps``; ``compute_s``: the sleep asked for; ``modelled_s``: ``slept_s``, what the slowest rank slept, plus
    ``comm_modelled_s``), then ``ratio`` (modelled / measured), ``comm_ratio``, ``wire_modelled_s`` /
    ``local_modelled_s``, the same priced on the lab's stored calibration (``modelled_netlab_s``, ``ratio_netlab``),
    ``equal`` (every sum equal to ``dist.all_reduce`` bit for bit), the ranks ``measured_rank`` / ``modelled_rank``
    (1: fastest), ``measured_spread_s`` (the repeats' interquartile range), ``others_cpu_share`` (the machine's CPU
    other jobs took meanwhile) and the workload, scaling and sets' statistics the row was measured on
    (:func:`lab_sets`). ``attrs["phases"]``: the profile per (ranks, scheme,
    phase), the seconds inside its collective calls and its calls, measured (slowest rank) beside modelled;
    ``attrs["raw"]``: every rank's timed sums.

    ``workload``: a name for :func:`lab_workload`, or an object of its interface. ``compute_dilation``: lab seconds
    of compute per paper second (default :func:`dilation`, the links' factor). ``topology(ranks)``: the lab's
    calibration (default the lab calibrated at that rank count behind ``bandwidth_gbps`` links, calibrated on first
    use); ``calibration`` (:data:`CALIBRATIONS`) says whether the model prices on it as stored or refitted with
    idle cores first. ``network="loopback"`` runs the ranks without the lab (tests: then pass ``topology``)."""
    wl = lab_workload(workload) if isinstance(workload, str) else workload
    if network not in ("netlab", "loopback") or calibration not in CALIBRATIONS:
        raise ValueError(f"network: netlab or loopback, got {network!r}; calibration: {CALIBRATIONS}, {calibration!r}")
    unknown = sorted(set(schemes) - set(SCHEMES))  # a registered scheme sums in the lab as a built-in does
    if unknown:
        raise ValueError(f"lab_check sums with the schemes of {sorted(SCHEMES)}; unknown {unknown}")
    paper_s, source = paper_compute(wl, device)
    frames, profiles, raws = [], [], []
    for n in ranks:
        got = lab_sets(wl, n, steps=steps, rows=rows, width=width, seed=seed)
        factor = compute_dilation if compute_dilation is not None else dilation(got.scale, bandwidth_gbps)
        opts = dict(compute_s=paper_s * factor, repeats=repeats, bandwidth_gbps=bandwidth_gbps, network=network)
        base = (topology or (lambda k: netlab_topology(k, bandwidth_gbps)))(n)  # before the lab: it may calibrate
        topo = base
        if calibration == "idle":
            fewer = opts | {"repeats": max(3, repeats // 2)}  # three cases: half the repeats each
            run = functools.partial(run_lab, num_rows=got.num_rows, width=got.width, schemes=schemes, **fewer)
            topo, _ = idle_calibration(base, run, ranks=n, num_rows=got.num_rows, width=got.width, schemes=schemes)
        results = run_lab(got.sets_by_step, num_rows=got.num_rows, width=got.width, schemes=schemes, **opts)
        raw = pd.DataFrame(results["steps"])
        raws.append(raw.assign(ranks=n))
        modelled, modelled_phases = _model(got.sets_by_step, got.num_rows, got.width, schemes, topo)
        stored = _model(got.sets_by_step, got.num_rows, got.width, schemes, base)[0]
        profiles.append(_phase_profile(pd.DataFrame(results["phases"]), modelled_phases).assign(ranks=n))
        table = _measured(raw).merge(modelled, on="scheme")
        table["modelled_netlab_s"] = table["slept_s"] + table["scheme"].map(
            stored.set_index("scheme")["comm_modelled_s"]
        )
        table = table.set_index("scheme").loc[list(schemes)].reset_index()  # in the order asked
        table["compute_s"] = opts["compute_s"]
        table["modelled_s"] = table["slept_s"] + table["comm_modelled_s"]
        table = table.assign(ranks=n, bandwidth_gbps=bandwidth_gbps, topology=topo.name, workload=wl.name)
        table = table.assign(num_rows=got.num_rows, width=got.width, scale=got.scale, dilation=factor, **got.stats)
        table = table.assign(paper_compute_s=paper_s, compute_source=source, synthetic=wl.synthetic)
        table["others_cpu_share"] = results["others_cpu_share"]
        frames.append(_ranked(table))
    out = pd.concat(frames, ignore_index=True)
    out = out[COLUMNS + [c for c in out.columns if c not in COLUMNS]]
    out.attrs["phases"] = pd.concat(profiles, ignore_index=True)
    out.attrs["raw"] = pd.concat(raws, ignore_index=True)
    return out


def _ranked(table: pd.DataFrame) -> pd.DataFrame:
    """One rank count's rows in the scheme order given, with ``ratio``, ``comm_ratio`` and the two rankings."""
    table = table.copy()
    table["ratio"] = table["modelled_s"] / table["measured_s"]
    table["comm_ratio"] = table["comm_modelled_s"] / table["comm_measured_s"]
    table["ratio_netlab"] = table["modelled_netlab_s"] / table["measured_s"]
    table["measured_rank"] = table["measured_s"].rank(method="first").astype(int)
    table["modelled_rank"] = table["modelled_s"].rank(method="first").astype(int)
    return table


TOLERANCE = 0.25
"""Issue 58's acceptance: the model's step within this fraction of the measured one, for every scheme."""


def _swapped(g: pd.DataFrame) -> list[tuple[str, str, bool, str]]:
    """The pairs of schemes the measurement orders otherwise than the model, (faster modelled, faster measured,
    resolved, the two gaps in words): resolved when the measured gap exceeds the larger of the two schemes' spread
    over the repeats."""
    by = g.set_index("scheme")
    out = []
    for a in by.index:
        for b in by.index:
            if by.loc[a, "modelled_s"] < by.loc[b, "modelled_s"] and by.loc[a, "measured_s"] > by.loc[b, "measured_s"]:
                gap = by.loc[a, "measured_s"] - by.loc[b, "measured_s"]
                resolved = bool(gap > max(by.loc[a, "measured_spread_s"], by.loc[b, "measured_spread_s"]))
                model_gap = by.loc[b, "modelled_s"] / by.loc[a, "modelled_s"] - 1
                words = f"measured {gap / by.loc[b, 'measured_s']:.1%} apart, modelled {model_gap:.1%}"
                out.append((a, b, resolved, words))
    return out


def verdict(table: pd.DataFrame, tolerance: float = TOLERANCE) -> str:
    """Issue 58's acceptance, one line per rank count of a :func:`lab_check` table: every scheme's modelled step
    within ``tolerance`` of the measured one (the worst named), the measured ranking equal to the model's (else the
    pairs out of order, and whether the repeats resolve them: a pair closer than its spread over the repeats is a tie
    the measurement cannot order), Zen fastest wherever the model says it is (or tied with the fastest), every sum
    equal to the dense all-reduce; and the compute's share of the slowest measured step (communication dominates
    where it is small)."""
    lines = []
    for n, g in table.groupby("ranks", sort=True):
        worst = g.loc[(g["ratio"] - 1).abs().idxmax()]
        within = bool(((g["ratio"] - 1).abs() <= tolerance).all())
        fastest = g.loc[g["measured_s"].idxmin(), "scheme"]
        fastest_model = g.loc[g["modelled_s"].idxmin(), "scheme"]
        swaps = _swapped(g)
        tied = [(a, b) for a, b, resolved, _ in swaps if not resolved]
        zen = "not the model's fastest" if fastest_model != "zen" else "fastest" if fastest == "zen" else "slower"
        if zen == "slower" and ("zen", fastest) in tied:
            zen = f"tied with {fastest} within the repeats' spread"
        share = float(g["compute_s"].iloc[0] / g["measured_s"].max())
        order = ", ".join(f"{b} before {a} ({w}{'' if r else ': a tie'})" for a, b, r, w in swaps) or "equal"
        lines.append(
            f"{n} ranks: model within {tolerance:.0%} for every scheme: {within} (worst {worst['scheme']} "
            f"{worst['ratio']:.2f}); ranking equal: {not swaps}, resolved pairs equal: {len(tied) == len(swaps)} "
            f"(measured order against the model's: {order}); Zen where the model has it fastest: {zen}; sums equal "
            f"{bool(g['equal'].all())}; compute {share:.0%} of the slowest step"
        )
    return "\n".join(lines)
