"""The CPU kernel of hierarchical hashing (``csrc/hierarchical_hash.c``) and the hash bitmap's loops
(``csrc/hash_bitmap.c``), built on first use and called by ctypes.

Why a kernel: Algorithm 1 is a GPU design, thousands of threads claiming slots of a hash memory at once. In torch
rounds on a CPU every round is several full passes over the indices (gather, compare, scatter, read back,
compact), slower than sorting 4-bit keys. The kernel does one pass: hash an index, prefetch its first slot, claim
a slot with compare-and-swap, and the threads (one chunk of the indices each, ``torch.get_num_threads()`` of them,
so a forked rank with one thread runs it single-threaded) then compact the memory per partition.

The shared library is built on first use (:mod:`zen_analysis.zen.build`: the system C compiler, a private
cache). Without a compiler, :func:`available` is False, and ``hierarchical_hash`` falls back to its torch rounds
(``backend="auto"``) with one warning. ``ZEN_ANALYSIS_NATIVE=0`` turns the kernel off.

Shape suffixes: K indices of one rank (or bit positions to set), N elements of the flat tensor, B bytes of the bitmaps,
W ranks (``counts_W[s]``: the entries from sender s).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from zen_analysis import workspace
from zen_analysis.indices import check_indices
from zen_analysis.zen.hashing import owner
from zen_analysis.zen.native_lib import EXPORTS as EXPORTS
from zen_analysis.zen.native_lib import available as available
from zen_analysis.zen.native_lib import declarations as declarations
from zen_analysis.zen.native_lib import loaded_library
from zen_analysis.zen.native_lib import unavailable_reason as unavailable_reason
from zen_analysis.zen.native_lib import warn_fallback as warn_fallback


def kernel_h0(indices: torch.Tensor, seed: int) -> torch.Tensor:
    """h0 computed by the kernel's own copy (``zen_hash.h``; for tests: it must equal ``zen.hashing.h0``)."""
    idx = check_indices(indices).contiguous()
    out = torch.empty_like(idx)
    loaded_library().zen_h0(idx.data_ptr(), idx.numel(), seed & 0xFFFFFFFF, out.data_ptr())
    return out


