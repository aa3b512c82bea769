"""The hashed row orders of :mod:`zen_analysis.fsdp.hashed` and the received-rows model behind the balance bench."""

import pandas as pd
import pytest
import torch

from zen_analysis.fsdp.hashed import balls_into_bins_bound, fsdp_shard_rows, hashed_order, inverse, received_rows
from zen_analysis.zen.hashing import h0
from zen_experiments.bench_fsdp import bench_fsdp_balance


@pytest.mark.parametrize("strata", [None, 7, 256])
def test_a_hashed_order_is_a_fixed_permutation_and_its_inverse_finds_each_id(strata):
    order = hashed_order(1001, seed=5, strata=strata)
    assert torch.equal(torch.sort(order).values, torch.arange(1001))
    assert torch.equal(order, hashed_order(1001, seed=5, strata=strata))
    assert not torch.equal(order, hashed_order(1001, seed=6, strata=strata))
    assert torch.equal(inverse(order)[order], torch.arange(1001))
    with pytest.raises(ValueError, match="at least 2 ids"):
        hashed_order(10, strata=1)


def test_the_plain_order_sorts_by_h0_and_the_stratified_one_gives_every_shard_its_share_of_every_block():
    ids = torch.arange(4096)
    assert torch.equal(h0(hashed_order(4096, seed=2, strata=None), 2), torch.sort(h0(ids, 2)).values)
    order = hashed_order(4096, seed=2, strata=256)
    for world in (2, 4, 8, 16):
        per = fsdp_shard_rows(4096, world)
        for shard in order.split(per):
            assert torch.equal(torch.bincount(shard // 256, minlength=16), torch.full((16,), 256 // world))
        # within a block, the order is h0's
        block = order[order // 256 == 3]
        assert torch.equal(h0(block, 2), torch.sort(h0(block, 2)).values)


def test_received_rows_counts_each_ranks_distinct_ids_at_their_owners():
    sets = [torch.tensor([[0, 0, 5], [9, 5, 1]]), torch.tensor([9, 9, 2])]  # distinct: {0,1,5,9}, {2,9}
    # 10 rows on 3 ranks: shards of 4 rows, [0,4) [4,8) [8,10)
    assert received_rows(sets, 10, 3).tolist() == [3, 1, 2]
    roi = torch.tensor([9, 8, 7, 6, 5, 4, 3, 2, 1, 0])  # id i stored at row 9 - i
    assert received_rows(sets, 10, 3, roi).tolist() == [2, 2, 2]
    assert balls_into_bins_bound(0, 8) == 1.0 and 1.0 < balls_into_bins_bound(6000, 8) < 1.1


def test_the_balance_bench_reports_every_order_for_every_rank_count(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path))
    table = bench_fsdp_balance(["recipes=lstm-words-smoke", "ranks=2,4", "steps=2"])
    assert isinstance(table, pd.DataFrame) and len(table) == 6
    assert set(table.order) == {"contiguous", "h0", "stratified"}
    assert (table.busiest_over_mean_max >= table.busiest_over_mean_median).all()
    assert (tmp_path / "derived" / "fsdp" / "balance.txt").exists()
