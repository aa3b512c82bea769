"""Stock DDP's sparse all-gather priced: its exact bytes per rank (gloo's rings), its time step by step around the
ring, and the crossover where Zen starts to lead it."""

import numpy as np
import pytest

from zen_analysis.wire.cost import phase_features, phase_times
from zen_analysis.wire.topology import Topology
from zen_analysis.wire.traffic import DDP_SPARSE_INDEX_BYTES, DDP_SPARSE_METADATA_BYTES, ddp_sparse


def _topo(gpus_per_node=1, *, intra=1e9, inter=1e8, alpha=0.0):
    return Topology(
        name="t",
        gpus_per_node=gpus_per_node,
        intra_alpha_s=alpha,
        intra_bandwidth=intra,
        inter_alpha_s=alpha,
        inter_bandwidth=inter,
    )


def test_every_rank_sends_all_blocks_but_its_successors_and_receives_all_but_its_own():
    rows, D = np.array([10, 0, 30, 7]), 5
    t = ddp_sparse(rows, D, value_bytes=2, union=40)
    block = rows * (DDP_SPARSE_INDEX_BYTES + 2 * D) + DDP_SPARSE_METADATA_BYTES
    succ = (np.arange(4) + 1) % 4
    assert t.sent().tolist() == (block.sum() - block[succ]).tolist()
    assert t.received().tolist() == (block.sum() - block).tolist()
    f = t.frame()
    assert set(f["phase"]) == {"metadata", "indices", "values"} and (f["calls"] == 1).all()
    assert set(f[f["kind"] == "control"]["phase"]) == {"metadata"}
    assert t.work["written"].tolist() == [40.0] * 4 and t.work["scanned"].tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="width"):
        ddp_sparse([1, 2], 0)


def test_the_ring_is_timed_step_by_step_on_its_slowest_link():
    rows, D = np.array([100, 400, 200, 300]), 4  # 4 ranks on 2 nodes of 2: the ring crosses 1 -> 2 and 3 -> 0
    topo = _topo(2, intra=1e9, inter=1e8, alpha=1e-5).for_ranks(4)
    pt = phase_times(ddp_sparse(rows, D), topo).set_index("phase")["seconds"]
    # every step has every block in flight; the slowest link is an inter-node one (unshared: bandwidth 1e8)
    # carrying whichever block it carries that step: ranks 1 and 3 send blocks (1 - s) and (3 - s) at step s
    values = [max(rows[(1 - s) % 4], rows[(3 - s) % 4]) * 4 * D / 1e8 + 1e-5 for s in range(3)]
    assert pt["values"] == pytest.approx(sum(values))
    assert pt["metadata"] == pytest.approx(3 * (2 * 1e-5 + 72 / 1e8))  # two halves per step, each paying alpha
    calibrated = Topology(**{**topo.to_dict(), "calibrated": (("all_reduce", 1e-4, 1e9),)})
    feats = phase_features(ddp_sparse(rows, D)).set_index("phase")
    pt_cal = phase_times(ddp_sparse(rows, D), calibrated).set_index("phase")["seconds"]
    for phase in ("metadata", "indices", "values"):  # seconds = calls x alpha + bytes / bandwidth, as documented
        assert pt_cal[phase] == pytest.approx(feats.loc[phase, "calls"] * 1e-4 + feats.loc[phase, "bytes"] / 1e9)


def test_scaling_keeps_the_metadata_and_scales_the_blocks():
    t = ddp_sparse([10, 20], 3).scaled(2.0)
    assert [s.tolist() for s, _, _ in t.ring_gathers["indices"]] == [[160, 320]]
    assert [s.tolist() for s, _, _ in t.ring_gathers["metadata"]] == [[72, 72]]
