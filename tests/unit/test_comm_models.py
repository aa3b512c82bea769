"""Time models: the alpha-beta model equals the paper's closed forms on inputs built to their assumptions
(equal density, balanced partitions, one GPU per node, no latency), and the wire formats round-trip."""

import math
from dataclasses import replace

import pytest
import torch

from zen_analysis.comm import build_scheme
from zen_analysis.evaluation.calibrate import preset
from zen_analysis.pricing.cost import t_agsparse, t_allreduce, t_bp, t_hc
from zen_analysis.pricing.topology import PRESETS, Topology
from zen_analysis.zen import owner
from zen_analysis.zen.bitmap import hash_partitions, pack_bits, unpack_bits

N_RANKS, M, K = 8, 80_000, 8_000  # K non-zeros per rank: density 0.1, spread evenly over the 8 ranges
B = 1e9
FLAT = Topology(name="flat", gpus_per_node=1, intra_alpha_s=0, intra_bandwidth=B, inter_alpha_s=0, inter_bandwidth=B)


def _balanced_sets(identical: bool) -> list[torch.Tensor]:
    k = K // N_RANKS
    sets = []
    for r in range(N_RANKS):
        base = 0 if identical else r * k
        sets.append(torch.cat([p * (M // N_RANKS) + base + torch.arange(k) for p in range(N_RANKS)]))
    return sets


def _total(name, sets, check_ranks=False):
    scheme = build_scheme(name)
    scheme.check_ranks = check_ranks  # the closed forms know no agreement check
    return scheme.time(sets, M, FLAT)["seconds"].sum()


@pytest.mark.parametrize("identical", [False, True])
def test_alpha_beta_model_matches_the_closed_forms(identical):
    sets = _balanced_sets(identical)
    d = K / M
    gamma = (lambda k: 1.0) if identical else (lambda k: float(k))  # identical sets vs disjoint sets
    n = N_RANKS
    count_exchange = 8 * (n - 1) / B  # the closed forms leave out the int64 count messages; add them exactly
    assert _total("allreduce", sets) == pytest.approx(t_allreduce(n, M, B), rel=1e-12)
    assert _total("agsparse", sets) == pytest.approx(t_agsparse(n, d, M, B) + count_exchange, rel=1e-12)
    assert _total("sparse_ps", sets) == pytest.approx(t_bp(n, d, gamma, M, B) + 2 * count_exchange, rel=1e-12)
    assert _total("sparcml", sets) == pytest.approx(t_hc(n, d, gamma, M, B) + 3 * 8 / B, rel=1e-12)
    # the ranks' agreement check: 5 int64 (numel, dtype, scheme, seed, row width) from every rank to every other
    # on a count exchange, or a zero count and the 5 in a call of their own
    for name in ("allreduce", "agsparse", "sparse_ps", "sparcml", "zen", "omnireduce", "bp_coo"):
        width = 40 if build_scheme(name).folds_agreement else 48
        assert _total(name, sets, True) - _total(name, sets) == pytest.approx(width * (n - 1) / B, rel=1e-9), name


def test_paper_claims_follow_from_the_closed_forms():
    # full overlap: BP beats HC by about log(n)/2 at n = 16 (digest section 3.4)
    one = lambda k: 1.0  # noqa: E731
    assert t_hc(16, 0.01, one, M, B) / t_bp(16, 0.01, one, M, B) == pytest.approx(4 / (2 * 15 / 16))
    # random supports with d = 0.05 at n = 16: BP still wins (LHS 13.39 vs RHS 11.44)
    g = lambda k: (1 - (1 - 0.05) ** k) / 0.05  # noqa: E731
    assert t_bp(16, 0.05, g, M, B) < t_hc(16, 0.05, g, M, B)


def test_hash_owner_balances_where_contiguous_ranges_bottleneck():
    skewed = [torch.randint(0, M // 20, (K,), generator=torch.Generator().manual_seed(r)) for r in range(N_RANKS)]
    ps = build_scheme("sparse_ps").time(skewed, M, FLAT)
    bp = build_scheme("bp_coo").time(skewed, M, FLAT)
    assert ps["seconds"].sum() > 3 * bp["seconds"].sum()
    assert (ps["bottleneck_rank"] == 0).all()  # the owner of the hot range


def test_zen_hash_bitmap_pull_is_cheaper_than_coo_pull_on_dense_aggregates():
    dense_ish = [torch.randperm(M, generator=torch.Generator().manual_seed(r))[: M // 4] for r in range(N_RANKS)]
    zen = build_scheme("zen").time(dense_ish, M, FLAT).set_index("phase")["seconds"]
    bp = build_scheme("bp_coo").time(dense_ish, M, FLAT).set_index("phase")["seconds"]
    assert zen["push"] == pytest.approx(bp["push"])
    assert zen["pull"] < 0.7 * bp["pull"]


def test_presets_place_ranks_on_nodes():
    t = preset("paper-tcp25").for_ranks(16)
    assert t.num_nodes == 2
    assert t.link(0, 7) == (PRESETS["paper-tcp25"].intra_alpha_s, PRESETS["paper-tcp25"].intra_bandwidth)
    alpha, bw = t.link(0, 8)
    assert bw == pytest.approx(25e9 / 8 / 8) and t.link(7, 8, shared=False)[1] == pytest.approx(25e9 / 8)
    with pytest.raises(ValueError, match="unknown topology"):
        preset("nope")


def test_bitmaps_and_hash_partitions_round_trip():
    mask = torch.rand(1001) > 0.7
    assert torch.equal(unpack_bits(pack_bits(mask), 1001), mask)
    assert pack_bits(mask).numel() == math.ceil(1001 / 8)
    parts = hash_partitions(5000, 6, 3)
    allidx = torch.cat(parts)
    assert torch.equal(allidx.sort().values, torch.arange(5000))
    for p, s in enumerate(parts):
        assert bool((owner(s, 6, 3) == p).all()) and bool((s[1:] > s[:-1]).all())


def test_local_work_costs_are_fitted_per_scheme_and_priced_per_rank():
    """The local term: each rank's scanned elements, bytes moved and non-zeros written, priced by fitted costs;
    the fit recovers known costs from exact samples, never negative; no costs, no local row."""
    import numpy as np
    import pandas as pd

    from zen_analysis.evaluation.calibrate import fit_local_work

    truth = {"zen": (2e-9, 1e-9, 3e-8), "agsparse": (4e-9, 0.0, 6e-8)}
    rows = []
    for scheme, costs in truth.items():
        for numel in (1e6, 4e6):
            for density in (0.004, 0.015, 0.06):
                f = {
                    "scanned": numel,
                    "bytes": 8 * density * numel * 1.7,
                    "written": density * numel * (1.9 - 8 * density),
                }
                rows.append({"scheme": scheme, **f, "seconds": sum(c * f[k] for c, k in zip(costs, f))})
    fitted = dict((name, rest) for name, *rest in fit_local_work(pd.DataFrame(rows)))
    for scheme, costs in truth.items():
        assert np.allclose(fitted[scheme], costs, rtol=1e-6, atol=1e-15)
        assert min(fitted[scheme]) >= 0

    # fitted on the whole run (wire + local): the exact costs again with a wire term beside them, and small runs whose
    # residual is negative (calls overlapped better than the synced wire times) pull the cost down instead of being
    # dropped, so one large run no longer decides it
    wired = pd.DataFrame(rows).assign(wire_s=0.02)
    fitted = dict((name, rest) for name, *rest in fit_local_work(wired))
    assert np.allclose(fitted["zen"], truth["zen"], rtol=1e-6, atol=1e-15)
    runs = pd.DataFrame(
        [
            {"scheme": "zen", "scanned": 0.0, "bytes": 0.0, "written": w, "seconds": s, "wire_s": 0.03}
            for w, s in [(1e5, -0.002), (2e5, -0.002), (3e5, -0.001), (1e6, 0.06)]
        ]
    )
    residual_only = fit_local_work(runs.drop(columns="wire_s"))[0][3]
    whole_run = fit_local_work(runs)[0][3]
    assert residual_only == pytest.approx(6e-8) and 0 < whole_run < 0.9 * residual_only

    sets = [torch.tensor([0, 5, 9]), torch.tensor([5, 7])]
    paper = preset("paper-tcp25")
    assert "local" not in set(build_scheme("zen").time(sets, 100, paper)["phase"])
    calibrated = replace(paper, local_work=(("zen", 1e-3, 0.0, 1.0),))
    t = build_scheme("zen").time(sets, 100, calibrated).set_index("phase")
    assert t.loc["local", "seconds"] == pytest.approx(100 * 1e-3 + 4 * 1.0)  # 100 scanned, union of 4 written
    work = build_scheme("zen").model(sets, 100).work
    assert set(work) == {"scanned", "bytes", "written"} and (work["bytes"] > 0).all()
    assert build_scheme("allreduce").model(sets, 100).work == {}  # the collective does all of it


def test_row_sums_price_their_own_local_work():
    """A row-granular sum (``width`` > 0) scans nothing and writes each union row once; the topology prices it by
    its row fit where it has one (``local_work_rows``), by the flat costs otherwise."""
    sets = [torch.tensor([0, 5, 9]), torch.tensor([5, 7])]
    work = build_scheme("agsparse").model(sets, 100, width=16).work
    assert (work["scanned"] == 0).all() and (work["written"] == 4).all()
    flat_only = replace(preset("paper-tcp25"), local_work=(("agsparse", 1e-3, 0.0, 1.0),))
    both = replace(flat_only, local_work_rows=(("agsparse", 0.0, 0.0, 0.25),))
    by_rows = build_scheme("agsparse").time(sets, 100, both, width=16).set_index("phase")
    assert by_rows.loc["local", "seconds"] == pytest.approx(4 * 0.25)
    fallback = build_scheme("agsparse").time(sets, 100, flat_only, width=16).set_index("phase")
    assert fallback.loc["local", "seconds"] == pytest.approx(4 * 1.0)
    flat = build_scheme("agsparse").time(sets, 100, both).set_index("phase")
    assert flat.loc["local", "seconds"] == pytest.approx(100 * 1e-3 + 4 * 1.0)


def test_stored_calibrations_keep_the_row_fit(tmp_path):
    """A stored calibration keeps both fits; one fitted before rows had costs of their own is stale."""
    import json

    from zen_analysis.pricing.topology import LOCAL_FIT, load

    topo = replace(
        preset("paper-tcp25"),
        local_work=(("zen", 1e-9, 0.0, 2e-8),),
        local_work_rows=(("zen", 0.0, 1e-10, 5e-8),),
    )
    path = tmp_path / "local-4.json"
    path.write_text(json.dumps({**topo.to_dict(), "method": "schemes", "local_fit": LOCAL_FIT}))
    assert load(path) == topo
    path.write_text(json.dumps({**topo.to_dict(), "method": "schemes", "local_fit": "whole-run"}))
    assert load(path) is None  # fitted before rows had their own costs: calibrated again on first use
    assert load(path, links_only=True).calibrated == topo.calibrated  # the lab's host limit reads links alone
