"""The exchange replay against stock DDP's sparse path (zen_experiments.exchange_replay): which rows and values
a lab rank holds, and the sweep's sums equal to stock's (bit for bit on integer values) behind shaped links."""

import numpy as np
import pytest
import torch

from zen_analysis import paths
from zen_analysis.capture.traces import SparseGrad, TraceWriter, collect_shards, write_manifest
from zen_analysis.ranks import netlab
from zen_analysis.zen.hashing import hash_owner
from zen_experiments.exchange_replay import busiest_rows, exchange_sweep, rank_step_rows

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
    assert set(df["scheme"]) == {"stock", "zen", "sparse_ps", "agsparse", "sparcml"}
    assert sorted(df["ranks"].unique()) == [2, 4]
    assert (df["max_diff_vs_stock"] == 0).all()  # integer values: bit for bit
    assert (df["measured_s"] > 0).all() and (df["written_bytes"] > 0).all()
    four = df[df["ranks"] == 4]
    union = torch.unique(torch.cat([_ids(s, w) for s in range(2) for w in range(4)])).numel()
    assert (four["rows_union"] == union).all()
    assert (df[df["scheme"] == "stock"]["lead_vs_stock"] == 1).all()
    for n, g in df.groupby("ranks"):
        _check_busiest_rows(g.set_index("scheme"), n)
    with pytest.raises(ValueError, match="keep 'stock'"):
        exchange_sweep(rid, ranks=[2], schemes=["zen"], model=False, progress=False)


def _lab_sets(n: int) -> list[torch.Tensor]:
    """Lab rank r's rows at ``n`` lab ranks of the run above: training rank r % 2 (workers 2 (r % 2) and the next)
    at captured step r // 2."""
    return [torch.unique(torch.cat([_ids(r // 2, w) for w in (2 * (r % 2), 2 * (r % 2) + 1)])) for r in range(n)]


def _check_busiest_rows(g, n: int) -> None:
    """The busiest rank's rows of each scheme, recomputed here from the rows each lab rank holds: contiguous owners of
    ROWS // n rows each (modded-nanogpt's rows_per_rank = N // world; ROWS divides by n) for sparse_ps, h0 for zen."""
    sets = _lab_sets(n)
    union = torch.unique(torch.cat(sets))
    assert g.loc["sparse_ps", "label"] == "contiguous rows (sparse_ps)"
    for scheme, owner in (("sparse_ps", lambda rows: rows // (ROWS // n)), ("zen", hash_owner(n, 0))):
        held = [np.bincount(owner(s).numpy(), minlength=n) for s in sets]  # rows rank i sends each owner
        received = [sum(int(held[i][p]) for i in range(n) if i != p) for p in range(n)]
        sent = [int(held[i].sum() - held[i][i]) for i in range(n)]
        owned = np.bincount(owner(union).numpy(), minlength=n)  # what each rank holds after the push
        moved = [received[p] + sent[p] + owned[p] * (n - 1) + union.numel() - owned[p] for p in range(n)]
        row = g.loc[scheme]
        assert row["push_rows_max"] == max(received)
        assert row["owned_rows_max"] == owned.max()
        assert row["rows_moved_max"] == max(moved)
        assert row["pull_imbalance"] == pytest.approx(n * owned.max() / union.numel())
        assert row["rows_match_model"] is True
    counts = [s.numel() for s in sets]  # agsparse: every rank's rows to every rank
    assert g.loc["agsparse", "rows_moved_max"] == max(c * (n - 1) + sum(counts) - c for c in counts)
    assert np.isnan(g.loc["agsparse", "owned_rows_max"]) and np.isnan(g.loc["stock", "rows_moved_max"])


def test_busiest_rows_flag_records_that_do_not_match_the_owners_model():
    """Two ranks, rows {0, 1} and {1, 3} of 4, contiguous owners of 2 rows each: rank 1 owns row 3, receives nothing
    and sends row 1 (a 4-byte index and two 4-byte values a row, COO). A record off by one row is caught."""
    sets, entry = [torch.tensor([0, 1]), torch.tensor([1, 3])], 4 + 4 * 2
    exact = [{"push": (0, entry), "pull": (2 * entry, entry)}, {"push": (entry, 0), "pull": (entry, 2 * entry)}]
    got = busiest_rows("sparse_ps", exact, sets, 4, 2)
    assert (got["push_rows_max"], got["owned_rows_max"], got["rows_match_model"]) == (1, 2, True)
    off = [exact[0], {"push": (entry, 0), "pull": (2 * entry, 2 * entry)}]
    assert busiest_rows("sparse_ps", off, sets, 4, 2)["rows_match_model"] is False
    assert busiest_rows("sparcml", exact, sets, 4, 2)["rows_match_model"] is None
