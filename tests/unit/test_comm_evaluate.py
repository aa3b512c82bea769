"""evaluate(): one row per (tensor, step, n, scheme, topology), consistent with scheme.time; best_scheme."""

import pytest
import torch

from zen_analysis import paths
from zen_analysis.capture.traces import SparseGrad, TraceWriter, write_manifest
from zen_analysis.comm import build_scheme
from zen_analysis.evaluation.calibrate import preset
from zen_analysis.evaluation.evaluate import best_scheme, evaluate
from zen_analysis.pricing.topology import LOCAL_FIT, Topology

W, N = 4, 4096


def _set(step, w):
    gen = torch.Generator().manual_seed(10 * step + w)
    return torch.unique(torch.randint(0, N // 4, (200,), generator=gen))  # skewed to the first quarter


@pytest.fixture(scope="module")
def run_id():
    rid = "synthetic-evaluate"
    wr = TraceWriter(paths.trace_dir(rid), rank=0, run_id=rid, world_size=1, steps_per_shard=2)
    for step in range(2):
        for w in range(W):
            idx = _set(step, w)
            wr.add(SparseGrad(step, w, 0, "t", "topk", (N,), idx, torch.ones(idx.numel())))
        wr.end_step()
    wr.close()
    write_manifest(paths.trace_dir(rid), {"run_id": rid, "tensors": {"t": {"kind": "topk", "shape": [N], "numel": N}}})
    return rid


def test_evaluate_rows_match_scheme_time(run_id):
    df = evaluate(run_id, topologies=("paper-tcp25", "h200-node"), progress=False)
    assert set(df["scheme"]) == {"allreduce", "agsparse", "sparcml", "omnireduce", "sparse_ps", "bp_coo", "zen"}
    assert sorted(df["n"].unique()) == [2, 4] and sorted(df["step"].unique()) == [0, 1]
    assert len(df) == 2 * 2 * 7 * 2  # steps x n x schemes x topologies
    row = df.query("step == 1 and n == 4 and scheme == 'zen' and topology == 'paper-tcp25'").iloc[0]
    sets = [_set(1, w) for w in range(W)]
    want = build_scheme("zen").time(sets, N, preset("paper-tcp25"))["seconds"].sum()
    assert row["seconds"] == pytest.approx(want)
    assert row["bytes_sent_total"] == build_scheme("zen").traffic(sets, N)["bytes_sent"].sum()
    again = evaluate(run_id, topologies=("paper-tcp25", "h200-node"), progress=False)  # cached
    assert again.equals(df)


def test_best_scheme_prefers_balanced_parallelism_on_skewed_sparse_sets():
    flat = Topology(
        name="flat", gpus_per_node=1, intra_alpha_s=0, intra_bandwidth=1e9, inter_alpha_s=0, inter_bandwidth=1e9
    )
    sets = [_set(0, w) for w in range(W)]
    assert best_scheme(sets, N, flat, schemes=["allreduce", "sparse_ps", "bp_coo"]) == "bp_coo"
    dense = [torch.arange(N)] * W
    assert best_scheme(dense, N, flat, schemes=["allreduce", "agsparse", "bp_coo"]) == "allreduce"


def test_normalized_table_and_index_sets_for_replay(run_id):
    from zen_analysis.evaluation.evaluate import evaluate_runs, normalized, step_index_sets

    df = evaluate_runs([run_id], topologies=("paper-tcp25",), progress=False)
    table = normalized(df, topology="paper-tcp25")
    assert (table["allreduce"] == 1.0).all() and set(table.index.get_level_values("n")) == {2, 4}
    sets, numel = step_index_sets(run_id, num_workers=3)
    assert numel == N and len(sets) == 3 and torch.equal(sets[1], _set(0, 1))


def test_the_crossover_report_uses_stored_lab_calibrations_only(run_id, monkeypatch, tmp_path):
    from dataclasses import replace

    from zen_analysis.atomic import atomic_write_json
    from zen_analysis.evaluation.calibrate import netlab_calibration_path, netlab_host_calibration_path
    from zen_analysis.evaluation.crossover import crossover_report

    trace = paths.trace_dir(run_id)
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path))  # calibrations of its own: none stored yet
    assert crossover_report(trace) == [  # nothing calibrated (for 2 or 4 ranks): it says so, and calibrates nothing
        "no lab calibration to model the crossover on: `zen-analysis bench netlab` (root) makes one"
    ]
    assert not netlab_host_calibration_path(4).exists()
    lab = Topology(
        name="netlab-1",
        gpus_per_node=1 << 20,
        intra_alpha_s=1e-3,
        intra_bandwidth=1e8,
        inter_alpha_s=1e-3,
        inter_bandwidth=1e8,
        num_ranks=4,
        calibrated=(("all_to_all", 1e-3, 1e8), ("p2p", 1e-3, 1e8), ("all_reduce", 1e-4, 1e8)),
    )
    host = replace(lab, name="netlab-host-4", calibrated=tuple((p, a, 1e9) for p, a, _ in lab.calibrated))
    atomic_write_json(netlab_calibration_path(4), {**lab.to_dict(), "method": "schemes", "local_fit": LOCAL_FIT})
    atomic_write_json(netlab_host_calibration_path(4), {**host.to_dict(), "method": "schemes", "local_fit": LOCAL_FIT})
    (line,) = crossover_report(trace)  # 4 ranks only: 2 is not calibrated
    assert line.startswith("t, step 0, 4 ranks: dense all-reduce is modelled faster than every sparse scheme ")
