"""Fig. 11-15 at the paper's scale, modelled from workloads with its statistics: the hierarchy's pricing is the
documented arithmetic, the table keeps its contract, an LLM's link carries its machine's 8 TP shards, and the paper's
numbers sit beside the model without feeding it. Small fake workloads of the generator's shape, and the generator's
own workloads at few machines or few elements, keep it fast."""

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
import torch

from zen_analysis.comm.schemes import build_scheme
from zen_analysis.paper import numbers as paper_numbers
from zen_analysis.paper.compute import SHAPES
from zen_analysis.paper.figures import (
    compute_tokens,
    model_params,
    paper_figures,
    step_compute,
    write_paper_figures,
)
from zen_analysis.paper.hierarchy import (
    Links,
    block_sets,
    intra_seconds,
    natural_syncs,
    sync_seconds,
    topk_syncs,
)
from zen_analysis.pricing.cost import phase_times
from zen_analysis.pricing.topology import PRESETS, Topology
from zen_analysis.pricing.traffic import concurrent
from zen_analysis.sparsity.paper_workloads import PAPER_INPUTS, paper_workload
from zen_analysis.sparsity.synthetic import synthetic_index_sets

TCP = PRESETS["paper-tcp25"]


@dataclass(frozen=True)
class FakeWorkload:
    """The shape of ``zen_analysis.sparsity.paper_workloads.PaperWorkload``, at test sizes."""

    name: str
    kind: str
    num_rows: int
    width: int
    scale: float
    dense_params: float
    samples_per_gpu: int
    tokens_per_gpu: int
    density: float
    synthetic: str = "test fake: skewed synthetic sets"

    def row_sets(self, gpus: int, *, step: int = 0, seed: int = 0) -> list[torch.Tensor]:
        skew = 2.0 if self.kind == "natural" else 0.0
        return synthetic_index_sets(self.num_rows, gpus, self.density, skew=skew, overlap=0.3, seed=100 * seed + step)


FAKES = {
    "lstm": FakeWorkload("lstm", "natural", 4096, 64, 1.0, 2e6, 128, 2048, 0.02),
    "opt": FakeWorkload("opt", "topk", 1 << 14, 1, 2.7e9 / 8 / (1 << 14), 0.0, 1, 1024, 0.05),  # one TP shard
}
CONTRACT = [
    "workload",
    "testbed",
    "machines",
    "scheme",
    "step_s",
    "compute_s",
    "comm_s",
    "speedup",
    "comm_speedup",
    "paper",
    "paper_ratio",
    "density_per_gpu",
    "compute_source",
    "cause",
]


@pytest.fixture(scope="module")
def table():
    return paper_figures(("lstm", "opt"), machines=(2, 4, 8, 16), workload_of=FAKES.__getitem__)


def test_a_dense_allreduce_at_16_by_8_is_the_ring_formula():
    R, D, n = 4096, 64, 128
    sets = [torch.arange(i, R, 97) for i in range(n)]
    sync = natural_syncs(sets, R, D, ("allreduce",))["allreduce"]
    intra, inter = sync_seconds(sync, TCP)
    # one NCCL ring through all 128 GPUs, crossing each node's link once, unshared: 2 (n - 1) steps on its slowest link
    assert intra == 0.0
    assert inter == pytest.approx(2 * (n - 1) * (30e-6 + math.ceil(R * D / n) * 4 / (25e9 / 8)))
    at_half = sync_seconds(sync, TCP, Links(dense_rings=0.5))[1]
    assert at_half == pytest.approx(2 * (n - 1) * (30e-6 + math.ceil(R * D / n) * 4 / (12.5e9 / 8)))


def test_the_node_collectives_are_the_documented_nvlink_formulas():
    R, D = 4096, 64
    sets = [torch.arange(i, R, 61) for i in range(16)]
    syncs = natural_syncs(sets, R, D, ("zen", "omnireduce"))
    M = R * D
    # local_rank: a ring reduce-scatter and all-gather over 8 GPUs; node: a pipelined reduce and broadcast
    assert intra_seconds(syncs["zen"], TCP, Links()) == pytest.approx(2 * 7 * (5e-6 + math.ceil(M / 8) * 4 / 25e9))
    assert intra_seconds(syncs["omnireduce"], TCP, Links()) == pytest.approx(2 * (M * 4 / 25e9 + 7 * 5e-6))
    faster = intra_seconds(syncs["zen"], TCP, Links(nvlink=5))
    assert faster == pytest.approx(2 * 7 * (5e-6 + math.ceil(M / 8) * 4 / 125e9))