def _ranges(total: int, parts: int) -> list[tuple[int, int]]:
    step = -(-total // parts)
    return [(lo, min(total, lo + step)) for lo in range(0, total, step)]


def place_and_compact(
    idx_K: torch.Tensor,
    n: int,
    *,
    seed: int,
    k: int,
    par: int,
    ser: int,
    level2_seed: int | None,
    threads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Algorithm 1 on CPU int64 ``idx_K`` (K < 2**31) with ``par`` parallel and ``ser`` serial slots per partition;
    returns (positions_K grouped by partition, counts_n, indices sent to serial regions, partitions that
    overflowed their serial region). ``level2_seed`` is already mixed (``hierarchical._level2_seed``)."""
    lib = loaded_library()
    idx_K = check_indices(idx_K).contiguous()
    K = idx_K.numel()
    threads = max(1, min(threads or torch.get_num_threads(), K // 65536 or 1))
    memory = torch.full((n * (par + ser),), -1, dtype=torch.int32, device="cpu")  # a CPU kernel: CPU buffers
    serial_fill = torch.zeros(n, dtype=torch.long, device="cpu")
    overflow = torch.empty(K, dtype=torch.int32, device="cpu")
    overflow_len = torch.zeros(1, dtype=torch.long, device="cpu")
    shift = n.bit_length() - 1 if n & (n - 1) == 0 else -1
    chunks = _ranges(K, threads) if K else []
    counts = torch.zeros(max(1, len(chunks)), n, dtype=torch.long, device="cpu")

    def place(c: int) -> int:
        lo, hi = chunks[c]
        return lib.zen_place(
            idx_K.data_ptr(),
            lo,
            hi,
            n,
            shift,
            seed & 0xFFFFFFFF,
            level2_seed is not None,
            (level2_seed or 0) & 0xFFFFFFFF,
            k,
            par,
            ser,
            memory.data_ptr(),
            counts[c].data_ptr(),
            serial_fill.data_ptr(),
            overflow.data_ptr(),
            overflow_len.data_ptr(),
            len(chunks) > 1,
        )

    serial = sum(_run(place, len(chunks), threads))
    counts_n = counts.sum(0)
    m = int(overflow_len)
    overflow = overflow[:m]
    overflow, overflow_offsets = _group_overflow(idx_K, overflow, n, seed)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long, device="cpu"), torch.cumsum(counts_n, 0)])  # n + 1 bounds
    out = torch.empty(K, dtype=torch.long, device="cpu")
    groups = _ranges(n, threads)

    def compact(c: int) -> None:
        lo, hi = groups[c]
        lib.zen_compact(
            memory.data_ptr(),
            lo,
            hi,
            par,
            ser,
            serial_fill.data_ptr(),
            overflow.data_ptr(),
            overflow_offsets.data_ptr(),
            offsets.data_ptr(),
            out.data_ptr(),
        )

    _run(compact, len(groups), threads)
    return out, counts_n, int(serial), int((serial_fill > ser).sum())


def _run(fn, count: int, threads: int) -> list:
    """``fn(0)`` .. ``fn(count - 1)``, on ``threads`` threads where there is more than one chunk."""
    if count <= 1 or threads == 1:
        return [fn(i) for i in range(count)]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, range(count)))


def _group_overflow(idx_K: torch.Tensor, overflow: torch.Tensor, n: int, seed: int) -> tuple[torch.Tensor, ...]:
    """The positions past a full serial region (rare) grouped by partition for the compaction, and their n + 1
    bounds."""
    if not overflow.numel():
        return overflow, torch.zeros(n + 1, dtype=torch.long, device="cpu")
    part = owner(idx_K[overflow.long()], n, seed)
    overflow = overflow[torch.argsort(part, stable=True)].contiguous()
    overflow_offsets = torch.cat(
        [torch.zeros(1, dtype=torch.long, device="cpu"), torch.cumsum(torch.bincount(part, minlength=n), 0)]
    )
    return overflow, overflow_offsets


# ---- the hash bitmap's loops (CPU tensors; every size is checked here, the C code trusts it)


def _cpu(t: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    if t.device.type != "cpu" or t.dtype != dtype or not t.is_contiguous():
        raise ValueError(f"{what} must be a contiguous CPU {dtype} tensor, got {t.dtype} on {t.device}")


def bits_set(positions_K: torch.Tensor, out_B: torch.Tensor) -> None:
    """Set the bits at ``positions_K`` (int64) in the uint8 bitmap ``out_B`` (``|=``; zero it first)."""
    _cpu(positions_K, torch.int64, "positions")
    _cpu(out_B, torch.uint8, "the bitmap")
    if positions_K.numel():
        lo, hi = torch.stack(torch.aminmax(positions_K)).tolist()
        if lo < 0 or hi >= 8 * out_B.numel():
            raise ValueError(f"bit positions must lie in [0, {8 * out_B.numel()}), got [{lo}, {hi}]")
    loaded_library().zen_bits_set(positions_K.data_ptr(), positions_K.numel(), out_B.data_ptr())


def popcounts(bits_B: torch.Tensor, byte_starts: torch.Tensor) -> torch.Tensor:
    """Set bits of each partition's bitmap (``byte_starts``: n + 1 int64 bounds into ``bits_B``)."""
    _cpu(bits_B, torch.uint8, "the bitmaps")
    _cpu(byte_starts, torch.int64, "byte_starts")
    _check_bounds(byte_starts, bits_B.numel())
    n = byte_starts.numel() - 1
    out = torch.empty(n, dtype=torch.int64, device="cpu")
    loaded_library().zen_popcounts(bits_B.data_ptr(), byte_starts.data_ptr(), n, out.data_ptr())
    return out


def _check_bounds(starts: torch.Tensor, total: int) -> None:
    if starts.numel() < 1 or int(starts[0]) != 0 or int(starts[-1]) != total or bool((starts[1:] < starts[:-1]).any()):
        raise ValueError(f"bounds must rise from 0 to {total}")


def decode_scatter(
    bits_B: torch.Tensor,
    byte_starts: torch.Tensor,
    starts: torch.Tensor,
    order: torch.Tensor,
    values: torch.Tensor,
    counts: torch.Tensor,
    out_N: torch.Tensor,
) -> None:
    """``out_N[S_p[t]] = next value`` for every set bit t of every partition p, in one pass over the bitmaps.
    ``counts`` are the partitions' set bits (:func:`popcounts`); ``values`` must hold exactly their sum."""
    _cpu(bits_B, torch.uint8, "the bitmaps")
    _cpu(byte_starts, torch.int64, "byte_starts")
    _cpu(starts, torch.int64, "starts")
    _cpu(values, torch.float32, "the values")
    _cpu(out_N, torch.float32, "the output")
    if order.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"order must be int32 or int64, got {order.dtype}")
    _cpu(order, order.dtype, "order")
    _check_bounds(byte_starts, bits_B.numel())
    _check_bounds(starts, order.numel())
    if order.numel() != out_N.numel() or int(counts.sum()) != values.numel():
        raise ValueError("the static sets must cover the output, and the values must match the set bits")
    sizes = torch.diff(starts)
    if not torch.equal(torch.diff(byte_starts), (sizes + 7) // 8):
        raise ValueError("each partition's bitmap must have (|S_p| + 7) // 8 bytes")
    _check_padding(bits_B, byte_starts, sizes)
    fn = (
        loaded_library().zen_decode_scatter_i32
        if order.dtype == torch.int32
        else loaded_library().zen_decode_scatter_i64
    )
    used = fn(
        bits_B.data_ptr(),
        byte_starts.data_ptr(),
        starts.data_ptr(),
        starts.numel() - 1,
        order.data_ptr(),
        values.data_ptr(),
        values.numel(),
        out_N.data_ptr(),
        out_N.numel(),
    )
    if used != values.numel():
        raise ValueError("the bitmaps' set bits do not match the values, or the sets point outside the output")


def _check_padding(bits_B: torch.Tensor, byte_starts: torch.Tensor, sizes: torch.Tensor) -> None:
    """The bits past each partition's |S_p| in its last byte must be clear (they stand for no index)."""
    part = (sizes % 8) != 0
    if bool(part.any()):
        last = bits_B[byte_starts[1:][part] - 1].to(torch.int64)
        if bool((last >> (sizes[part] % 8)).any()):
            raise ValueError("a bitmap sets padding bits beyond its partition's set")


def extract(x_N: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions int64, values) of the non-zeros of the flat float32 CPU ``x_N``, ascending, in one pass at
    about memory speed (several times ``torch.nonzero`` + gather). The results are views of per-thread
    workspaces (:mod:`zen_analysis.workspace`) valid until the next call on this thread; the workspace keeps the
    last capacity, so the pass runs once unless the non-zeros outgrow it (then once more after counting)."""
    _cpu(x_N, torch.float32, "the tensor")
    lib, n = loaded_library(), x_N.numel()
    cap = workspace.capacity("zen.extract.idx", torch.int64)
    for _ in range(2):
        idx = workspace.buffer("zen.extract.idx", cap, torch.int64, "cpu")
        val = workspace.buffer("zen.extract.val", cap, torch.float32, "cpu")
        k = lib.zen_extract(x_N.data_ptr(), n, idx.data_ptr() if cap else None, val.data_ptr() if cap else None, cap)
        if k >= 0:
            if cap > 4 * k + (1 << 20):  # much too large: the next call gets a buffer sized by this one
                workspace.buffer("zen.extract.idx", k, torch.int64, "cpu")
                workspace.buffer("zen.extract.val", k, torch.float32, "cpu")
            return idx[:k], val[:k]
        cap = int(lib.zen_count_nonzero(x_N.data_ptr(), n)) + 1024
    raise AssertionError("extract: the workspace was sized by the count")


def extract_pack(
    x_N: torch.Tensor, n: int, seed: int, sets, *, reuse: str = "zen.push.send"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The push message of the flat float32 CPU ``x_N``, built in one pass: (int32 words, two
    per non-zero: its position in S_p and its value bits, grouped by server h0(idx) mod n and ascending inside a
    group; entries per server). ``sets`` is the ``zen.bitmap.StaticSets`` of (x_N.numel(), n, seed) (read by its
    ``numel``, ``num_partitions``, ``seed`` and ``rank_of``, the position table); a set built for another world
    size, seed or tensor size raises ``ValueError`` (its positions would land on the wrong bits, silently). The
    words are a view of the per-thread workspace ``reuse``, valid until the next call with that name on this
    thread."""
    _cpu(x_N, torch.float32, "the tensor")
    if not 1 <= n < 2**31:
        raise ValueError(f"1 <= n < 2**31 servers, got {n}")
    if sets.num_partitions != n or sets.seed & 0xFFFFFFFF != seed & 0xFFFFFFFF or sets.numel != x_N.numel():
        raise ValueError(
            f"the static sets are of (numel {sets.numel}, n {sets.num_partitions}, seed {sets.seed}), "
            f"the push of (numel {x_N.numel()}, n {n}, seed {seed})"
        )
    rank_of = sets.rank_of
    _cpu(rank_of, torch.int32, "rank_of")
    if rank_of.numel() != x_N.numel():
        raise ValueError("rank_of must have one entry per element")
    lib, numel = loaded_library(), x_N.numel()
    counts = torch.empty(n, dtype=torch.int64, device="cpu")
    cap = workspace.capacity(f"{reuse}.tmp", torch.int32) // 3
    for _ in range(2):
        tmp = workspace.buffer(f"{reuse}.tmp", 3 * cap, torch.int32, "cpu")
        words = workspace.buffer(reuse, 2 * cap, torch.int32, "cpu")
        k = lib.zen_extract_pack(
            x_N.data_ptr(),
            numel,
            n,
            seed & 0xFFFFFFFF,
            rank_of.data_ptr(),
            tmp.data_ptr() if cap else None,
            counts.data_ptr(),
            words.data_ptr() if cap else None,
            cap,
        )
        if k >= 0:
            if cap > 4 * k + (1 << 20):  # much too large: the next call gets buffers sized by this one
                workspace.buffer(f"{reuse}.tmp", 3 * k, torch.int32, "cpu")
            return words[: 2 * k], counts
        cap = int(lib.zen_count_nonzero(x_N.data_ptr(), numel)) + 1024
    raise AssertionError("extract_pack: the workspace was sized by the count")


def take_set(bits_B: torch.Tensor, acc: torch.Tensor, count: int) -> torch.Tensor:
    """``acc[t]`` for each of the ``count`` set bits t, ascending, leaving ``acc`` all zero."""
    _cpu(bits_B, torch.uint8, "the bitmap")
    _cpu(acc, torch.float32, "the accumulator")
    if bits_B.numel() != (acc.numel() + 7) // 8:
        raise ValueError("the bitmap must have one bit per accumulator element")
    _check_padding(bits_B, torch.tensor([0, bits_B.numel()], device="cpu"), torch.tensor([acc.numel()], device="cpu"))
    out = torch.empty(count, dtype=torch.float32, device="cpu")
    if loaded_library().zen_take_set(bits_B.data_ptr(), bits_B.numel(), acc.data_ptr(), out.data_ptr(), count) != count:
        raise ValueError("count must be the bitmap's set bits")
    return out


def accumulate_packed(words: torch.Tensor, set_size: int, bits_B: torch.Tensor, acc: torch.Tensor) -> None:
    """Server p's aggregation of received packed (position, value) entries into its bitmap and accumulator."""
    _cpu(words, torch.int32, "the received words")
    _cpu(bits_B, torch.uint8, "the bitmap")
    _cpu(acc, torch.float32, "the accumulator")
    if words.numel() % 2 or acc.numel() != set_size or bits_B.numel() != (set_size + 7) // 8:
        raise ValueError("two words per entry, and the buffers must fit the set")
    if (
        loaded_library().zen_accumulate_packed(
            words.data_ptr(), words.numel() // 2, set_size, bits_B.data_ptr(), acc.data_ptr()
        )
        != 0
    ):
        raise ValueError(f"a received position is outside this server's hash set of {set_size}")


def aggregate_sorted(
    words: torch.Tensor, counts_W: torch.Tensor, set_size: int, *, reuse: str | None = None
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Server p's aggregate of received packed (position, value) entries, ``counts_W[s]`` from sender s, as (hash
    bitmap over S_p, summed values in bit order) — when each sender's positions ascend (what :func:`extract_pack`
    sends), merged block by block with no |S_p|-sized buffer; None if a sender's positions do not ascend.
    ``reuse``: the results live in per-thread workspaces of that name (:mod:`zen_analysis.workspace`)."""
    _cpu(words, torch.int32, "the received words")
    counts_W = counts_W.to(device="cpu", dtype=torch.int64)
    if words.numel() % 2 or int(counts_W.sum()) != words.numel() // 2 or bool((counts_W < 0).any()):
        raise ValueError("two words per entry, as many entries as the senders' counts")
    offs = torch.cat([torch.zeros(1, dtype=torch.int64, device="cpu"), torch.cumsum(counts_W, 0)])
    if reuse is None:
        bits = torch.zeros((set_size + 7) // 8, dtype=torch.uint8, device="cpu")
        values = torch.empty(words.numel() // 2, dtype=torch.float32, device="cpu")
    else:
        bits = workspace.buffer(f"{reuse}.bits", (set_size + 7) // 8, torch.uint8, "cpu").zero_()
        values = workspace.buffer(f"{reuse}.values", words.numel() // 2, torch.float32, "cpu")
    cursor = torch.empty(counts_W.numel(), dtype=torch.int64, device="cpu")
    j = loaded_library().zen_aggregate_sorted(
        words.data_ptr(),
        offs.data_ptr(),
        counts_W.numel(),
        set_size,
        bits.data_ptr(),
        values.data_ptr(),
        cursor.data_ptr(),
    )
    if j == -1:
        raise ValueError(f"a received position is outside this server's hash set of {set_size}")
    if j == -2:
        return None
    return bits, values[:j]
