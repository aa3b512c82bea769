"""Algorithm 1 (hierarchical hashing) and the hash bitmap: lossless and consistent on random and adversarial
index sets, identical partitions to the argsort reference, exact encode/decode round trips."""

import os
import shutil

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zen_analysis.zen import native
from zen_analysis.zen.bitmap import HashBitmap, hash_partitions
from zen_analysis.zen.hashing import h0, owner
from zen_analysis.zen.hierarchical import bucket_reference, hierarchical_hash

# the compiled kernel must build wherever a C compiler exists (CI has one); only without a compiler is it skipped
NATIVE = pytest.param("native", marks=pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None and not native.available(), reason="no C compiler"))
BACKENDS = ["torch", NATIVE]


def _check_lossless(idx, n, seed, **kw):
    b = hierarchical_hash(idx, n, seed=seed, **kw)
    got = torch.sort(b.positions_K).values
    assert torch.equal(got, torch.arange(idx.numel())), "every index exactly once"
    parts = b.split(idx)
    ref = bucket_reference(idx, n, seed=seed).split(idx)
    for p, (a, r) in enumerate(zip(parts, ref)):
        assert torch.equal(torch.sort(a).values, torch.sort(r).values), f"partition {p} differs from the reference"
        assert (owner(a, n, seed) == p).all()
    return b


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 10**6), max_size=400), st.integers(1, 40), st.integers(0, 2**32 - 1), st.integers(0, 4))
def test_random_sets_are_bucketed_losslessly_by_h0(backend, raw, n, seed, k):
    _check_lossless(torch.tensor(sorted(raw), dtype=torch.long), n, seed, k=k, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adversarial_inputs(backend):
    n, seed = 8, 3
    # every index maps to partition 0 under h0: one partition takes the whole load, its serial region overflows
    cand = torch.arange(200_000)
    one = cand[owner(cand, n, seed) == 0][:5000]
    b = _check_lossless(one, n, seed, backend=backend)
    assert b.counts_n.tolist() == [5000] + [0] * 7 and b.serial_overflows == 1
    # a tiny parallel region forces most indices through the serial path
    b = _check_lossless(torch.arange(3000), n, seed, r1=8, r2=8, backend=backend)
    assert b.serial_count > 2900 and b.serial_overflows > 0
    # endpoints, a single index, empty input, k = 0 (serial only)
    _check_lossless(torch.tensor([0, 2**31 - 1, 2**40]), n, seed, backend=backend)
    _check_lossless(torch.tensor([5]), 1, seed, backend=backend)
    assert hierarchical_hash(torch.zeros(0, dtype=torch.long), n, seed=seed, backend=backend).counts_n.tolist() == [0] * n
    _check_lossless(torch.arange(100), n, seed, k=0, backend=backend)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_native_kernel_threads_and_hash_match_torch(threads):
    if not native.available():
        pytest.skip(native.unavailable_reason())
    big = torch.randint(0, 2**62, (5000,), generator=torch.Generator().manual_seed(1))
    assert torch.equal(native.h0(big, 77), h0(big, 77)), "the C h0 differs from zen.hashing.h0"
    # enough indices for several chunks, non-power-of-two n (h0 % n), and one partition overflowing across threads
    idx = torch.randperm(2_000_000, generator=torch.Generator().manual_seed(2))[:300_000]
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        _check_lossless(idx, 12, 9, backend="native")
        _check_lossless(idx, 12, 9, r1=1000, r2=100, backend="native")
        _check_lossless(idx, 12, 9, level2_seed=4, backend="native")
    finally:
        torch.set_num_threads(old)


def test_same_index_same_partition_on_every_rank_whatever_the_level2_seeds():
    # two "ranks" share part of their non-zeros and use different second-level seeds
    shared = torch.arange(0, 50_000, 7)
    ranks = [torch.cat([shared, torch.arange(r + 1, 9000, 3 + r)]).unique() for r in range(2)]
    # one rank on the torch rounds, the other on the native kernel (when it builds): the partitions still agree
    buckets = [hierarchical_hash(idx, 16, seed=11, level2_seed=r, backend=b) for r, idx, b in zip(range(2), ranks, ("torch", "auto"))]
    for p in range(16):
        where = [set(b.split(idx)[p].tolist()) & set(shared.tolist()) for b, idx in zip(buckets, ranks)]
        assert where[0] == where[1] == set(shared[owner(shared, 16, 11) == p].tolist())


@pytest.mark.parametrize("backend", BACKENDS)
def test_serial_fraction_near_the_balls_into_bins_estimate(backend):
    idx = torch.randperm(10**7, generator=torch.Generator().manual_seed(0))[:200_000]
    b = hierarchical_hash(idx, 16, seed=5, k=3, backend=backend)
    # load factor 0.5 with k = 3: about alpha^k / (k + 1) ~ 3% go serial (digest section 4.4); allow 1-8%
    assert 0.01 < b.serial_count / idx.numel() < 0.08


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 17), st.integers(0, 1000), st.floats(0, 1))
def test_hash_bitmap_round_trips(numel, n, seed, density):
    hb = HashBitmap(numel, n, seed)
    lazy = HashBitmap(numel, n, seed, materialize=False)
    gen = torch.Generator().manual_seed(seed)
    for p in range(n):
        s_p = hb.partition(p).long()
        assert torch.equal(s_p, lazy.partition(p).long())
        keep = s_p[torch.rand(s_p.numel(), generator=gen) < density]
        vals = torch.randn(keep.numel(), generator=gen)
        shuffled = torch.randperm(keep.numel(), generator=gen)
        bitmap, v = hb.encode(p, keep[shuffled], vals[shuffled])
        assert bitmap.numel() == hb.bitmap_bytes(p) == (s_p.numel() + 7) // 8
        idx, out = hb.decode(p, bitmap, v)
        assert torch.equal(idx, keep) and torch.equal(out, vals)
    assert sum(hb.sizes) == numel and torch.equal(torch.sort(torch.cat(hash_partitions(numel, n, seed)).long()).values, torch.arange(numel))


def test_encode_rejects_foreign_indices():
    hb = HashBitmap(1000, 4, 0)
    foreign = hb.partition(1)[:3].long()
    with pytest.raises(ValueError, match="outside partition 0"):
        hb.encode(0, foreign, torch.ones(3))