def test_concurrent_groups_sum_their_bytes_on_the_shared_link_and_pay_latency_once():
    sets = synthetic_index_sets(1 << 12, 4, 0.05, seed=1)
    zen = build_scheme("zen")
    zen.check_ranks = False
    one = zen.model(sets, 1 << 12)
    both = concurrent([one, one])
    topo = Topology(**{**TCP.to_dict(), "gpus_per_node": 1}).for_ranks(4)
    for phase, m in one.pairs.items():
        assert (both.pairs[phase] == 2 * m).all()
        assert both.calls[phase] == one.calls[phase]
    single, double = phase_times(one, topo).set_index("phase"), phase_times(both, topo).set_index("phase")
    latency = one.calls["push"] * 30e-6
    assert double.loc["push", "seconds"] - latency == pytest.approx(2 * (single.loc["push", "seconds"] - latency))
    with pytest.raises(ValueError, match="same ranks"):
        concurrent([one, zen.model(sets[:2], 1 << 12)])


def test_natural_sums_are_by_elements_a_row_being_width_alike_elements():
    R, D = 2048, 32
    sets = synthetic_index_sets(R, 16, 0.03, skew=1.0, seed=2)
    syncs = natural_syncs(sets, R, D, ("bp_coo", "agsparse", "omnireduce"))
    # bp_coo's COO: an int32 index and a float32 value per element, D elements per row
    nodes = [torch.unique(torch.cat(sets[i : i + 8])) for i in (0, 8)]
    pushed = sum(s.numel() for s in nodes) * D * 8
    assert syncs["bp_coo"].traffic.sent().sum() > pushed / 2  # about half the node's rows go to the other node
    assert syncs["bp_coo"].traffic.sent().sum() < 2 * pushed
    # agsparse is DDP's: rows, int64 index, D values; every GPU's block reaches every other GPU once around the ring
    got = syncs["agsparse"].traffic.received()
    assert got.sum() == pytest.approx(sum(s.numel() * (8 + 4 * D) for s in sets) * 15, rel=0.01)
    # OmniReduce's blocks at the table's geometry: 256 elements = 8 rows of 32
    assert torch.equal(block_sets([torch.tensor([0, 7, 8, 100])], D)[0], torch.tensor([0, 1, 12]))
    assert torch.equal(block_sets([torch.tensor([3])], 17)[0], torch.tensor([0]))
    assert torch.equal(block_sets([torch.tensor([15])], 17)[0], torch.tensor([0, 1]))  # elements 255-271


def test_topk_sums_carry_a_machines_eight_shards():
    sets = synthetic_index_sets(1 << 12, 4, 0.05, seed=3)
    small = topk_syncs(sets, 1 << 12, 1.0, ("allreduce", "zen"), shards=1)
    big = topk_syncs(sets, 1 << 12, 1000.0, ("allreduce", "zen"), shards=8)
    ring = big["allreduce"].traffic.ring_phases["allreduce"][0]
    assert ring == 8000 * small["allreduce"].traffic.ring_phases["allreduce"][0]
    # the 8 groups' payload shares the link (control messages, the counts, stay one group's); calls are one group's
    payload = {k: m for k, m in small["zen"].traffic.matrices.items() if k[1] != "control"}
    for key, m in payload.items():
        assert np.array_equal(big["zen"].traffic.matrices[key], np.rint(m * 8000).astype(np.int64)), key
    assert payload
    assert dict(big["zen"].traffic.calls) == dict(small["zen"].traffic.calls)
    with pytest.raises(ValueError, match="shards"):
        topk_syncs(sets, 1 << 12, 1.0, ("zen",), shards=0)


@pytest.mark.parametrize("machines", [2, 16])
def test_an_llms_allreduce_moves_its_whole_model_over_each_machines_link(machines):
    """The generator's sets are one TP shard (parameters / 8); the 8 shards' DP rings share a machine's link, so
    AllReduce's time is one ring of every parameter over the machines, and compute is 6 x params x 1,024 / 8."""
    opt = paper_workload("opt", elements=1 << 14)
    assert opt.num_rows * opt.scale == pytest.approx(PAPER_INPUTS["opt"]["params"] / 8)
    assert model_params(opt) == pytest.approx(2.7e9)
    t = paper_figures(("opt",), ("paper-tcp25",), (machines,), schemes=("allreduce", "zen"), workload_of=lambda n: opt)
    ar = t.set_index("scheme").loc["allreduce"]
    m, numel = machines, round(2.7e9)
    assert ar["ranks"] == m and ar["gpus"] == 8 * m
    assert ar["comm_s"] == pytest.approx(2 * (m - 1) * (30e-6 + math.ceil(numel / m) * 4 / (25e9 / 8)), rel=1e-6)
    compute = step_compute(opt, "v100", TCP, Links(), None)
    tp_s = 4 * 32 * 2 * 7 * (5e-6 + math.ceil(1024 * 2560 / 8) * 4 / 25e9)  # Megatron's 4 per layer, NVLink rings
    assert compute.seconds == pytest.approx(6 * 2.7e9 * 1024 / 8 / (15.7e12 * 0.4) + tp_s)
    assert ar["compute_s"] == pytest.approx(compute.seconds)


