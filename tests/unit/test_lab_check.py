"""The communication-dominated lab's arithmetic, without ranks: the generator's sets, the scaling to the lab (a
consistent sample that keeps density, overlap, gamma and skew), the dilation, the compute slept and the verdict."""

from dataclasses import replace

import pandas as pd
import pytest

from zen_analysis.paper.scale import DEVICES
from zen_analysis.sparsity.paper_workloads import paper_workload
from zen_experiments import lab_check


def _tiny(**changes):
    """The LSTM generator on a small table, at full size (scale 1) with a small MLP."""
    wl = paper_workload("lstm", vocab=40_000, width=64, density=0.02)
    return replace(wl, **({"scale": 1.0, "dense_params": 1e6, "tokens_per_gpu": 512} | changes))


def test_the_lab_draws_the_paper_scale_generators_workload():
    wl = lab_check.lab_workload("lstm")
    assert (wl.num_rows, wl.width, wl.density, wl.dense_params) == (793_471, 512, 0.0113, 20e6)
    assert wl is paper_workload("lstm")
    with pytest.raises(ValueError, match="unknown paper workload"):
        lab_check.lab_workload("bert")


def test_the_lab_sample_keeps_the_sets_statistics_and_says_its_factor():
    got = lab_check.lab_sets(_tiny(), 8, steps=2, rows=10_000, width=16)
    assert got.num_rows == 10_000 and got.width == 16 and len(got.sets_by_step) == 2
    assert got.scale == pytest.approx(40_000 * 64 / (10_000 * 16))
    s = got.stats
    assert s["lab_density"] == pytest.approx(s["paper_density"], rel=0.1)
    assert s["lab_overlap_ratio"] == pytest.approx(s["paper_overlap_ratio"], rel=0.15)
    assert s["lab_gamma"] == pytest.approx(s["paper_gamma"], rel=0.1)
    assert s["lab_skewness_ratio"] == pytest.approx(s["paper_skewness_ratio"], rel=0.15)
    assert all(int(x.max()) < 10_000 for x in got.sets_by_step[0])
    flat = lab_check.lab_sets(replace(paper_workload("opt", elements=40_000), scale=5.0), 4, rows=10_000)
    assert flat.width == 0 and flat.scale == pytest.approx(40_000 * 5 / 10_000)


def test_compute_is_the_paper_scale_models_and_dilates_with_the_links():
    seconds, source = lab_check.paper_compute(_tiny(), "v100")
    assert seconds == pytest.approx(6 * 1e6 * 512 / DEVICES["v100"].flops) and source.startswith("assumed")
    top, _ = lab_check.paper_compute(_tiny(kind="topk", width=1, scale=10.0), "v100")  # every parameter
    assert top == pytest.approx(6 * 40_000 * 10 * 512 / DEVICES["v100"].flops)
    assert lab_check.dilation(64.0, 1.0) == pytest.approx(25 / 64) and lab_check.dilation(25.0, 0.5) == 2.0


def _table(measured, modelled, equal=True, spread=0.01):
    names = ["allreduce", "agsparse", "zen"]
    df = pd.DataFrame({"scheme": names, "measured_s": measured, "modelled_s": modelled, "equal": equal})
    df["compute_s"] = 0.1
    df["comm_measured_s"] = df["measured_s"] - 0.1
    df["comm_modelled_s"] = df["modelled_s"] - 0.1
    df["measured_spread_s"] = spread
    df["modelled_netlab_s"] = df["modelled_s"]
    return lab_check._ranked(df.assign(ranks=8))


