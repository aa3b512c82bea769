"""The communication-dominated lab's ranks (zen_experiments.lab_check): every scheme's sum equal to a dense
all-reduce bit for bit, the table's contract, and a wrong sum seen; on loopback, and once behind shaped links where the
lab can be built. Sizes are tiny and nothing is timed: speed is ``bench lab-check``'s."""

import math
from dataclasses import replace

import pytest
import torch

from zen_analysis.comm.schemes.zen import Zen
from zen_analysis.pricing.topology import PRESETS
from zen_analysis.ranks import netlab
from zen_analysis.sparsity.paper_workloads import paper_workload
from zen_experiments import lab_check

OK, WHY = netlab.available()
NATURAL = replace(paper_workload("lstm", vocab=6000, width=8, density=0.02), scale=1.0, dense_params=1e5)
"""The LSTM generator on a tiny table at full size (scale 1)."""


def _check(workload, **options) -> "lab_check.pd.DataFrame":
    return lab_check.lab_check(
        workload,
        ranks=(4,),
        repeats=1,
        steps=2,
        rows=3000,
        width=4,
        compute_dilation=1e-3,
        topology=lambda n: PRESETS["paper-tcp25"].for_ranks(n),
        **options,
    )


def test_every_scheme_sums_like_a_dense_all_reduce_and_the_table_keeps_its_contract():
    df = _check(NATURAL, network="loopback")
    assert list(df.columns[: len(lab_check.COLUMNS)]) == lab_check.COLUMNS
    assert df["scheme"].tolist() == list(lab_check.LAB_SCHEMES) and set(df["ranks"]) == {4}
    assert df["equal"].all(), df[["scheme", "equal"]]
    assert (df["measured_s"] >= df["comm_measured_s"]).all() and (df["comm_modelled_s"] > 0).all()
    assert df["modelled_s"].tolist() == pytest.approx((df["slept_s"] + df["comm_modelled_s"]).tolist())
    assert (df["topology"] == "paper-tcp25-idle").all() and df["modelled_netlab_s"].notna().all()
    assert sorted(df["measured_rank"]) == list(range(1, 8)) and df["width"].iloc[0] == 4
    assert math.isclose(df["scale"].iloc[0], 6000 * 8 / (3000 * 4))
    phases = df.attrs["phases"]  # the profile: every scheme's phases, measured and modelled, with the same calls
    assert set(phases["scheme"]) == set(lab_check.LAB_SCHEMES) and (phases["measured_s"] > 0).all()
    sparse = phases[phases["scheme"] != "allreduce"]  # dense: one gloo call, which the model prices as ring steps
    assert (sparse["measured_calls"] == sparse["modelled_calls"]).all(), sparse


def test_a_top_k_gradient_is_summed_by_elements():
    flat = replace(paper_workload("opt", elements=6000), scale=4.0)  # DGC top-5% sets over 6000 elements
    df = _check(flat, network="loopback", schemes=("allreduce", "zen", "omnireduce"))
    assert df["equal"].all() and (df["width"] == 0).all()


def test_a_wrong_sum_is_seen(monkeypatch):
    real = Zen._sum_rows

    def off_by_one(self, rows_K, values_KD, num_rows, ex):
        rows, values = real(self, rows_K, values_KD, num_rows, ex)
        return rows, values + (rows[:, None] == rows.max()).float()  # one row's values one too high

    monkeypatch.setattr(Zen, "_sum_rows", off_by_one)  # the forked ranks inherit it
    df = _check(NATURAL, network="loopback", schemes=("allreduce", "zen")).set_index("scheme")
    assert bool(df.loc["allreduce", "equal"]) and not bool(df.loc["zen", "equal"])


@pytest.mark.skipif(not OK, reason=f"network lab unavailable: {WHY}")
def test_behind_shaped_links_the_sums_are_equal_too():
    df = _check(NATURAL, network="netlab", bandwidth_gbps=2.5, schemes=("allreduce", "agsparse", "zen"))
    assert df["equal"].all() and (df["bandwidth_gbps"] == 2.5).all()
    assert torch.isfinite(torch.tensor(df["ratio"].tolist())).all()
