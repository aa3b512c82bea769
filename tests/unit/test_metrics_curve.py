"""densification_curve: the prefix densification ratios in one pass, equal to computing each from scratch."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zen_analysis.sparsity.metrics import densification_curve, densification_ratio

sets_st = st.lists(st.lists(st.integers(0, 199), max_size=40), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(sets_st, st.data())
def test_the_curve_equals_the_ratio_of_every_prefix(raw, data):
    sets = [torch.tensor(s, dtype=torch.long) for s in raw]  # unsorted, with duplicates: index sets of any shape
    ns = sorted(data.draw(st.sets(st.integers(1, len(sets)), min_size=1)))
    got = densification_curve(sets, ns, 200)
    for n, g in zip(ns, got):
        want = densification_ratio(sets[:n])
        assert (math.isnan(g) and math.isnan(want)) or g == pytest.approx(want)


def test_ns_must_ascend_within_the_sets():
    with pytest.raises(ValueError, match="ascend"):
        densification_curve([torch.tensor([1])], [2], 10)
