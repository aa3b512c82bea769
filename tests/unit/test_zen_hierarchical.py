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
NATIVE = pytest.param(
    "native",
    marks=pytest.mark.skipif(
        shutil.which(os.environ.get("CC", "cc")) is None and not native.available(), reason="no C compiler"
    ),
)
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
    assert (
        hierarchical_hash(torch.zeros(0, dtype=torch.long), n, seed=seed, backend=backend).counts_n.tolist() == [0] * n
    )
    _check_lossless(torch.arange(100), n, seed, k=0, backend=backend)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_native_kernel_threads_and_hash_match_torch(threads):
    if not native.available():
        pytest.skip(native.unavailable_reason())
    big = torch.randint(0, 2**62, (5000,), generator=torch.Generator().manual_seed(1))
    assert torch.equal(native.kernel_h0(big, 77), h0(big, 77)), "the C h0 differs from zen.hashing.h0"
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
    buckets = [
        hierarchical_hash(idx, 16, seed=11, level2_seed=r, backend=b)
        for r, idx, b in zip(range(2), ranks, ("torch", "auto"))
    ]
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
    assert sum(hb.sizes) == numel and torch.equal(
        torch.sort(torch.cat(hash_partitions(numel, n, seed)).long()).values, torch.arange(numel)
    )


def test_encode_rejects_foreign_indices():
    hb = HashBitmap(1000, 4, 0)
    foreign = hb.partition(1)[:3].long()
    with pytest.raises(ValueError, match="outside partition 0"):
        hb.encode(0, foreign, torch.ones(3))


