"""Zen's three phases on one exchange (:func:`zen_analysis.zen.sparse_allreduce.zen_sum` runs them in order):
**push**, a rank's non-zeros to their servers, bucketed by server (:data:`HASHINGS`) and packed as positions in
the static sets S_p with their values; **aggregate**, server p's sum of what it received, hash-bitmap encoded;
**pull**, every server's bitmap and values all-gathered and written where the bits point. The module docstring
of :mod:`zen_analysis.zen.sparse_allreduce` gives the collectives, the work per call and the host syncs.

Shape suffixes: N elements of the flat tensor, K non-zeros on this rank, W ranks in the group, B set bits of the
gathered bitmaps."""

from __future__ import annotations

import torch

from zen_analysis.wire.coo import coo_words, pack_coo, unpack_coo
from zen_analysis.wire.dtypes import accumulate_dtype
from zen_analysis.wire.exchange import Exchange
from zen_analysis.zen import native
from zen_analysis.zen.bitmap import StaticSets, bits_at, popcounts, set_positions, static_sets
from zen_analysis.zen.hierarchical import bucket_reference, hierarchical_hash_unchecked

HASHINGS = ("auto", "hierarchical", "argsort")
"""How the push buckets are built (same partitions, same bytes on the wire): ``hierarchical``, Algorithm 1;
``argsort``, a stable grouping by server (on the CPU a compiled counting sort fused with the extraction, which
also packs the message);
``auto``, ``argsort`` on the CPU (measured faster there: ``bench zen``, ``bench hashing``), Algorithm 1 on CUDA."""


def kernel_applies(t: torch.Tensor) -> bool:
    """Whether the compiled CPU loops apply: a CPU float32 tensor below 2**31 elements, and the kernel built."""
    return t.device.type == "cpu" and t.dtype == torch.float32 and t.numel() < 2**31 and native.available()


def _extract(x_N: torch.Tensor, ex: Exchange) -> tuple[torch.Tensor, torch.Tensor]:
    with ex.local("extract"):
        if kernel_applies(x_N):  # one pass, positions and values together
            return native.extract(x_N)
        idx_K = torch.nonzero(x_N, as_tuple=True)[0]
        return idx_K, x_N[idx_K]


def _push_message(
    x_N: torch.Tensor, ex: Exchange, sets: StaticSets, *, seed: int, hashing: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed push buffer, entries per server): this rank's non-zeros grouped by server, each entry the index's
    position in its S_p and the value (the server needs no global index: the position is its bitmap bit)."""
    if hashing not in HASHINGS:
        raise ValueError(f"hashing must be one of {HASHINGS}, got {hashing!r}")
    if hashing in ("auto", "argsort") and kernel_applies(x_N):
        _ = sets.rank_of  # the position table, built on first use outside the timed pass below
        with ex.local("extract+pack"):  # one compiled pass: find, hash, position and group every non-zero
            return native.extract_pack(x_N, ex.world, seed, sets, reuse="zen.push.send")
    idx_K, val_K = _extract(x_N, ex)
    with ex.local("hash"):
        if hashing == "argsort" or (hashing == "auto" and x_N.device.type == "cpu"):
            buckets = bucket_reference(idx_K, ex.world, seed=seed)
        else:
            buckets = hierarchical_hash_unchecked(idx_K, ex.world, seed=seed)
        pos_K = buckets.positions_K
        words = pack_coo(sets.rank_of[idx_K[pos_K]], val_K[pos_K], x_N.numel())
        return words, buckets.counts_n.to(torch.int64).cpu()


def push(
    x_N: torch.Tensor, ex: Exchange, *, seed: int, hashing: str = "auto", wire: torch.dtype | None = None
) -> tuple[StaticSets, torch.Tensor, torch.Tensor]:
    """The push: this rank's non-zeros to their servers (counts, then one packed ``all_to_all_single``); returns
    the static sets, what this rank received as server (packed position / value words, not yet summed; a view of
    this thread's ``zen.push.recv`` workspace, valid until its next push) and how many entries came from each
    rank. ``wire``: the values travel as this dtype (float32 ``x_N`` widened from it: exact both ways) and are
    handed back as float32 words."""
    sets = static_sets(x_N.numel(), ex.world, seed, x_N.device)
    words, counts_W = _push_message(x_N, ex, sets, seed=seed, hashing=hashing)
    narrow = wire is not None and wire != x_N.dtype
    numel = x_N.numel()
    if narrow:
        with ex.local("narrow"):
            pairs = words.view(-1, 2)
            words = pack_coo(pairs[:, 0], pairs[:, 1].view(torch.float32).to(wire), numel)
    w = coo_words(numel, wire if narrow else x_N.dtype)
    with ex.phase("push"):
        recv_W = ex.exchange_counts(counts_W)
        got = ex.all_to_all_v(words, counts_W * w, recv_W * w, reuse="zen.push.recv")
    if narrow:
        with ex.local("narrow"):
            pos, val = unpack_coo(got, numel, wire)
            got = torch.stack([pos.to(torch.int32), val.float().view(torch.int32)], 1).reshape(-1)
    return sets, got, recv_W


def aggregate_encode(
    got: torch.Tensor,
    sets: StaticSets,
    p: int,
    recv_W: torch.Tensor | None = None,
    *,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Server p's aggregate of the received packed entries, hash-bitmap encoded: (bitmap over S_p, summed values
    of its set bits in S_p order). Positions index S_p directly: no search. On the CPU, when every sender's
    positions ascend (``recv_W``: entries per sender; the CPU push sends them so), one compiled merge sums them
    block by block in a cache-sized accumulator: O(received + |S_p| / 8); otherwise (e.g. Algorithm 1's buckets)
    one compiled pass sets the bits and sums into a persistent |S_p| accumulator that the read-out leaves zeroed.
    Values other than float32 (``dtype``) take the torch path, summed in
    :func:`~zen_analysis.wire.dtypes.accumulate_dtype` (fp16/bf16 in float32, rounded once)."""
    size = sets.sizes[p]
    nbytes = sets.byte_starts[p + 1] - sets.byte_starts[p]
    got = got.to(sets.order.device)  # the exchange's device (CUDA under NCCL) may differ from the input's
    if got.device.type == "cpu" and dtype == torch.float32 and sets.numel < 2**31 and native.available():
        merged = native.aggregate_sorted(got, recv_W, size, reuse="zen.aggregate") if recv_W is not None else None
        if merged is not None:
            return merged
        bitmap = torch.zeros(nbytes, dtype=torch.uint8, device="cpu")
        acc = sets.accumulator(p)
        try:
            native.accumulate_packed(got, size, bitmap, acc)
            count = int(popcounts(bitmap, torch.tensor([0, nbytes], device="cpu"))[0])
            return bitmap, native.take_set(bitmap, acc, count)
        except BaseException:  # the accumulator persists between calls: never leave a partial sum in it
            acc.zero_()
            raise
    pos, val = unpack_coo(got, sets.numel, dtype)
    if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= size):
        raise ValueError(f"a received position is outside this server's hash set of {size}")
    touched = torch.zeros(size, dtype=torch.bool, device=got.device)
    touched[pos] = True
    acc_dtype = accumulate_dtype(dtype)
    acc = torch.zeros(size, dtype=acc_dtype, device=got.device).index_add_(0, pos, val.to(acc_dtype))
    pos_u = torch.nonzero(touched, as_tuple=True)[0]
    return bits_at(pos_u, nbytes), acc[pos_u].to(dtype)