def test_the_table_keeps_the_data_contract(table, tmp_path):
    assert set(CONTRACT) <= set(table.columns)
    assert len(table) == len(table.drop_duplicates(["workload", "testbed", "machines", "scheme"]))
    assert set(table["scheme"]) == {"allreduce", "agsparse", "sparcml", "omnireduce", "sparse_ps", "zen", "bp_coo"}
    assert (table.loc[table["scheme"] == "allreduce", "speedup"] == 1).all()
    step = table["compute_s"] + table["dense_comm_s"] + table["comm_s"] - table["hidden_s"]
    assert np.allclose(table["step_s"], step)
    assert table["compute_source"].str.startswith(("assumed: ", "measured on ")).all()
    lstm = table[table["workload"] == "lstm"]
    assert lstm["density_per_gpu"].between(0.019, 0.021).all()
    csv, paper_csv = write_paper_figures(table, tmp_path)
    back = pd.read_csv(csv)
    assert list(back.columns) == list(table.columns) and len(back) == len(table)
    assert set(pd.read_csv(paper_csv)["figure"].astype(str)) >= {"11", "13", "15", "17b"}


def test_per_gpu_throughput_of_allreduce_never_rises_with_machines(table):
    ar = table[table["scheme"] == "allreduce"].sort_values("machines")
    for _, d in ar.groupby(["workload", "testbed"]):
        per_gpu = (d["samples_per_s"] / d["gpus"]).to_numpy()
        assert (np.diff(per_gpu) <= 1e-12 * per_gpu[:-1]).all(), per_gpu


def test_cause_is_given_exactly_where_the_model_misses_the_paper_by_a_quarter(table):
    have = table[table["paper"].notna()]
    assert len(have) >= 8
    miss = (have["model_ratio"] / have["paper"] - 1).abs() > 0.25
    assert (have.loc[miss, "cause"].str.len() > 0).all() and (have.loc[~miss, "cause"] == "").all()
    assert (table.loc[table["paper"].isna(), "cause"] == "").all()
    comp = table.attrs["paper"]
    miss = (comp["model"] / comp["paper"] - 1).abs() > 0.25
    assert (comp.loc[miss, "cause"].str.contains("the paper: ")).all() and (comp.loc[~miss, "cause"] == "").all()
    at = table[(table["workload"] == "lstm") & (table["testbed"] == "paper-tcp25") & (table["machines"] == 16)]
    zen_lstm = at.set_index("scheme")
    ratio = zen_lstm.loc["zen", "samples_per_s"] / zen_lstm.loc["sparcml", "samples_per_s"]
    assert zen_lstm.loc["sparcml", "paper"] == 1.67 and zen_lstm.loc["sparcml", "model_ratio"] == pytest.approx(ratio)


def test_the_papers_numbers_never_feed_the_model(table, monkeypatch):
    monkeypatch.setattr(paper_numbers, "PAPER_NUMBERS", ())
    bare = paper_figures(("lstm", "opt"), machines=(2, 4, 8, 16), workload_of=FAKES.__getitem__)
    assert bare["paper"].isna().all() and bare.attrs["paper"].empty
    modelled = [c for c in bare.columns if not c.startswith(("paper", "model_ratio", "cause"))]
    pd.testing.assert_frame_equal(bare[modelled], table[modelled])


def test_every_paper_number_is_on_one_row_at_most_and_named_once():
    keys = [(e.figure, e.workload, e.testbed, e.scheme, e.over, e.metric) for e in paper_numbers.PAPER_NUMBERS]
    assert len(keys) == len(set(keys))
    rows = [(e.workload, e.testbed, e.machines, paper_numbers.row_of(e)) for e in paper_numbers.PAPER_NUMBERS]
    placed = [r for r in rows if r[-1] is not None]
    assert len(placed) == len(set(placed)) == 29  # all but the 4 maxima over workloads and Zen over its COO variant