def test_bitmap_entry_points_refuse_bad_sizes_naming_the_argument():
    """numel < 0 and num_partitions < 1 are refused by every public entry point of the hash bitmap with a
    ValueError naming the argument and its value (not a torch internal's message); numel 0 is the empty set."""
    from zen_analysis.zen.bitmap import StaticSets, hash_partition_sizes, static_sets

    entry_points = {
        "StaticSets": lambda m, n: StaticSets(m, n, 0, torch.device("cpu")),
        "static_sets": lambda m, n: static_sets(m, n, 0),
        "hash_partitions": lambda m, n: hash_partitions(m, n, 0),
        "hash_partition_sizes": lambda m, n: hash_partition_sizes(m, n, 0),
        "HashBitmap": lambda m, n: HashBitmap(m, n, 0),
        "HashBitmap(materialize=False)": lambda m, n: HashBitmap(m, n, 0, materialize=False),
    }
    for _name, make in entry_points.items():
        for m, n, pattern in (
            (-5, 4, r"numel must be >= 0, got -5"),
            (10, 0, r"num_partitions must be >= 1, got 0"),
            (10, -2, r"num_partitions must be >= 1, got -2"),
        ):
            with pytest.raises(ValueError, match=pattern):
                make(m, n)
    empty = static_sets(0, 4, 0)
    assert empty.sizes == (0, 0, 0, 0) and empty.order.numel() == 0 and empty.rank_of.numel() == 0
    assert hash_partition_sizes(0, 4, 0) == (0, 0, 0, 0) and [p.numel() for p in hash_partitions(0, 3, 0)] == [0, 0, 0]
    assert (
        HashBitmap(0, 2, 0).partition(1).numel() == 0
        and HashBitmap(0, 2, 0, materialize=False).partition(1).numel() == 0
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_duplicate_indices_come_out_once_per_occurrence(backend):
    """What both backends do with a repeated index (the docstring said: "share a slot and come out once"): the hash
    memory holds input *positions*, so every occurrence takes its own slot and comes out once; positions_K stays a
    permutation of range(K), every copy lands in its h0 partition, and copies beyond k follow the same probes and
    spill to the serial region."""
    n, seed, k = 4, 1, 3
    idx = torch.cat([torch.full((20,), 5), torch.arange(100), torch.tensor([7, 7, 7])])  # 5 x 21, 7 x 4
    b = hierarchical_hash(idx, n, seed=seed, k=k, backend=backend)
    assert torch.equal(torch.sort(b.positions_K).values, torch.arange(idx.numel())), "every input position once"
    parts = b.split(idx)
    for p, part in enumerate(parts):
        assert (owner(part, n, seed) == p).all(), f"partition {p} holds only its h0 partition's indices"
    p5 = int(owner(torch.tensor([5]), n, seed))
    assert int((parts[p5] == 5).sum()) == 21 and int((torch.cat(parts) == 7).sum()) == 4, "as often as passed"
    assert b.counts_n.tolist() == torch.bincount(owner(idx, n, seed), minlength=n).tolist()
    assert b.serial_count >= 21 - k, "k probes place at most k copies of one index; the rest go serial"
    doc = " ".join(hierarchical_hash.__doc__.split())
    assert "come out once:" not in doc and "as many times as" in doc, "the docstring says what happens"


def test_static_sets_count_what_they_hold_and_build_no_hidden_table():
    """``StaticSets.nbytes`` counts every tensor a set keeps (S_p, the bounds, the position table, the
    accumulators), building a set leaves no h0 table behind (it used to keep 4 bytes per element in
    ``zen.hashing``'s table cache, uncounted), and the cache's default is the training config's."""
    from zen_analysis.config.sync import SyncConfig
    from zen_analysis.zen import bitmap, hashing

    sets = bitmap.StaticSets(50_001, 3, 2, torch.device("cpu"))
    sets.rank_of, sets.accumulator(1)
    kept = [sets.order, sets.starts_t, sets.byte_starts_t, sets.rank_of, *sets._acc.values()]
    assert sets.nbytes >= sum(t.untyped_storage().nbytes() for t in kept)
    assert sets.nbytes <= sum(t.untyped_storage().nbytes() for t in kept) + 4096  # and the lists of bounds, no more
    assert hashing.cached_h0_table(50_001, 2) is None, "a static set's build keeps no h0 table"
    hashing.clear_h0_tables()
    table = hashing.h0_table(50_001, 2)  # the traffic models' table, when one is kept, is read, not rebuilt
    assert hashing.h0_table_nbytes() == table.untyped_storage().nbytes() == 4 * 50_001
    assert torch.equal(bitmap.StaticSets(50_001, 3, 2, torch.device("cpu")).order, sets.order)
    hashing.clear_h0_tables()
    assert int(SyncConfig().zen_cache_mb * 2**20) == bitmap.DEFAULT_CACHE_BYTES


_CACHE_RSS = """
import torch
from zen_analysis.zen import bitmap

torch.set_num_threads(1)

def rss():
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmRSS:"))

def hwm():
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))

bitmap.set_cache_limit(64 << 20)
bitmap.static_sets(1000, 4, 0).rank_of
base = rss()
for i in range(40):  # 40 sizes of 1M-1.8M elements: each evicts an older one past the first few
    bitmap.static_sets(1_000_000 + i * 20_011, 4, 0).rank_of
counted = sum(v.nbytes for v in bitmap._CACHE.values())
print("growth", rss() - base, "counted", counted, flush=True)
assert rss() - base < 1.5 * counted + (16 << 20), "the process keeps what the evictions freed"
bitmap._CACHE.clear()
base = rss()
bitmap.static_sets(8_000_000, 4, 0)
peak = hwm() - base
print("build peak per element", peak / 8e6, flush=True)
assert peak < 12 * 8_000_000, "the build's temporaries grow with numel (int64 owners, argsort)"
print("ok")
"""


def _has_malloc_trim() -> bool:
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return False
    return True


@pytest.mark.skipif(
    not os.path.exists("/proc/self/status") or not _has_malloc_trim(), reason="needs Linux's /proc and glibc"
)
def test_evicted_sets_leave_the_process_and_builds_stay_small():
    """RSS follows the counted cache (a fresh process: 40 evicting sizes under a 64 MiB limit grew RSS by 5.9x the
    counted bytes before the build's temporaries shrank and evictions trimmed the heap), and one 8M-element build
    raises peak RSS by less than 12 bytes per element (44 before)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _CACHE_RSS], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and "ok" in proc.stdout, f"{proc.stdout}\n{proc.stderr[-3000:]}"
