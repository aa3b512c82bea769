"""Fig. 11-14 at the paper's scale, modelled: every row's arithmetic as documented, on a small synthetic trace."""

import math

import numpy as np
import pytest
import torch

from zen_analysis import paths, recipes
from zen_analysis.capture.traces import SparseGrad, TraceWriter, write_manifest
from zen_analysis.comm.schemes import build_scheme
from zen_analysis.paper.scale import DEVICES, gpu_row_sets, paper_throughput
from zen_analysis.pricing.cost import total_seconds
from zen_analysis.pricing.topology import PRESETS

R, D, WORKERS, STEPS = 4096, 64, 8, 2  # lstm-words-smoke's table: 4,096 words x 64


def _worker_rows(step: int, worker: int) -> torch.Tensor:
    """A worker's distinct word ids: Zipf(1.1) over the table, skewed to the first rows as a frequency-sorted
    vocabulary is."""
    rng = np.random.default_rng(100 * step + worker)
    return torch.from_numpy(np.unique(np.minimum(rng.zipf(1.1, 128) - 1, R - 1)))


@pytest.fixture(scope="module")
def run_id():
    rid = "synthetic-paper-scale"
    wr = TraceWriter(paths.trace_dir(rid), rank=0, run_id=rid, world_size=1, steps_per_shard=2)
    for step in range(STEPS):
        for w in range(WORKERS):
            idx = (_worker_rows(step, w)[:, None] * D + torch.arange(D)).reshape(-1)
            wr.add(SparseGrad(step, w, 0, "embed.weight", "natural", (R, D), idx, torch.ones(idx.numel())))
        wr.end_step()
    wr.close()
    cfg = recipes.lstm_words_smoke()
    tensors = {"embed.weight": {"kind": "natural", "shape": [R, D], "numel": R * D}}
    write_manifest(paths.trace_dir(rid), {"run_id": rid, "tensors": tensors, "config": cfg.to_dict()})
    return rid


def test_a_row_is_the_documented_arithmetic(run_id):
    cfg = recipes.lstm_words_smoke()
    df = paper_throughput(run_id, machines=2, overlap=0.5).set_index("scheme")
    n, batch, seq = 16, 128, cfg.train.seq_len  # 2 machines x 8 GPUs; the paper's 128 sequences per GPU
    from zen_analysis.workload.models import build_model

    model = build_model(cfg.model, vocab_size=R, max_seq_len=seq)
    dense = sum(p.numel() for p in model.parameters()) - R * D
    assert df.attrs["dense_params"] == dense
    compute = 6 * dense * batch * seq / (15.7e12 * 0.4)
    # ring all-reduce of the dense parameters: 2 (n - 1) steps on the ring's slowest link (25 Gbit/s between nodes,
    # unshared), each one alpha (30 us) and a chunk of ceil(dense / n) float32
    dense_comm = 2 * (n - 1) * (30e-6 + math.ceil(dense / n) * 4 / (25e9 / 8))
    pool = [_worker_rows(s, w) for s in range(STEPS) for w in range(WORKERS)]
    sets = gpu_row_sets(pool, R, batch / cfg.train.batch_per_worker, n, seed=0)
    zen = total_seconds(build_scheme("zen").model(sets, R, width=D), PRESETS["paper-tcp25"].for_ranks(n), "zen")
    row = df.loc["zen"]
    assert row["compute_s"] == pytest.approx(compute)
    assert row["dense_comm_s"] == pytest.approx(dense_comm)
    assert row["hidden_s"] == pytest.approx(min(dense_comm, 0.5 * compute * 2 / 3))
    assert row["sparse_comm_s"] == pytest.approx(zen)
    step = compute + dense_comm - row["hidden_s"] + zen
    assert row["step_s"] == pytest.approx(step)
    assert row["samples_per_s"] == pytest.approx(n * batch / step)
    assert row["tokens_per_s"] == pytest.approx(n * batch * seq / step)
    assert row["speedup"] == pytest.approx(row["samples_per_s"] / df.loc["allreduce", "samples_per_s"])
    assert row["paper"] == pytest.approx(3.1) and isinstance(row["reason"], str) and row["reason"]
    assert set(df.index) == {"allreduce", "agsparse", "sparcml", "omnireduce", "zen", "ddp_sparse"}


def test_more_bandwidth_leaves_communication_a_smaller_share(run_id):
    def comm_share(topology):
        df = paper_throughput(run_id, topology=topology, machines=2).set_index("scheme")
        return (df["step_s"] - df["compute_s"]) / df["step_s"]

    tcp25, efa100 = comm_share("paper-tcp25"), comm_share("paper-efa100")
    assert (efa100 < tcp25).all(), (tcp25, efa100)
    faster = paper_throughput(run_id, machines=2, device="h200").set_index("scheme")
    assert faster["compute_s"].iloc[0] == pytest.approx(
        paper_throughput(run_id, machines=2).set_index("scheme")["compute_s"].iloc[0]
        * DEVICES["v100"].flops
        / DEVICES["h200"].flops
    )


def test_zen_moves_fewer_bytes_than_agsparse_at_128_ranks_on_a_skewed_trace():
    pool = [_worker_rows(s, w) for s in range(STEPS) for w in range(WORKERS)]
    sets = gpu_row_sets(pool, R, 4.0, 128, seed=1)
    zen = build_scheme("zen").model(sets, R, width=D)
    ag = build_scheme("agsparse").model(sets, R, width=D)
    assert zen.received().max() < ag.received().max() / 4
    assert zen.sent().sum() < ag.sent().sum() / 4


def test_gpu_row_sets_merge_batches_by_row_frequency():
    always, never = torch.tensor([3]), torch.tensor([5])
    pool = [torch.tensor([3, 7]), torch.tensor([3]), torch.tensor([3, 9]), torch.tensor([3])]
    sets = gpu_row_sets(pool, 10, 2.0, 400, seed=0)
    assert all(always.item() in s.tolist() and never.item() not in s.tolist() for s in sets)
    hits = sum(7 in s.tolist() for s in sets) / len(sets)  # f = 1/4, merged twice: 1 - (3/4)^2 = 0.4375
    assert hits == pytest.approx(1 - 0.75**2, abs=0.07)
    with pytest.raises(ValueError, match="no captured row sets"):
        gpu_row_sets([], 10, 2.0, 4)


def test_bad_options_are_errors(run_id):
    with pytest.raises(ValueError, match="size"):
        paper_throughput(run_id, size="huge")
    with pytest.raises(ValueError, match="unknown device"):
        paper_throughput(run_id, device="tpu")
    with pytest.raises(ValueError, match="overlap"):
        paper_throughput(run_id, overlap=1.5)


def test_the_crossover_at_the_papers_rows_is_stock_crossover_on_the_merged_rows(run_id):
    from dataclasses import replace

    from zen_analysis.evaluation.crossover import stock_crossover
    from zen_analysis.paper.scale import paper_crossover
    from zen_analysis.pricing.topology import GBPS

    got = paper_crossover(run_id, ranks=(8, 16), rates=(1.0, 100.0))
    pool = [_worker_rows(s, w) for s in range(STEPS) for w in range(WORKERS)]
    sets = gpu_row_sets(pool, R, 128 / recipes.lstm_words_smoke().train.batch_per_worker, 16, seed=0)
    at = lambda rate, n: replace(PRESETS["paper-tcp25"], inter_bandwidth=rate * GBPS)  # noqa: E731
    want = stock_crossover(sets, R, D, at, ranks=(8, 16), rates=(1.0, 100.0))
    assert got["grid"].equals(want["grid"]) and got["run_id"] == run_id
