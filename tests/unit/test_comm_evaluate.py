"""evaluate(): one row per (tensor, step, n, scheme, topology), consistent with scheme.time; best_scheme."""

import pytest
import torch

from zen_analysis import paths
from zen_analysis.capture.traces import SparseGrad, TraceWriter, write_manifest
from zen_analysis.comm import build_scheme
from zen_analysis.comm.calibrate import preset
from zen_analysis.comm.evaluate import best_scheme, evaluate
from zen_analysis.wire.topology import Topology

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
    from zen_analysis.comm.evaluate import evaluate_runs, normalized, step_index_sets

    df = evaluate_runs([run_id], topologies=("paper-tcp25",), progress=False)
    table = normalized(df, topology="paper-tcp25")
    assert (table["allreduce"] == 1.0).all() and set(table.index.get_level_values("n")) == {2, 4}
    sets, numel = step_index_sets(run_id, num_workers=3)
    assert numel == N and len(sets) == 3 and torch.equal(sets[1], _set(0, 1))