def pull(
    bitmap: torch.Tensor,
    values: torch.Tensor,
    ex: Exchange,
    sets: StaticSets,
    out_N: torch.Tensor,
    *,
    wire: torch.dtype | None = None,
) -> torch.Tensor:
    """Every server's hash bitmap and values all-gathered, each value written where its bit points in ``out_N``.
    Only the union's positions are written: ``out_N`` is the input, whose other positions are zero already (its
    own non-zeros were pushed, so they are in the union), so no pass zeroes the dense tensor. ``wire``: the values
    travel rounded to this dtype (the sums' one rounding) and land widened in ``out_N``."""
    narrow = wire is not None and wire != values.dtype
    if narrow:
        values = values.to(wire)
    kernel = kernel_applies(out_N)
    sizes_W = torch.diff(torch.tensor(sets.byte_starts, dtype=torch.int64, device="cpu"))  # split sizes: host
    with ex.phase("pull"):
        all_bits = ex.all_gather_v(bitmap, sizes_W, reuse="zen.pull.bits").to(out_N.device)
        with ex.local("decode"):
            counts_W = popcounts(all_bits, sets.byte_starts_t).cpu()
        all_val = ex.all_gather_v(values, counts_W, reuse="zen.pull.values").to(out_N.device)
    if narrow:
        all_val = all_val.to(out_N.dtype)
    if kernel:  # one pass over the bitmaps writing each value where its bit points
        with ex.local("scatter"):
            native.decode_scatter(all_bits, sets.byte_starts_t, sets.starts_t, sets.order, all_val, counts_W, out_N)
        return out_N
    with ex.local("decode"):
        idx = indices_of_bits(all_bits, sets)
    with ex.local("scatter"):
        out_N[idx] = all_val.to(out_N.device, out_N.dtype)
    return out_N


def indices_of_bits(all_bits: torch.Tensor, sets: StaticSets) -> torch.Tensor:
    """The indices (int64) behind the set bits of every server's all-gathered bitmap, in bit order: server by
    server, each in S_p order."""
    bit_B = set_positions(all_bits)
    part = torch.searchsorted(sets.byte_starts_t[1:], bit_B >> 3, right=True)
    return sets.order[sets.starts_t[part] + bit_B - 8 * sets.byte_starts_t[part]].long()


def sorted_counts(x_N: torch.Tensor, recv_W: torch.Tensor) -> torch.Tensor | None:
    """The senders' counts when the compiled merge of ascending streams applies (float32, two words an entry)."""
    return recv_W if x_N.dtype == torch.float32 and coo_words(x_N.numel()) == 2 else None
