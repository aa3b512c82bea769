"""The paper's metrics against hand-computed values, edge cases, and properties (hypothesis)."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zen_analysis.sparsity import (
    contiguous_owner,
    densification_ratio,
    density,
    drift,
    imbalance_ratios,
    index_set,
    jaccard,
    overlap_ratio,
    pairwise_overlap_ratios,
    partition_of,
    partition_shares,
    rows_of,
    skewness_ratio,
)

T = torch.tensor


def test_density_counts_unique_indices():
    assert density(T([3, 1, 3, 7]), 10) == 0.3
    assert density(T([], dtype=torch.long), 10) == 0.0


def test_overlap_ratio_hand_values_and_edges():
    assert overlap_ratio(T([1, 2, 3, 4]), T([3, 4, 5])) == 2 / 3
    assert overlap_ratio(T([1, 2]), T([1, 2])) == 1.0  # identical
    assert overlap_ratio(T([1, 2]), T([3, 4])) == 0.0  # disjoint
    assert overlap_ratio(T([5]), T([1, 5, 9, 12])) == 1.0  # subset: min in the denominator
    assert math.isnan(overlap_ratio(T([], dtype=torch.long), T([1])))  # empty: undefined


def test_pairwise_overlaps_match_the_scalar_definition():
    gen = torch.Generator().manual_seed(0)
    sets = [torch.randint(0, 200, (int(n),), generator=gen) for n in (50, 80, 1, 120)] + [T([], dtype=torch.long)]
    got = pairwise_overlap_ratios(sets)
    want = [overlap_ratio(sets[i], sets[j]) for i in range(5) for j in range(i + 1, 5)]
    np.testing.assert_allclose(got, want, equal_nan=True)


def test_densification_ratio_hand_values_and_edges():
    assert densification_ratio([T([0, 1]), T([1, 2])]) == 3 / 2
    assert densification_ratio([T([0, 1]), T([0, 1])]) == 1.0  # identical: no densification
    assert densification_ratio([T([0, 1]), T([2, 3])]) == 2.0  # disjoint: gamma = n
    assert densification_ratio([T([0, 1, 2, 3]), T([], dtype=torch.long)]) == 4 / 2
    assert math.isnan(densification_ratio([T([], dtype=torch.long)] * 3))


def test_partitions_follow_the_documented_boundaries_when_numel_is_not_divisible():
    # numel 10, 3 partitions: [0,3) [3,6) [6,10)
    assert partition_of(T([0, 2, 3, 5, 6, 9]), 10, 3).tolist() == [0, 0, 1, 1, 2, 2]
    np.testing.assert_allclose(partition_shares(T([0, 1, 2, 9]), 10, 3), [0.75, 0.0, 0.25])
    with pytest.raises(ValueError):
        partition_of(T([10]), 10, 3)


def test_skewness_hand_values_and_edges():
    assert skewness_ratio(T([0, 1, 2, 9]), 10, 3) == pytest.approx(3 * 0.75)
    assert skewness_ratio(T([0, 1]), 100, 8) == 8.0  # all in one partition: s = n
    assert skewness_ratio(T(list(range(0, 80, 10))), 80, 8) == 1.0  # perfectly even
    assert math.isnan(skewness_ratio(T([], dtype=torch.long), 10, 2))


def test_imbalance_ratios_contiguous_owner():
    numel, n = 8, 2
    sets = [T([0, 1, 2, 5]), T([0, 6])]
    push, pull = imbalance_ratios(sets, numel, contiguous_owner(numel, n), n)
    assert push == 2 * 3 / 4  # worker 0 sends 3 of 4 to partition 0
    assert pull == 2 * 3 / 5  # union {0,1,2,5,6}: partition 0 owns 3
    empty = T([], dtype=torch.long)
    assert imbalance_ratios([empty, T([7])], numel, contiguous_owner(numel, n), n) == (2.0, 2.0)
    assert all(math.isnan(x) for x in imbalance_ratios([empty, empty], numel, contiguous_owner(numel, n), n))


def test_rows_and_jaccard_and_drift():
    assert rows_of(T([0, 1, 2, 3, 8, 9]), 4).tolist() == [0, 2]
    assert jaccard(T([1, 2, 3]), T([2, 3, 4])) == 0.5
    assert math.isnan(jaccard(T([], dtype=torch.long), T([], dtype=torch.long)))
    np.testing.assert_allclose(drift([T([1, 2]), T([1, 2]), T([3])]), [1.0, 0.0])


def test_float_indices_are_refused():
    with pytest.raises(ValueError, match="integer"):
        index_set(torch.tensor([1.0, 2.0]))


# ---- properties

index_lists = st.lists(st.integers(0, 999), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(st.lists(index_lists, min_size=1, max_size=8))
def test_gamma_between_1_and_n(lists):
    g = densification_ratio([T(ix) for ix in lists])
    assert 1.0 - 1e-12 <= g <= len(lists) + 1e-12


@settings(max_examples=60, deadline=None)
@given(index_lists, index_lists)
def test_overlap_between_0_and_1_and_symmetric(a, b):
    r = overlap_ratio(T(a), T(b))
    assert 0.0 <= r <= 1.0 and r == overlap_ratio(T(b), T(a))


@settings(max_examples=60, deadline=None)
@given(index_lists, st.integers(1, 1000), st.integers(1, 128))
def test_shares_sum_to_1_and_skewness_between_1_and_n(idx, extra, n):
    numel = 1000 + extra
    shares = partition_shares(T(idx), numel, n)
    assert shares.shape == (n,) and abs(shares.sum() - 1.0) < 1e-9
    s = skewness_ratio(T(idx), numel, n)
    assert 1.0 - 1e-9 <= s <= n + 1e-9


@settings(max_examples=40, deadline=None)
@given(st.lists(index_lists, min_size=1, max_size=6), st.integers(1, 16))
def test_imbalance_at_least_1_and_at_most_n(lists, n):
    push, pull = imbalance_ratios([T(ix) for ix in lists], 1000, contiguous_owner(1000, n), n)
    assert 1.0 - 1e-9 <= push <= n + 1e-9 and 1.0 - 1e-9 <= pull <= n + 1e-9
