"""Stock DDP's sparse all-gather priced: its exact bytes per rank (gloo's rings), its time step by step around the
ring, and the crossover where Zen starts to lead it."""

import numpy as np
import pytest

from zen_analysis.pricing.cost import phase_features, phase_times
from zen_analysis.pricing.topology import Topology
from zen_analysis.pricing.traffic import DDP_SPARSE_INDEX_BYTES, DDP_SPARSE_METADATA_BYTES, ddp_sparse


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


def test_zen_leads_stock_where_ranks_hold_the_same_rows_and_the_crossover_is_read_off_the_grid():
    import torch

    from zen_analysis.evaluation.crossover import stock_crossover

    R, D, K = 4096, 8, 200
    same = [torch.arange(0, 2 * K, 2)] * 8  # every rank the same K rows: the union stays K, stock's bytes grow with n
    flat = lambda rate, n: _topo(1, inter=rate * 1.25e8, alpha=0.0)  # noqa: E731 - bandwidth only
    c = stock_crossover(same, R, D, flat, ranks=(2, 4, 8), rates=(1.0, 10.0))
    g = c["grid"].set_index(["n", "rate_gbps"])
    for n in (2, 4, 8):  # the ring by hand: n - 1 steps of a block of K rows (int64 + D float32) and the metadata
        want = (n - 1) * (K * (8 + 4 * D) + 2 * 0 + 72) / (10 * 1.25e8)
        assert g.loc[(n, 10.0), "ddp_sparse_s"] == pytest.approx(want)
    lead = g["lead"].xs(10.0, level="rate_gbps")
    assert lead.is_monotonic_increasing and lead[8] > 1  # more ranks, more of stock's bytes per rank
    assert np.allclose(g["lead"].xs(1.0, level="rate_gbps"), lead)  # no latency: the rate cancels
    first = int(lead[lead > 1].index.min())
    assert c["by_rate"].set_index("rate_gbps")["min_ranks"].tolist() == [first, first]
    # with latency, stock's 4 (n - 1) ring steps pay alpha each: a fast link turns the lead the other way or back
    slow = lambda rate, n: _topo(1, inter=rate * 1.25e8, alpha=2e-3)  # noqa: E731
    c = stock_crossover(same, R, D, slow, ranks=(2, 8), rates=(0.01, 0.1, 1.0, 10.0, 100.0))
    for _, row in c["by_ranks"].iterrows():
        d = c["grid"][c["grid"]["n"] == row["n"]].set_index("rate_gbps")["lead"]
        if row["zen_leads"] in ("below", "above"):
            lo, hi = d[d.index < row["crossover_gbps"]], d[d.index > row["crossover_gbps"]]
            assert (lo.iloc[-1] > 1) != (hi.iloc[0] > 1)  # the lead changes side between the rates around it
            assert (lo.iloc[0] > 1) == (row["zen_leads"] == "below")
        else:
            assert (d > 1).all() == (row["zen_leads"] == "always")
    with pytest.raises(ValueError, match="rank count"):
        stock_crossover(same[:1], R, D, flat)


def test_evaluate_prices_stock_ddp_on_natural_tables_when_asked(tmp_path, monkeypatch):
    import torch

    from zen_analysis import paths
    from zen_analysis.capture.traces import SparseGrad, TraceWriter, write_manifest
    from zen_analysis.evaluation.evaluate import evaluate
    from zen_analysis.pricing.topology import PRESETS

    R, D, rid = 300, 4, "synthetic-ddp-sparse"
    wr = TraceWriter(paths.trace_dir(rid), rank=0, run_id=rid, world_size=1, steps_per_shard=1)
    rows = [torch.arange(0, 40 + 10 * w, 1 + w) for w in range(4)]
    for w, r in enumerate(rows):
        idx = (r[:, None] * D + torch.arange(D)).reshape(-1)
        wr.add(SparseGrad(0, w, 0, "emb", "natural", (R, D), idx, torch.ones(idx.numel())))
        wr.add(SparseGrad(0, w, 0, "flat", "topk", (R * D,), idx, torch.ones(idx.numel())))
    wr.end_step()
    wr.close()
    tensors = {
        "emb": {"kind": "natural", "shape": [R, D], "numel": R * D},
        "flat": {"kind": "topk", "shape": [R * D], "numel": R * D},
    }
    write_manifest(paths.trace_dir(rid), {"run_id": rid, "tensors": tensors})
    df = evaluate(rid, topologies=("paper-tcp25",), schemes=["zen", "ddp_sparse"], progress=False)
    stock = df[df["scheme"] == "ddp_sparse"]
    assert set(stock["tensor"]) == {"emb"} and sorted(stock["n"]) == [2, 4]  # no stock path for a flat top-k tensor
    row = stock[stock["n"] == 4].iloc[0]
    t = ddp_sparse([r.numel() for r in rows], D)
    assert row["seconds"] == pytest.approx(phase_times(t, PRESETS["paper-tcp25"])["seconds"].sum())
    assert row["bytes_sent_total"] == t.sent().sum()
    with pytest.raises(ValueError, match="ddp_sparse"):
        evaluate(rid, schemes=["nope"], progress=False)
