"""The planner: every scheme a candidate, priced from the ranks' sketches on a topology, with hysteresis."""

import json
from dataclasses import replace

import pytest
import torch

from zen_analysis.comm import SCHEMES
from zen_analysis.comm.planner import Planner, describe_decision
from zen_analysis.pricing.topology import LOCAL_FIT, PRESETS, Topology


@pytest.fixture(autouse=True)
def flat_preset(monkeypatch):
    flat = Topology(
        name="flat", gpus_per_node=1, intra_alpha_s=0, intra_bandwidth=1e9, inter_alpha_s=0, inter_bandwidth=1e9
    )
    monkeypatch.setitem(PRESETS, "flat", flat)


def _decide(planner, sets, numel, step, tensor="emb"):
    packed = torch.stack([planner.sketch_indices(s, numel, step, by_rows=False) for s in sets])
    return planner.decide(tensor, step, packed, numel)


def test_overlapping_sparse_sets_go_to_a_sparse_scheme_with_every_candidate_priced():
    planner = Planner(topology="flat")
    same = [torch.arange(0, 100_000, 97)] * 8  # identical sets: gamma = 1 at every n
    choice = _decide(planner, same, 100_000, 0)
    d = planner.decisions["emb"]
    assert set(d["modelled_s"]) == set(SCHEMES)
    assert choice == min(d["modelled_s"], key=d["modelled_s"].get) != "allreduce"
    assert d["gamma"] == {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0}
    # Eq. 1 vs Eq. 2 at gamma = 1: BP (n-1)/n * 2 * 2d vs HC log2(n) * 2d
    assert d["closed_forms_s"]["T_bp"] < d["closed_forms_s"]["T_hc"]
    line = describe_decision(json.loads(json.dumps(d)))  # as a run summary stores it: JSON, string keys
    assert line.startswith(f"{choice} (modelled per step on flat: {choice} ") and "ratio 1.00 at n = 8" in line


def test_dense_gradients_fall_back_to_dense_all_reduce():
    planner = Planner(topology="flat")
    assert _decide(planner, [torch.arange(10_000)] * 4, 10_000, 0) == "allreduce"


def test_decisions_come_every_k_steps_and_only_a_clear_gain_switches():
    numel = 200_000
    sparse = [torch.arange(r, numel, 400) for r in range(4)]  # 0.25% each, disjoint: a sparse scheme wins
    dense = [torch.arange(numel)] * 4
    planner = Planner(topology="flat", every=10, hysteresis=0.1)
    assert planner.due("emb", 0)
    first = _decide(planner, sparse, numel, 0)
    assert not planner.due("emb", 9) and planner.due("emb", 10)
    assert _decide(planner, dense, numel, 10) == "allreduce"  # far faster: switches
    history = planner.decisions["emb"]["history"]
    assert [h["scheme"] for h in history] == [first, "allreduce"] and history[1]["switched"]


def test_a_candidate_inside_the_hysteresis_does_not_take_over(monkeypatch):
    planner = Planner(topology="flat", every=1, hysteresis=0.1)
    modelled = {"zen": 1.0, "agsparse": 2.0, "allreduce": 3.0}
    est = {"world": 4, "density": 0.01, "union_density": 0.02, "gamma": {1: 1.0, 2: 1.5, 4: 2.0}}
    monkeypatch.setattr(planner, "price", lambda *a, **k: (dict(modelled), est))
    packed = torch.zeros(4, 8, dtype=torch.uint8)
    assert planner.decide("emb", 0, packed, 1000) == "zen"
    modelled["agsparse"] = 0.95  # 5% faster: noise, not a reason to switch
    assert planner.decide("emb", 1, packed, 1000) == "zen"
    assert planner.decisions["emb"]["best"] == "agsparse"
    modelled["agsparse"] = 0.85  # 15% faster: switches
    assert planner.decide("emb", 2, packed, 1000) == "agsparse"
    assert [h["switched"] for h in planner.decisions["emb"]["history"]] == [True, False, True]


def test_bad_planner_settings_are_refused():
    with pytest.raises(ValueError, match="every"):
        Planner(topology="flat", every=0)
    with pytest.raises(ValueError, match="hysteresis"):
        Planner(topology="flat", hysteresis=1.0)
    with pytest.raises(ValueError, match="unknown candidates"):
        Planner(topology="flat", candidates=["zen", "nope"])


def test_the_planners_topology_is_this_machine_or_the_lab_at_the_runs_rank_count(monkeypatch, tmp_path):
    from zen_analysis.atomic import atomic_write_json
    from zen_analysis.evaluation.calibrate import (
        calibration_path,
        netlab_calibration_path,
        netlab_host_calibration_path,
        planner_topology,
    )
    from zen_analysis.pricing.topology import GBPS
    from zen_analysis.ranks.netlab import TCP_PAYLOAD_FRACTION

    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"launch\(\) calibrates it before the ranks start"):
        planner_topology("auto", 3, calibrate_missing=False)  # a rank never forks a calibration of its own
    fitted = Topology(
        name="local-3",
        gpus_per_node=1 << 20,
        intra_alpha_s=1e-4,
        intra_bandwidth=1e9,
        inter_alpha_s=1e-4,
        inter_bandwidth=1e9,
        num_ranks=3,
        calibrated=(("all_to_all", 1e-4, 1e9), ("p2p", 1e-4, 1e9), ("all_reduce", 1e-4, 1e9)),
        local_work=(("zen", 1e-9, 1e-10, 1e-9),),
    )
    atomic_write_json(calibration_path(3), {**fitted.to_dict(), "method": "schemes", "local_fit": LOCAL_FIT})
    assert planner_topology("auto", 3, calibrate_missing=False).name == "local-3"
    atomic_write_json(
        netlab_calibration_path(3),
        {**fitted.to_dict(), "name": "netlab-1", "method": "schemes", "local_fit": LOCAL_FIT},
    )
    with pytest.raises(FileNotFoundError, match=netlab_host_calibration_path(3).name):  # the host limit is fitted too
        planner_topology("auto", 3, network="netlab", calibrate_missing=False)
    host = replace(fitted, calibrated=(("all_reduce", 5e-4, 0.2e9),))  # the host moves 200 MB/s of all-reduce
    atomic_write_json(
        netlab_host_calibration_path(3),
        {**host.to_dict(), "name": "netlab-host-3", "method": "schemes", "local_fit": LOCAL_FIT},
    )
    lab = planner_topology("auto", 3, network="netlab", bandwidth_gbps=2.5, calibrate_missing=False)
    payload = 2.5 * GBPS * TCP_PAYLOAD_FRACTION
    assert lab.name == "netlab-2.5" and lab.inter_bandwidth == pytest.approx(payload)
    links = {prim: (alpha, bw) for prim, alpha, bw in lab.calibrated}
    assert links["all_reduce"] == (5e-4, 0.2e9)  # host-bound: the link is faster than the host
    assert links["all_to_all"] == (1e-4, pytest.approx(payload))  # link-bound
    assert lab.local_costs("zen") == (1e-9, 1e-10, 1e-9)  # the ranks' own work is priced with the links
    assert planner_topology("paper-efa100", 3).name == "paper-efa100"
