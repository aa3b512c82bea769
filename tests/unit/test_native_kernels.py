"""The compiled loops (Algorithm 1 and the hash bitmap): the same answers as the torch paths, and bad input refused
with ValueError, never a crash — fuzzed with hypothesis in a subprocess, so a segfault fails a test instead of
killing the suite."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from zen_analysis.zen import native
from zen_analysis.zen.bitmap import bits_at, popcounts, set_positions, static_sets

pytestmark = pytest.mark.skipif(
    not native.available(), reason=f"native kernel unavailable: {native.unavailable_reason()}"
)


@pytest.mark.parametrize("numel, n", [(1, 1), (17, 3), (100_003, 5), (4096, 8)])
def test_bitmap_loops_equal_the_torch_path(numel, n):
    sets = static_sets(numel, n, 11)
    gen = torch.Generator().manual_seed(numel)
    bits = torch.zeros(sets.byte_starts[-1], dtype=torch.uint8)
    chosen = []
    for p in range(n):
        s_p = sets.partition(p).long()
        keep = torch.rand(s_p.numel(), generator=gen) < 0.3
        pos = torch.nonzero(keep, as_tuple=True)[0]
        part = bits_at(pos, sets.byte_starts[p + 1] - sets.byte_starts[p])  # native
        ref = torch.zeros_like(part).index_put_(
            (pos >> 3,), torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)[pos & 7], accumulate=True
        )
        assert torch.equal(part, ref)
        assert torch.equal(set_positions(part), pos)
        bits[sets.byte_starts[p] : sets.byte_starts[p + 1]] = part
        chosen.append(s_p[keep])
    counts = native.popcounts(bits, sets.byte_starts_t)
    assert torch.equal(counts, popcounts(bits, sets.byte_starts_t))
    idx = torch.cat(chosen)
    values = torch.randn(idx.numel(), generator=gen)
    out = torch.full((numel,), 7.0)
    out.zero_()
    native.decode_scatter(bits, sets.byte_starts_t, sets.starts_t, sets.order, values, counts, out)
    ref = torch.zeros(numel)
    ref[idx] = values
    assert torch.equal(out, ref)
    acc = torch.randn(sets.sizes[0], generator=gen)
    b0 = bits[: sets.byte_starts[1]]
    expected = acc[set_positions(b0)].clone()
    assert torch.equal(native.take_set(b0, acc, int(counts[0])), expected)
    assert not acc[set_positions(b0)].any()  # taken values are zeroed, for the next aggregation


def test_the_loops_refuse_what_would_write_out_of_bounds():
    sets = static_sets(1001, 3, 1)
    bits = torch.zeros(sets.byte_starts[-1], dtype=torch.uint8)
    out = torch.zeros(1001)
    with pytest.raises(ValueError, match="bit positions"):
        native.bits_set(torch.tensor([8 * bits.numel()]), bits)
    with pytest.raises(ValueError, match="bit positions"):
        native.bits_set(torch.tensor([-1]), bits)
    with pytest.raises(ValueError, match="values must match"):
        native.decode_scatter(
            bits, sets.byte_starts_t, sets.starts_t, sets.order, torch.ones(3), torch.zeros(3, dtype=torch.long), out
        )
    last = sets.byte_starts[-1] - 1
    if sets.sizes[-1] % 8:
        bad = bits.clone()
        bad[last] = 0xFF  # padding bits past the last partition's set
        with pytest.raises(ValueError, match="padding"):
            native.decode_scatter(
                bad,
                sets.byte_starts_t,
                sets.starts_t,
                sets.order,
                torch.ones(8),
                native.popcounts(bad, sets.byte_starts_t),
                out,
            )
    with pytest.raises(ValueError, match="contiguous CPU"):
        native.decode_scatter(
            bits,
            sets.byte_starts_t,
            sets.starts_t,
            sets.order,
            torch.ones(0, dtype=torch.float64),
            torch.zeros(3, dtype=torch.long),
            out,
        )


_FUZZ = textwrap.dedent(
    """
    import torch
    from hypothesis import given, settings, strategies as st
    from zen_analysis.zen import native
    from zen_analysis.zen.hierarchical import hierarchical_hash

    EXTREMES = [0, 1, -1, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, -(2**63)]

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(st.lists(st.one_of(st.sampled_from(EXTREMES), st.integers(-(2**63), 2**63 - 1)), max_size=60),
           st.integers(-3, 40), st.sampled_from([torch.int64, torch.int32, torch.float32, torch.uint8]))
    def fuzz(values, n, dtype):
        try:
            idx = torch.tensor(values, dtype=torch.int64).to(dtype)
        except (OverflowError, RuntimeError):
            return
        try:
            b = hierarchical_hash(torch.unique(idx) if dtype != torch.float32 else idx, n, seed=3, backend="native")
            assert int(b.counts_n.sum()) == torch.unique(idx).numel()
        except ValueError:
            pass
        try:
            native.kernel_h0(idx, 1)
        except ValueError:
            pass
        bits = torch.zeros(4, dtype=torch.uint8)
        try:
            native.bits_set(idx.long() if dtype != torch.float32 else idx, bits)
        except ValueError:
            pass

    fuzz()
    print("fuzzed")
    """
)


def test_hypothesis_fuzz_of_the_kernels_in_a_subprocess():
    proc = subprocess.run([sys.executable, "-c", _FUZZ], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"exit {proc.returncode} (negative: killed by a signal)\n{proc.stderr[-3000:]}"
    assert "fuzzed" in proc.stdout


@pytest.mark.parametrize("n", [0, 1, 7, 63, 64, 65, 200, 1000])
@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
def test_extract_is_nonzero_and_gather(n, density):
    gen = torch.Generator().manual_seed(n)
    x = torch.zeros(n)
    keep = torch.rand(n, generator=gen) < density
    x[keep] = torch.randn(int(keep.sum()), generator=gen)
    if n > 3:
        x[1], x[2] = -0.0, float("nan")  # -0.0 is zero, NaN is not (as torch.nonzero)
    idx, val = native.extract(x)
    ref = torch.nonzero(x, as_tuple=True)[0]
    assert torch.equal(idx, ref) and torch.equal(val.nan_to_num(7.0), x[ref].nan_to_num(7.0))
    for servers in (1, 3, 4):  # the fused extraction + bucketing: the torch grouping, packed
        from zen_analysis.wire.coo import pack_coo
        from zen_analysis.zen.hierarchical import bucket_reference

        sets = static_sets(max(n, 1), servers, 5)
        if n == 0:
            break
        words, counts = native.extract_pack(x, servers, 5, sets)
        b = bucket_reference(ref, servers, seed=5)
        expected = pack_coo(sets.rank_of[ref[b.positions_K]].long(), x[ref[b.positions_K]], n)
        assert torch.equal(counts, b.counts_n.long()) and torch.equal(words, expected)


_ADVERSARIAL = textwrap.dedent(
    """
    import torch
    from zen_analysis.zen import native
    from zen_analysis.zen.bitmap import static_sets

    def refused(fn):
        try:
            fn()
        except ValueError:
            return
        raise AssertionError("not refused")

    s = static_sets(1000, 2, 0)
    bits = torch.full((s.byte_starts[-1],), 0xFF, dtype=torch.uint8)
    pad = (s.sizes[-1] % 8) and (1 << (s.sizes[-1] % 8)) - 1
    if pad:
        bits[-1] = pad
    out = torch.zeros(1000)
    counts = native.popcounts(bits, s.byte_starts_t)
    for bad in (torch.full_like(s.order, 2**30), torch.full_like(s.order, -5)):  # sets pointing outside out
        values = torch.ones(int(counts.sum()))
        refused(lambda: native.decode_scatter(bits, s.byte_starts_t, s.starts_t, bad, values, counts, out))
    one = torch.tensor([1, 0])  # claims one set bit where the bitmaps hold hundreds: never read past the values
    refused(lambda: native.decode_scatter(bits, s.byte_starts_t, s.starts_t, s.order, torch.ones(1), one, out))
    acc = torch.zeros(s.sizes[0])
    refused(lambda: native.take_set(bits[: s.byte_starts[1]], acc, 1))
    words = torch.tensor([3, 0, 10**6, 0], dtype=torch.int32)
    refused(lambda: native.accumulate_packed(words, s.sizes[0], torch.zeros(s.byte_starts[1], dtype=torch.uint8), acc))
    assert not acc.any()  # checked before anything was added
    refused(lambda: native.extract_pack(torch.ones(1000), 2**31, 0, s))
    refused(lambda: native.extract_pack(torch.ones(1001), 2, 0, s))  # sets of another size
    print("refused")
    """
)


def test_adversarial_sizes_are_refused_in_a_subprocess():
    """What would make the C loops read or write out of bounds is refused (a segfault would fail this test)."""
    proc = subprocess.run(
        [sys.executable, "-c", _ADVERSARIAL], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0 and "refused" in proc.stdout, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"


def test_a_failed_aggregation_leaves_the_accumulator_zero():
    from zen_analysis.zen.sparse_allreduce import aggregate_encode

    sets = static_sets(1000, 2, 0)
    bad = torch.tensor([3, 0, 10**6, 0], dtype=torch.int32)
    bad[1] = torch.tensor([42.0]).view(torch.int32)
    with pytest.raises(ValueError):
        aggregate_encode(bad, sets, 0)
    good = torch.tensor([3, 0], dtype=torch.int32)
    good[1] = torch.tensor([1.0]).view(torch.int32)
    bitmap, values = aggregate_encode(good, sets, 0)
    assert values.tolist() == [1.0] and int(native.popcounts(bitmap, torch.tensor([0, bitmap.numel()]))[0]) == 1


@pytest.mark.parametrize("senders, density", [(1, 0.5), (3, 0.05), (5, 0.9)])
def test_merged_aggregation_equals_the_accumulator_path(senders, density):
    """The block-by-block merge (ascending streams) and the |S_p| accumulator give the same bitmap and sums; a
    stream that does not ascend is left to the accumulator (the merge answers None)."""
    from zen_analysis.zen.sparse_allreduce import aggregate_encode

    size = 70_001  # several merge blocks, a partial last byte
    gen = torch.Generator().manual_seed(senders)
    streams = []
    for _ in range(senders):
        pos = torch.nonzero(torch.rand(size, generator=gen) < density, as_tuple=True)[0].to(torch.int32)
        val = torch.randint(-3, 4, (pos.numel(),), generator=gen).float()
        streams.append(torch.stack([pos, val.view(torch.int32)], 1).reshape(-1))
    words = torch.cat(streams)
    counts = torch.tensor([s.numel() // 2 for s in streams])
    merged = native.aggregate_sorted(words, counts, size)
    assert merged is not None
    acc = torch.zeros(size)
    bits = torch.zeros((size + 7) // 8, dtype=torch.uint8)
    native.accumulate_packed(words, size, bits, acc)
    expected = native.take_set(bits, acc, int(native.popcounts(bits, torch.tensor([0, bits.numel()]))[0]))
    assert torch.equal(merged[0], bits) and torch.equal(merged[1], expected)
    shuffled = words.view(-1, 2)[torch.randperm(words.numel() // 2, generator=gen)].reshape(-1)
    assert native.aggregate_sorted(shuffled, torch.tensor([words.numel() // 2]), size) is None
    sets = static_sets(2 * size, 2, 0)  # the sync entry point falls back and still sums exactly
    p_size = sets.sizes[0]
    inside = shuffled.view(-1, 2)[shuffled.view(-1, 2)[:, 0] < p_size].reshape(-1).contiguous()
    b1, v1 = aggregate_encode(inside, sets, 0, torch.tensor([inside.numel() // 2]))
    b2, v2 = aggregate_encode(inside, sets, 0)
    assert torch.equal(b1, b2) and torch.equal(v1, v2)
    with pytest.raises(ValueError, match="outside"):
        native.aggregate_sorted(torch.tensor([size, 0], dtype=torch.int32), torch.tensor([1]), size)
    with pytest.raises(ValueError, match="counts"):
        native.aggregate_sorted(words, counts + 1, size)


def test_workspaces_are_reused_per_name_and_shrink():
    from zen_analysis import workspace

    a = workspace.buffer("test.a", 1000, torch.float32)
    b = workspace.buffer("test.a", 900, torch.float32)
    assert a.data_ptr() == b.data_ptr()  # same pages: no fresh allocation
    assert workspace.buffer("test.b", 900, torch.float32).data_ptr() != a.data_ptr()
    grown = workspace.buffer("test.a", 5000, torch.float32)
    assert grown.numel() == 5000 and workspace.capacity("test.a", torch.float32) >= 5000
    big = workspace.buffer("test.a", 10_000_000, torch.float32)
    small = workspace.buffer("test.a", 10, torch.float32)
    assert small.data_ptr() != big.data_ptr() and workspace.capacity("test.a", torch.float32) < 1000
    workspace.clear()
    assert workspace.capacity("test.a", torch.float32) == 0


def test_extract_pack_takes_the_static_sets_and_refuses_foreign_ones():
    """``extract_pack`` takes the StaticSets of (numel, n, seed) and refuses a set built for another world size,
    seed or tensor size (a foreign position table would send every entry to the wrong bit, silently)."""
    from zen_analysis.wire.coo import pack_coo
    from zen_analysis.zen.hierarchical import bucket_reference

    gen = torch.Generator().manual_seed(3)
    x = torch.where(torch.rand(5000, generator=gen) < 0.1, torch.randn(5000, generator=gen), torch.zeros(5000))
    sets = static_sets(5000, 4, 7)
    words, counts = native.extract_pack(x, 4, 7, sets)
    ref = torch.nonzero(x, as_tuple=True)[0]
    b = bucket_reference(ref, 4, seed=7)
    assert torch.equal(counts, b.counts_n.long())
    assert torch.equal(words, pack_coo(sets.rank_of[ref[b.positions_K]].long(), x[ref[b.positions_K]], 5000))
    assert torch.equal(native.extract_pack(x, 4, 7 + 2**32, sets)[0], words)  # h0 reads the seed's low 32 bits
    for n, seed, other in (
        (2, 7, sets),
        (4, 8, sets),
        (4, 7, static_sets(5000, 2, 7)),
        (4, 7, static_sets(5000, 4, 8)),
        (4, 7, static_sets(5001, 4, 7)),
    ):
        with pytest.raises(ValueError):
            native.extract_pack(x, n, seed, other)