def test_the_verdict_sees_each_way_the_acceptance_can_fail():
    ok = lab_check.verdict(_table([1.0, 0.5, 0.3], [1.1, 0.55, 0.28]))
    assert "every scheme: True" in ok and "ranking equal: True, resolved pairs equal: True" in ok
    assert "Zen where the model has it fastest: fastest" in ok and "compute 10% of the slowest step" in ok
    off = lab_check.verdict(_table([1.0, 0.5, 0.3], [1.1, 0.9, 0.28]))
    assert "every scheme: False (worst agsparse 1.80)" in off
    swapped = lab_check.verdict(_table([1.0, 0.5, 0.3], [1.1, 0.25, 0.28]))
    assert (
        "ranking equal: False, resolved pairs equal: False (measured order against the model's: zen before " in swapped
    )
    assert "Zen where the model has it fastest: not the model's fastest" in swapped
    slower = lab_check.verdict(_table([1.0, 0.25, 0.3], [1.1, 0.5, 0.28]))
    assert "Zen where the model has it fastest: slower" in slower
    assert "agsparse before zen (measured 20.0% apart, modelled 78.6%))" in slower
    tie = lab_check.verdict(_table([1.0, 0.25, 0.3], [1.1, 0.5, 0.28], spread=0.1))
    assert (
        "resolved pairs equal: True" in tie
        and "agsparse before zen (measured 20.0% apart, modelled 78.6%: a tie)" in tie
    )
    assert "tied with agsparse within the repeats' spread" in tie
    assert "sums equal False" in lab_check.verdict(_table([1.0, 0.5, 0.3], [1.1, 0.55, 0.28], [True, True, False]))


def test_the_idle_calibration_recovers_the_costs_it_is_fed():
    """Sums timed as ``calls x alpha + bytes / bandwidth`` plus a local cost per row written, fed through the idle
    calibration's fit: it returns those alphas (the bandwidths held) and that local cost, whatever the stored ones."""
    from zen_analysis.comm.schemes import build_scheme
    from zen_analysis.pricing.cost import phase_features, phase_times
    from zen_analysis.pricing.topology import Topology
    from zen_experiments import lab_calibration

    links = (("all_reduce", 0.5, 1e8), ("all_to_all", 0.5, 1e8), ("p2p", 0.5, 1e8))  # stored: far off
    base = Topology(name="lab", gpus_per_node=1 << 20, intra_alpha_s=0.5, intra_bandwidth=1e8, inter_alpha_s=0.5,
                    inter_bandwidth=1e8, calibrated=links)  # fmt: skip
    true = {"all_reduce": 0.001, "all_to_all": 0.004, "p2p": 0.002}
    names, n, rows, width = ["allreduce", "agsparse", "zen", "sparcml"], 4, 5000, 8
    exact = base.for_ranks(n)
    exact = Topology(**{**exact.to_dict(), "calibrated": tuple((p, true[p], 1e8) for p in true)})

    def run(cases):
        steps, phases = [], []
        for case, sets in enumerate(cases):
            for name in names:
                model = build_scheme(name, seed=0).model(sets, rows, width=width)
                feats = phase_features(model).set_index("phase")
                total = float(phase_times(model, exact)["seconds"].sum())
                local = 1e-6 * float(model.work["written"].max()) if model.work else 0.0
                for rep, rank in ((rep, rank) for rep in (1, 2, 3) for rank in range(n)):
                    key = {"step": case, "rep": rep, "scheme": name, "rank": rank}
                    steps.append(key | {"sum_s": total + local})
                    for phase, f in feats.iterrows():
                        wire = f["calls"] * true[f["primitive"]] + f["bytes"] / 1e8
                        phases.append(key | {"phase": phase, "wire_s": wire, "calls": f["calls"]})
        return {"steps": steps, "phases": phases}

    topo, samples = lab_calibration.idle_calibration(base, run, ranks=n, num_rows=rows, width=width, schemes=names)
    assert topo.name == "lab-idle" and set(samples["primitive"]) == set(true)
    assert {p: pytest.approx(a, rel=1e-6) for p, a, _ in topo.calibrated} == true
    assert all(bw == 1e8 for _, _, bw in topo.calibrated)
    assert topo.local_costs("zen", rows=True) == pytest.approx((0.0, 0.0, 1e-6), abs=1e-9)