def test_the_generators_workloads_are_priced_at_table_1s_density_and_their_own_compute():
    t = paper_figures(("lstm",), ("paper-tcp25",), (2,), schemes=("allreduce", "zen"))
    assert t["density_per_gpu"].iloc[0] == pytest.approx(0.0113, rel=0.05)
    assert t["synthetic"].iloc[0] == paper_workload("lstm").synthetic
    zen = t.set_index("scheme").loc["zen"]
    assert 1 < zen["comm_speedup"] < 16  # fewer bytes than the dense table, never less than one GPU's rows
    # compute counts the tokens the model reads (128 sequences of 128), not the id law's draws
    lstm, nmt, deepfm = (paper_workload(n) for n in ("lstm", "nmt", "deepfm"))
    assert compute_tokens(lstm) == (128 * SHAPES["paper"]["lstm"].seq_len, "tokens") != (lstm.tokens_per_gpu, "tokens")
    assert compute_tokens(nmt)[0] == pytest.approx(64 * (18.1 + 21.0), rel=0.01)  # IWSLT's words per pair
    assert compute_tokens(deepfm) == (1024, "samples")
    assert zen["compute_s"] == pytest.approx(6 * 20e6 * 128 * 128 / (15.7e12 * 0.4))


def test_bad_options_are_errors():
    with pytest.raises(ValueError, match="unknown workloads"):
        paper_figures(("bert",), workload_of=FAKES.__getitem__)
    with pytest.raises(ValueError, match="allreduce"):
        paper_figures(("lstm",), schemes=("zen",), workload_of=FAKES.__getitem__)
    with pytest.raises(ValueError, match="flat only"):
        natural_syncs([torch.arange(4)] * 8, 16, 2, ("agsparse",), hierarchy={"agsparse": "node"})


def test_a_measured_step_is_the_compute_on_its_card_and_says_so(tmp_path):
    import json

    (tmp_path / "run").mkdir()
    row = {"workload": "lstm", "size": "paper", "forward_s": 0.1, "backward_s": 0.2, "optimizer_s": 0.05}
    pd.DataFrame([{**row, "step_s": 0.35, "batch": 128, "seq_len": 128}]).to_csv(tmp_path / "run/paper_compute.csv")
    (tmp_path / "run/env.json").write_text(json.dumps({"gpu_name": "NVIDIA H100 80GB HBM3", "date": "2026-12-01"}))
    lstm = FAKES["lstm"]
    got = step_compute(lstm, "h100", TCP, Links(), tmp_path)
    assert got.seconds == pytest.approx(0.35) and got.backward == pytest.approx(0.2)
    assert got.source.startswith("measured on NVIDIA H100 80GB HBM3, 2026-12-01")
    assumed = step_compute(lstm, "v100", TCP, Links(), tmp_path)
    assert assumed.seconds == pytest.approx(6 * 2e6 * 128 * 128 / (15.7e12 * 0.4))  # 128 sequences of 128 tokens
    assert assumed.source.startswith("assumed: V100 SXM2")


def test_the_benchmarks_figures_draw_the_model_and_star_the_papers_numbers(table):
    """Fig. 15 (``bench paper-figures``) against machines with the paper's communication speedups as stars, and
    ``bench paper``'s speedups at one scale beside the paper's."""
    import matplotlib.pyplot as plt

    from zen_analysis.plots.paper import comm_speedup_vs_machines, speedup_beside_paper

    fig = comm_speedup_vs_machines(table)
    stars = [c for ax in fig.axes for c in ax.collections]  # one scatter per paper number
    assert len(stars) == table[(table["paper_metric"] == "comm") & table["paper"].notna()].shape[0] > 0
    plt.close(fig)
    at16 = table[(table["machines"] == 16) & (table["testbed"] == "paper-tcp25")].assign(size="trace")
    fig = speedup_beside_paper(at16[["workload", "scheme", "size", "speedup", "paper"]])
    assert len(fig.axes) == 1 and len(fig.axes[0].patches) == 2 * (at16["scheme"].nunique() - 1)
    plt.close(fig)


def test_the_lab_checks_figure_has_a_panel_per_rank_count_and_the_model_beside_every_bar():
    import matplotlib.pyplot as plt

    from zen_analysis.plots.paper import lab_check_steps

    rows = [
        {"ranks": n, "scheme": s, "measured_s": m, "modelled_s": 1.1 * m, "compute_s": 0.1}
        for n in (8, 16)
        for s, m in (("allreduce", 0.5), ("zen", 0.2), ("bp_coo", 0.18))
    ]
    fig = lab_check_steps(pd.DataFrame(rows))
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["bp_coo", "zen", "allreduce"]  # fastest first
        assert len(ax.patches) == 6 and ax.collections[0].get_offsets()[:, 1].tolist() == pytest.approx(
            [0.198, 0.22, 0.55]
        )
    plt.close(fig)
