"""Zen's collective on real gloo ranks: flat on any group size, and the hierarchical mode (2 nodes x 2 ranks, the
node's sum dense or by Zen's own push and pull), on values that cancel to exact zeros."""

import pytest
import torch

from zen_analysis.ranks.procs import fork_launch


def _body(rank, world, numel):
    import torch.distributed as dist

    from zen_analysis.wire.exchange import Exchange
    from zen_analysis.zen.sparse_allreduce import NodeGroups, zen_sum, zen_sum_hierarchical

    groups = NodeGroups(2)
    out = []
    for case in range(4):
        gen = torch.Generator().manual_seed(case * 10 + rank)
        x = torch.zeros(numel)
        k = min(numel, [0, 5, numel // 3, numel][case])
        idx = torch.randperm(numel, generator=gen)[:k]
        x[idx] = torch.randint(-3, 4, (k,), generator=gen).float()
        ref = x.clone()
        dist.all_reduce(ref)
        flat = zen_sum(x.clone(), Exchange(), seed=7, hashing="argsort" if case % 2 else "hierarchical")
        hier = [
            torch.equal(zen_sum_hierarchical(x.clone(), groups, seed=7, node_sum=mode), ref)
            for mode in ("dense", "sparse")
        ]
        out.append((torch.equal(flat, ref), all(hier)))
    return out


@pytest.mark.smoke
def test_zen_sum_flat_and_hierarchical_equal_all_reduce():
    for numel in (1, 1001):
        for rank_results in fork_launch(_body, 4, numel):
            assert all(flat and hier for flat, hier in rank_results), rank_results
