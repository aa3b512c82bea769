"""The lab's per-call costs and local work fitted where :mod:`~zen_experiments.lab_check` uses them: ranks
that sleep their compute and then sum, with idle cores at the start of every sum.

Why a calibration of its own. The lab's calibration (:func:`~zen_analysis.evaluation.calibrate.netlab`) runs the
schemes back to back, every rank busy all the time: a collective call there waits for ranks that contend for the 2
cores, and its fitted alpha (per call) and local work (per row) are those of a saturated CPU. In the check, every sum
starts after a sleep, with the cores free: the same call costs less there, and the profile of
:func:`~zen_experiments.lab_check.lab_check` (each phase's measured collective time beside the model's)
shows the calibrated alpha above every measured phase of few bytes. A model is fitted in the regime it predicts, so
this one is: the same rank body as the check (:func:`~zen_experiments.lab_ranks.run_lab`), the same sleep,
link rate, rank count and table shape, on other sets: :func:`~zen_analysis.sparsity.synthetic.synthetic_index_sets`
at three densities (skew 1, overlap 0.3: ``calibrate``'s own cases), never the workload it is then checked on.

The fit is ``calibrate``'s: alpha per primitive on each phase's collective seconds (slowest rank, median over
repeats) against the model's calls and bytes (:func:`~zen_analysis.evaluation.calibrate.fit_links`, the bandwidth
held at the lab topology's, host caps included), then each scheme's local work on what its whole sum takes beyond the
refitted wire time (:func:`~zen_analysis.evaluation.calibrate.fit_local_work`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pandas as pd
import torch

from zen_analysis.comm.schemes import build_scheme
from zen_analysis.evaluation.calibrate import fit_links, fit_local_work
from zen_analysis.pricing.cost import phase_features, phase_times
from zen_analysis.pricing.topology import Topology
from zen_analysis.sparsity.synthetic import synthetic_index_sets

DENSITIES = (0.004, 0.015, 0.06)
"""The calibration cases' densities of rows (``calibrate``'s)."""


def calibration_sets(ranks: int, num_rows: int, *, seed: int = 1000) -> list[list[torch.Tensor]]:
    """One case per density of :data:`DENSITIES`: ``ranks`` synthetic row sets of a ``num_rows``-row table."""
    return [
        synthetic_index_sets(num_rows, ranks, d, skew=1.0, overlap=0.3, seed=seed + i) for i, d in enumerate(DENSITIES)
    ]


def link_samples(phases: pd.DataFrame, cases: list, num_rows: int, width: int, schemes: Sequence[str]) -> pd.DataFrame:
    """``fit_links``' samples: per (case, scheme, phase) the model's primitive, calls and bytes of its slowest rank
    (:func:`~zen_analysis.pricing.cost.phase_features`) beside the measured collective seconds (the slowest rank of
    each repeat, the median over repeats). ``phases``: the ranks' phase rows (``step`` is the case)."""
    slowest = phases.groupby(["scheme", "step", "phase", "rep"])["wire_s"].max()
    measured = slowest.groupby(["scheme", "step", "phase"]).median()
    rows = []
    for case, sets in enumerate(cases):
        for name in schemes:
            feats = phase_features(build_scheme(name, seed=0).model(sets, num_rows, width=width)).set_index("phase")
            for phase, f in feats.iterrows():
                if (name, case, phase) in measured.index:
                    rows.append({"scheme": name, "case": case, "phase": phase, **f.to_dict()})
                    rows[-1]["seconds"] = float(measured.loc[(name, case, phase)])
    return pd.DataFrame(rows)


def local_samples(steps: pd.DataFrame, cases: list, num_rows: int, width: int, topo: Topology) -> pd.DataFrame:
    """``fit_local_work``' samples: per (case, scheme) what the whole sum takes (slowest rank, median over repeats)
    beyond its modelled wire time on ``topo``, with the model's work features of the rank that moves the most
    bytes (it stands for the slowest)."""
    sums = steps.groupby(["scheme", "step", "rep"])["sum_s"].max().groupby(["scheme", "step"]).median()
    rows = []
    for (name, case), seconds in sums.items():
        model = build_scheme(name, seed=0).model(cases[case], num_rows, width=width)
        if not model.work:
            continue
        wire = float(phase_times(model, topo)["seconds"].sum())
        r = int(model.work["bytes"].argmax())
        rows.append({"scheme": name, "case": case, **{f: float(v[r]) for f, v in model.work.items()}})
        rows[-1] |= {"seconds": float(seconds) - wire, "wire_s": wire}
    return pd.DataFrame(rows)


def idle_calibration(
    base: Topology,
    run: Callable[[list], dict],
    *,
    ranks: int,
    num_rows: int,
    width: int,
    schemes: Sequence[str],
) -> tuple[Topology, pd.DataFrame]:
    """``base`` (the lab calibrated at ``ranks`` ranks) with every primitive's alpha and every scheme's local work
    refitted on sums made the way the check makes them: ``run(sets_by_case)`` runs the check's ranks on
    :func:`calibration_sets` and returns their ``steps`` and ``phases`` rows. Returns the topology (named
    ``<base>-idle``) and the link samples it was fitted on."""
    cases = calibration_sets(ranks, num_rows)
    got = run(cases)
    samples = link_samples(pd.DataFrame(got["phases"]), cases, num_rows, width, schemes)
    bandwidth = {prim: bw for prim, _, bw in base.calibrated}
    alphas = {}
    for prim, g in samples.groupby("primitive"):
        if prim in bandwidth:  # alpha alone, at the bandwidth the lab's topology holds for it
            alphas[prim] = fit_links(g, bandwidth=bandwidth[prim])[0][1]
    links = tuple((prim, alphas.get(prim, alpha), bw) for prim, alpha, bw in base.calibrated)
    topo = replace(base.for_ranks(ranks), name=f"{base.name}-idle", calibrated=links)
    work = fit_local_work(local_samples(pd.DataFrame(got["steps"]), cases, num_rows, width, topo))
    topo = replace(topo, **{"local_work_rows" if width else "local_work": work})
    return topo, samples
