"""Zen's planner: profile, then the cheapest of BP (zen), HC (sparcml) and dense all-reduce."""

import json

import pytest
import torch

from zen_analysis.sync.planner import Planner, describe_decision
from zen_analysis.wire.topology import PRESETS, Topology


@pytest.fixture(autouse=True)
def flat_preset(monkeypatch):
    flat = Topology(
        name="flat", gpus_per_node=1, intra_alpha_s=0, intra_bandwidth=1e9, inter_alpha_s=0, inter_bandwidth=1e9
    )
    monkeypatch.setitem(PRESETS, "flat", flat)


def test_planner_waits_for_its_profile_then_prefers_bp_on_overlapping_sparse_sets():
    planner = Planner(topology="flat", profile_steps=2)
    same = [torch.arange(0, 100_000, 97)] * 8  # identical sets: gamma = 1 at every n
    assert planner.observe("emb", same, 100_000) is None
    assert planner.observe("emb", same, 100_000) == "zen"
    d = planner.decisions["emb"]
    assert d["gamma"] == {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0} and d["profiled_steps"] == 2
    # Eq. 1 vs Eq. 2 at gamma = 1: BP (n-1)/n * 2 * 2d vs HC log2(n) * 2d
    assert d["closed_forms_s"]["T_bp"] < d["closed_forms_s"]["T_hc"]
    assert planner.observe("emb", same, 100_000) == "zen"  # decided once
    line = describe_decision(json.loads(json.dumps(d)))  # as a run summary stores it: JSON, string keys
    assert line.startswith("zen (modelled per step on flat: zen ") and "densification ratio 1.00 at n = 8" in line


def test_planner_falls_back_to_dense_all_reduce_on_dense_gradients():
    planner = Planner(topology="flat", profile_steps=1)
    assert planner.observe("emb", [torch.arange(10_000)] * 4, 10_000) == "allreduce"
