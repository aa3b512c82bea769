"""The planner's live statistics: a consistent sample of the index space, the same units on every rank, from which
every scheme's modelled time is what the full index sets give."""

import pytest
import torch

from zen_analysis.comm import SCHEMES, build_scheme
from zen_analysis.comm.planner import Planner
from zen_analysis.pricing.cost import local_time, phase_times
from zen_analysis.pricing.topology import GBPS, Topology
from zen_analysis.pricing.traffic import Traffic
from zen_analysis.sparsity import sketch as sk
from zen_analysis.sparsity.synthetic import synthetic_index_sets

LINK = Topology(
    name="link-1g",
    gpus_per_node=1,
    intra_alpha_s=50e-6,
    intra_bandwidth=GBPS,
    inter_alpha_s=50e-6,
    inter_bandwidth=GBPS,
    local_work=tuple((name, 1e-9, 2e-10, 5e-9) for name in SCHEMES),
)


@pytest.mark.parametrize("numel", [10, 65_536, 100_003, 7_000_001])
def test_every_group_draws_one_of_its_own_units(numel):
    lay = sk.layout(numel, round=3, units=4096)
    assert lay.size == min(numel, 4096)
    assert torch.equal(lay.groups_of(lay.positions), torch.arange(lay.size))  # each drawn unit lies in its group
    assert lay.positions.min() >= 0 and lay.positions.max() < numel
    assert torch.equal(sk.layout(numel, round=3, units=4096).positions, lay.positions)  # every rank draws the same
    if numel > 4096:
        assert not torch.equal(sk.layout(numel, round=4, units=4096).positions, lay.positions)  # a new round, anew


def test_the_bits_of_a_dense_tensor_and_of_its_indices_agree_and_pack_losslessly():
    x = torch.zeros(1_000_003)
    idx = torch.randperm(x.numel(), generator=torch.Generator().manual_seed(0))[:20_000]
    x[idx] = 1.0
    lay = sk.layout(x.numel(), round=0)
    bits = sk.sample_dense(x, lay)
    assert torch.equal(bits, sk.sample_indices(idx, lay))
    assert torch.equal(sk.unpack(sk.pack(bits), bits.numel()), bits) and sk.pack(bits).numel() == 8192
    rows = x.view(-1, 1)[:1_000_000].view(10_000, 100)  # by rows: a row is non-zero when any value is
    lay_rows = sk.layout(10_000, round=0, units=1000)
    nonzero_rows = torch.nonzero(rows.ne(0).any(1), as_tuple=True)[0]
    assert torch.equal(sk.sample_dense(rows, lay_rows), sk.sample_indices(nonzero_rows, lay_rows))


def test_scaled_traffic_scales_payload_and_work_but_not_counts_or_calls():
    t = Traffic(4)
    t.counts("push")
    t.all_to_all("push", torch.full((4, 4), 100).numpy())
    t.ring_all_reduce("dense", 1000, 4)
    t.local_work(1000, 10)
    s = t.scaled(3.0)
    f, g = t.frame().set_index(["rank", "phase", "kind"]), s.frame().set_index(["rank", "phase", "kind"])
    assert (g.xs("control", level="kind")["bytes_sent"] == f.xs("control", level="kind")["bytes_sent"]).all()
    assert (g.xs("payload", level="kind")["bytes_sent"] == 3 * f.xs("payload", level="kind")["bytes_sent"]).all()
    assert (g["calls"] == f["calls"]).all() and s.ring_phases["dense"] == (3000, 4)
    assert (s.work["scanned"] == 3000).all() and (s.work["written"] == 30).all()


def _full_seconds(name, sets, numel, width=0):
    traffic = build_scheme(name).model(sets, numel, width=width)
    local = local_time(traffic, LINK, name)
    return float(phase_times(traffic, LINK)["seconds"].sum()) + (local[0] if local else 0.0)


@pytest.mark.parametrize(
    ("numel", "world", "density", "skew", "overlap"),
    [(4_000_000, 4, 0.01, 1.0, 0.3), (4_000_000, 8, 0.05, 2.0, 0.5), (20_000_000, 8, 0.003, 0.0, 0.1)],
)
def test_every_schemes_time_from_the_sketch_is_the_full_sets_within_sampling_error(
    numel, world, density, skew, overlap
):
    sets = synthetic_index_sets(numel, world, density, skew=skew, overlap=overlap, seed=3)
    planner = Planner(topology=LINK)
    packed = torch.stack([planner.sketch_indices(s, numel, 0, by_rows=False) for s in sets])
    assert packed.shape == (world, 8192 + 512)  # 8 KiB of elements and 512 bytes of OmniReduce's blocks per rank
    seconds, est = planner.price(packed, numel, 0)
    assert set(seconds) == set(SCHEMES)
    for name in SCHEMES:  # 65,536 sampled units: about 4% standard error at 1% density, 7% at 0.3%
        assert seconds[name] == pytest.approx(_full_seconds(name, sets, numel), rel=0.12), name
    assert est["density"] == pytest.approx(sum(s.numel() for s in sets) / world / numel, rel=0.1)


def test_row_clustered_gradients_by_rows_price_as_their_row_sets():
    """An embedding's gradient by rows: the units are rows, each entry a row of ``dim`` values."""
    num_rows, dim, world = 50_000, 64, 4
    sets = synthetic_index_sets(num_rows, world, 0.02, skew=1.5, overlap=0.4, seed=5)
    planner = Planner(topology=LINK)
    packed = torch.stack([planner.sketch_indices(s, num_rows, 7, by_rows=True) for s in sets])
    assert packed.shape == (world, 50_000 // 8)  # fewer rows than units: every row sampled, one bit each
    seconds, _ = planner.price(packed, num_rows, 7, width=dim)
    for name in SCHEMES:  # every unit sampled: exact
        assert seconds[name] == pytest.approx(_full_seconds(name, sets, num_rows, width=dim), rel=1e-9), name
