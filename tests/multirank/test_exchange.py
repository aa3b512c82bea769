"""The exchange replay against stock DDP's sparse path (zen_experiments.exchange_replay): which rows and values
a lab rank holds, and the sweep's sums equal to stock's (bit for bit on integer values) behind shaped links."""

import pytest
import torch

from zen_analysis import paths
from zen_analysis.capture.traces import SparseGrad, TraceWriter, collect_shards, write_manifest
from zen_analysis.ranks import netlab
from zen_experiments.exchange_replay import exchange_sweep, rank_step_rows

ROWS, WIDTH = 400, 3


def _ids(step: int, worker: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(100 * step + worker)
    return torch.unique(torch.randint(0, ROWS // (1 + worker), (40,), generator=gen))


def _values(step: int, worker: int, n: int) -> torch.Tensor:
    return torch.randint(-5, 6, (n,), generator=torch.Generator().manual_seed(7 + 100 * step + worker)).float()


def _run(rid: str) -> str:
    """A run of 2 training ranks x 2 micro-batches (4 workers), 2 captured steps, integer gradient values."""
    wr = TraceWriter(paths.trace_dir(rid), rank=0, run_id=rid, world_size=1, steps_per_shard=2)
    for step in range(2):
        for w in range(4):
            rows = _ids(step, w)
            idx = (rows[:, None] * WIDTH + torch.arange(WIDTH)).reshape(-1)
            wr.add(SparseGrad(step, w, 0, "emb", "natural", (ROWS, WIDTH), idx, _values(step, w, idx.numel())))
        wr.end_step()
    wr.close()
    write_manifest(
        paths.trace_dir(rid),
        {
            "run_id": rid,
            "num_workers": 4,
            "workers_per_rank": 2,
            "tensors": {"emb": {"kind": "natural", "shape": [ROWS, WIDTH], "numel": ROWS * WIDTH}},
            "shards": collect_shards(paths.trace_dir(rid), 1),
        },
    )
    return rid


def test_a_lab_rank_holds_one_training_rank_step_its_micro_batches_summed():
    rid = _run("exchange-rows")
    for lab_rank, (step, workers) in enumerate([(0, (0, 1)), (0, (2, 3)), (1, (0, 1)), (1, (2, 3))]):
        rows_K, values_KD, num_rows, width = rank_step_rows(rid, 4, lab_rank)
        dense = torch.zeros(ROWS * WIDTH)
        for w in workers:
            rows = _ids(step, w)
            dense.index_add_(
                0, (rows[:, None] * WIDTH + torch.arange(WIDTH)).reshape(-1), _values(step, w, 3 * len(rows))
            )
        expect = torch.unique(torch.cat([_ids(step, w) for w in workers]))
        assert (num_rows, width) == (ROWS, WIDTH)
        assert torch.equal(rows_K, expect)
        assert torch.equal(values_KD, dense.view(ROWS, WIDTH)[expect])
    # one micro-batch a lab rank: 8 rank-steps, lab rank 5 is worker 1 of step 1
    rows_K, _, _, _ = rank_step_rows(rid, 8, 5, workers_per_rank=1)
    assert torch.equal(rows_K, _ids(1, 1))
    with pytest.raises(ValueError, match="2 captured steps x 2 ranks = 4 rank-steps"):
        rank_step_rows(rid, 5, 4)


@pytest.mark.smoke
@pytest.mark.skipif(not netlab.available()[0], reason=f"network lab unavailable: {netlab.available()[1]}")
def test_the_sweep_sums_what_stock_ddp_sums_behind_shaped_links():
    rid = _run("exchange-sweep")
    df = exchange_sweep(rid, ranks=[2, 4], bandwidths=[1.0], repeats=3, model=False, progress=False)
    assert set(df["scheme"]) == {"stock", "zen", "agsparse", "sparcml"} and sorted(df["ranks"].unique()) == [2, 4]
    assert (df["max_diff_vs_stock"] == 0).all()  # integer values: bit for bit
    assert (df["measured_s"] > 0).all() and (df["written_bytes"] > 0).all()
    four = df[df["ranks"] == 4]
    union = torch.unique(torch.cat([_ids(s, w) for s in range(2) for w in range(4)])).numel()
    assert (four["rows_union"] == union).all()
    assert (df[df["scheme"] == "stock"]["lead_vs_stock"] == 1).all()
    with pytest.raises(ValueError, match="keep 'stock'"):
        exchange_sweep(rid, ranks=[2], schemes=["zen"], model=False, progress=False)
