"""The crossover: the link rate from which dense all-reduce is modelled (and measured) faster than every sparse
scheme."""

import math
from dataclasses import replace

import pandas as pd
import pytest

from zen_analysis.comm import SCHEMES, build_scheme
from zen_analysis.evaluation.crossover import crossover, measured_crossover
from zen_analysis.pricing.topology import GBPS, Topology
from zen_analysis.sparsity.synthetic import synthetic_index_sets

LAB = Topology(
    name="lab",
    gpus_per_node=1,
    intra_alpha_s=0.0,
    intra_bandwidth=GBPS,
    inter_alpha_s=0.0,
    inter_bandwidth=GBPS,
    calibrated=(("all_to_all", 4e-4, GBPS), ("p2p", 3e-4, GBPS), ("all_reduce", 1e-4, GBPS)),
    local_work=tuple((name, 2e-9, 1e-9, 5e-9) for name in SCHEMES),
)


def _at(gbps: float) -> Topology:
    bw = gbps * GBPS
    return replace(
        LAB, intra_bandwidth=bw, inter_bandwidth=bw, calibrated=tuple((p, a, bw) for p, a, _ in LAB.calibrated)
    )


def _seconds(name, sets, numel, gbps):
    return float(build_scheme(name).time(sets, numel, _at(gbps))["seconds"].sum())


def test_below_the_crossover_a_sparse_scheme_wins_and_above_it_dense_all_reduce():
    numel = 2_000_000
    sets = synthetic_index_sets(numel, 4, 0.02, skew=1.0, overlap=0.3, seed=1)
    c = crossover(sets, numel, _at)
    rate = c["rate_gbps"]
    assert 0 < rate < math.inf
    sparse = [s for s in SCHEMES if s != "allreduce"]
    below = {s: _seconds(s, sets, numel, rate / 1.2) for s in sparse}
    assert min(below.values()) < _seconds("allreduce", sets, numel, rate / 1.2)
    assert min(below, key=below.get) == c["best_below"]
    above = min(_seconds(s, sets, numel, rate * 1.2) for s in sparse)
    assert _seconds("allreduce", sets, numel, rate * 1.2) < above


def test_dense_sets_cross_at_every_rate_and_the_measured_crossover_interpolates_log_log():
    numel = 100_000
    assert crossover([list(range(numel))] * 4, numel, _at)["rate_gbps"] == 0.0  # nothing to save: dense at once
    rows = []
    for rate, sparse_s in ((1.0, 0.5), (10.0, 2.0)):  # best sparse: half of dense at 1 Gbit/s, twice at 10
        rows += [
            {"kind": "natural", "ranks": 4, "bandwidth_gbps": rate, "scheme": "allreduce", "measured_s_median": 1.0},
            {"kind": "natural", "ranks": 4, "bandwidth_gbps": rate, "scheme": "zen", "measured_s_median": sparse_s},
            {"kind": "natural", "ranks": 4, "bandwidth_gbps": rate, "scheme": "auto", "measured_s_median": 0.1},
        ]
    sweep = pd.DataFrame(rows)
    assert measured_crossover(sweep) == pytest.approx(math.sqrt(10))  # auto is not a sparse scheme of its own
    assert measured_crossover(sweep[sweep["bandwidth_gbps"] == 1.0]) is None


def test_the_auto_verdict_tells_the_choice_from_the_spread_of_two_measurements():
    from zen_experiments.bench_lab import auto_verdict

    cell = {"kind": "natural", "ranks": 4, "bandwidth_gbps": 1.0}
    sweep = pd.DataFrame(
        [
            {**cell, "scheme": "allreduce", "measured_s_median": 0.100, "vs_best": 5.0, "vs_dense": 1.0},
            {**cell, "scheme": "zen", "measured_s_median": 0.020, "vs_best": 1.0, "vs_dense": 0.2},
            {**cell, "scheme": "agsparse", "measured_s_median": 0.030, "vs_best": 1.5, "vs_dense": 0.3},
            # auto picked Zen, and its run of Zen measured 30% slower than Zen's own row
            {**cell, "scheme": "auto", "choice": "zen", "measured_s_median": 0.026, "vs_best": 1.3, "vs_dense": 0.26},
        ]
    )
    text = auto_verdict(sweep)
    assert "auto / best 1.30, auto / dense 0.26; choice / best 1.00" in text
    assert text.endswith(
        "within 10% of the best fixed scheme in 0 of 1 cells; at most 5% slower than dense in 1 of 1; the chosen "
        "scheme's own row within 10% of the best in 1 of 1"
    )
