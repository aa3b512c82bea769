"""Zen's synchronization: Balanced Parallelism with hierarchical-hash push and hash-bitmap pull.

``zen_sum(x_N, ex)`` is one sparse all-reduce over the exchange's process group (any size), **in place** like
``dist.all_reduce``: ``x_N`` holds the sum afterwards.

1. **push** — the rank's non-zeros are bucketed by server (Algorithm 1, :mod:`zen_analysis.zen.hierarchical`, or
   a stable grouping: :data:`HASHINGS`), the per-server counts are exchanged, and each entry travels as the
   index's position in its server's static set S_p and the value, together in one ``all_to_all_single``;
2. **aggregate** — server p sums what it received (a partition of the index space: no other rank holds it);
3. **pull** — server p encodes its aggregate as a hash bitmap over S_p plus values
   (:mod:`zen_analysis.zen.bitmap`) and all-gathers the bitmap, then the values; bitmap sizes are static and
   the value counts follow from the bitmaps, so the pull needs no count exchange.

Four collective calls: counts, push, bitmaps, values. That is the least for exact bytes: a variable-size message
needs its size known first (the push's counts; the pull's values are counted by the bitmaps, whose sizes are
static), and the pull cannot start before the push has ended.

Work per call on the CPU, besides extracting the non-zeros and scattering the sums (the passes any dense-in,
dense-out sparse sum makes; the result is written in place and nothing zeroes the tensor): O(nnz) for bucketing,
packing and aggregating (the senders' ascending streams merged block by block in a cache-sized accumulator);
O(numel / 8) bytes of bitmaps to scan. Message and receive buffers live in named per-thread workspaces
(:mod:`zen_analysis.workspace`: a fresh buffer would page-fault on every sync). On CUDA the aggregation
allocates an |S_p| accumulator and mask per call. The static sets S_p and the position table are built once per
(numel, n, seed, device) and cached (``bitmap.static_sets``, bounded in bytes; past the bound a set is rebuilt,
O(numel)).

Host syncs (on CUDA each waits for the device; each fixes a message size): the push counts (all_to_all split
sizes, one ``tolist``) and the pull's value counts (one ``tolist`` of all ranks' popcounts). The CPU path also
reads the non-zero count of its extraction; the torch path's ``nonzero`` is one more on CUDA.

Not thread-safe across threads of one process running Zen at once (workspaces and accumulators are per thread,
but two threads' collectives on one group would interleave anyway). A rank whose input holds
-0.0 where no rank has a non-zero keeps its -0.0 (``all_reduce`` gives +0.0): equal, not bitwise identical.

The result equals ``all_reduce`` of the dense tensors (bit for bit on integer-valued inputs). Byte and call
accounting goes through :class:`~zen_analysis.wire.exchange.Exchange`, so the ``zen`` scheme's traffic model
covers it; local steps are timed under ``ex.local_seconds`` (extract, hash — on the CPU one fused step,
extract+pack — aggregate (with the encode), decode, scatter).
"""

from __future__ import annotations

import torch

from zen_analysis import workspace
from zen_analysis.wire.coo import coo_words, pack_coo, sum_by_index, unpack_coo
from zen_analysis.wire.dtypes import accumulate_dtype, positive_zeros
from zen_analysis.wire.exchange import Exchange, ring_chunk_sizes
from zen_analysis.zen import native
from zen_analysis.zen.bitmap import StaticSets, bits_at, popcounts, set_positions, static_sets
from zen_analysis.zen.hierarchical import _hierarchical_hash, bucket_reference

HASHINGS = ("auto", "hierarchical", "argsort")
"""How the push buckets are built (same partitions, same bytes on the wire): ``hierarchical``, Algorithm 1;
``argsort``, a stable grouping by server (on the CPU a compiled counting sort fused with the extraction, which
also packs the message);
``auto``, ``argsort`` on the CPU (measured faster there: ``bench zen``, ``bench hashing``), Algorithm 1 on CUDA."""


def _kernel(t: torch.Tensor) -> bool:
    """Whether the compiled CPU loops apply: a CPU float32 tensor below 2**31 elements, and the kernel built."""
    return t.device.type == "cpu" and t.dtype == torch.float32 and t.numel() < 2**31 and native.available()


def _extract(x_N: torch.Tensor, ex: Exchange) -> tuple[torch.Tensor, torch.Tensor]:
    with ex.local("extract"):
        if _kernel(x_N):  # one pass, positions and values together
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
    if hashing in ("auto", "argsort") and _kernel(x_N):
        _ = sets.rank_of  # the position table, built on first use outside the timed pass below
        with ex.local("extract+pack"):  # one compiled pass: find, hash, position and group every non-zero
            return native.extract_pack(x_N, ex.world, seed, sets, reuse="zen.push.send")
    idx_K, val_K = _extract(x_N, ex)
    with ex.local("hash"):
        if hashing == "argsort" or (hashing == "auto" and x_N.device.type == "cpu"):
            buckets = bucket_reference(idx_K, ex.world, seed=seed)
        else:
            buckets = _hierarchical_hash(idx_K, ex.world, seed=seed)
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
    kernel = _kernel(out_N)
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
        idx = _indices_of_bits(all_bits, sets)
    with ex.local("scatter"):
        out_N[idx] = all_val.to(out_N.device, out_N.dtype)
    return out_N


def _indices_of_bits(all_bits: torch.Tensor, sets: StaticSets) -> torch.Tensor:
    """The indices (int64) behind the set bits of every server's all-gathered bitmap, in bit order: server by
    server, each in S_p order."""
    bit_B = set_positions(all_bits)
    part = torch.searchsorted(sets.byte_starts_t[1:], bit_B >> 3, right=True)
    return sets.order[sets.starts_t[part] + bit_B - 8 * sets.byte_starts_t[part]].long()


def zen_sum_rows(
    rows_K: torch.Tensor, values_KD: torch.Tensor, num_rows: int, ex: Exchange, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zen by rows (:mod:`zen_analysis.wire.rows`): the index space is the ``num_rows`` rows of a table and every
    entry a row of D values. Push: each of this rank's rows (sorted, distinct) to its server h0(row) mod n as its
    position in S_p and its D values (counts, then one ``all_to_all_single``); each server sums its rows (sorted
    by position: S_p order, in float32 for fp16/bf16, rounded once); pull: every server's hash bitmap over its S_p
    (num_rows / 8 bytes in all) and its summed rows, all-gathered. Returns (rows, values) of the union, in bit
    order, identical on every rank. Work is per row touched plus the bitmaps: no pass over the table, and rows
    are written whole (1 KB apiece at D = 256 float32), so the scatter is not cache-miss bound as the element
    path's is. The static sets are over rows: 69k rows build in milliseconds where 17.7M elements took seconds."""
    dtype, D, p = values_KD.dtype, values_KD.shape[1], ex.rank
    sets = static_sets(num_rows, ex.world, seed, values_KD.device)
    with ex.local("hash"):
        buckets = bucket_reference(rows_K, ex.world, seed=seed)
        order_K = buckets.positions_K
        words = pack_coo(sets.rank_of[rows_K[order_K]], values_KD[order_K], num_rows)
        counts_W = buckets.counts_n.to(torch.int64).cpu()
    w = coo_words(num_rows, dtype, D)
    with ex.phase("push"):
        recv_W = ex.exchange_counts(counts_W)
        got = ex.all_to_all_v(words, counts_W * w, recv_W * w)
    with ex.local("aggregate"):
        pos_G, val_GD = unpack_coo(got.to(values_KD.device), num_rows, dtype, D)
        if pos_G.numel() and (int(pos_G.min()) < 0 or int(pos_G.max()) >= sets.sizes[p]):
            raise ValueError(f"a received position is outside this server's hash set of {sets.sizes[p]}")
        u_pos, sums = sum_by_index(pos_G, val_GD)  # ascending positions: S_p order, the bitmap's
        bitmap = bits_at(u_pos, sets.byte_starts[p + 1] - sets.byte_starts[p])
    sizes_W = torch.diff(torch.tensor(sets.byte_starts, dtype=torch.int64, device="cpu"))
    with ex.phase("pull"):
        all_bits = ex.all_gather_v(bitmap, sizes_W).to(values_KD.device)
        with ex.local("decode"):
            rows_W = popcounts(all_bits, sets.byte_starts_t).cpu()
        all_val = ex.all_gather_v(sums.reshape(-1), rows_W * D).to(values_KD.device)
    with ex.local("decode"):
        rows_U = _indices_of_bits(all_bits, sets)
    return rows_U, all_val.view(-1, D)


def _sorted_counts(x_N: torch.Tensor, recv_W: torch.Tensor) -> torch.Tensor | None:
    """The senders' counts when the compiled merge of ascending streams applies (float32, two words an entry)."""
    return recv_W if x_N.dtype == torch.float32 and coo_words(x_N.numel()) == 2 else None


HALF = (torch.float16, torch.bfloat16)


def zen_sum(x_N: torch.Tensor, ex: Exchange, *, seed: int = 0, hashing: str = "auto") -> torch.Tensor:
    """Sum of the ranks' flat tensors ``x_N`` via push (hash owners) and hash-bitmap pull, in place; returns
    ``x_N``.

    fp16/bf16 on the CPU take the compiled float32 loops (measured faster than the torch path: ``bench zen``'s
    ``zen-bf16`` row): ``x_N`` widened into a float32 workspace (exact), summed there with the values travelling
    at 2 bytes and the servers' sums rounded once to ``x_N``'s dtype, then narrowed back (exact: every written
    value is a rounded sum). Two more dense passes than float32, and a float32 workspace of numel elements kept
    per thread."""
    if x_N.dtype in HALF and x_N.device.type == "cpu" and x_N.numel() < 2**31 and native.available():
        with ex.local("widen"):
            work_N = workspace.buffer("zen.widen", x_N.numel(), torch.float32, "cpu")
            work_N.copy_(x_N)
        _zen_sum(work_N, ex, seed=seed, hashing=hashing, wire=x_N.dtype)
        with ex.local("widen"):
            x_N.copy_(work_N)
        return x_N
    return _zen_sum(x_N, ex, seed=seed, hashing=hashing)


def _zen_sum(
    x_N: torch.Tensor, ex: Exchange, *, seed: int, hashing: str, wire: torch.dtype | None = None
) -> torch.Tensor:
    sets, got, recv_W = push(x_N, ex, seed=seed, hashing=hashing, wire=wire)
    with ex.local("aggregate"):
        bitmap, values = aggregate_encode(got, sets, ex.rank, _sorted_counts(x_N, recv_W), dtype=x_N.dtype)
    return pull(bitmap, values, ex, sets, x_N, wire=wire)


class NodeGroups:
    """The two families of process groups of the hierarchical mode, for ``gpus_per_node`` ranks per node:
    ``intra`` (this rank's node) and ``inter`` (the ranks with this rank's local rank, one per node).
    Every rank must construct it at the same point (``new_group`` is collective)."""

    def __init__(self, gpus_per_node: int) -> None:
        import torch.distributed as dist

        world, rank = dist.get_world_size(), dist.get_rank()
        if gpus_per_node < 1 or world % gpus_per_node:
            raise ValueError(f"world size {world} is not a multiple of gpus_per_node={gpus_per_node}")
        self.gpus_per_node = G = gpus_per_node
        self.num_nodes = world // G
        self.intra = self.inter = None
        for node in range(self.num_nodes):
            g = dist.new_group(list(range(node * G, (node + 1) * G)))
            if rank // G == node:
                self.intra = g
        for local in range(G):
            g = dist.new_group(list(range(local, world, G)))
            if rank % G == local:
                self.inter = g


NODE_SUMS = ("auto", "dense", "sparse")
"""How :func:`zen_sum_hierarchical` sums inside a node: ``dense``, the paper's reduce-scatter / all-gather (cheap
on NVLink); ``sparse``, Zen's own push and pull inside the node (on the CPU a dense 8 MB reduce-scatter over
loopback costs more than the inter-node traffic it saves); ``auto``, dense on CUDA, sparse on the CPU."""


def zen_sum_hierarchical(
    x_N: torch.Tensor,
    groups: NodeGroups,
    *,
    seed: int = 0,
    hashing: str = "auto",
    exchanges: list | None = None,
    node_sum: str = "auto",
) -> torch.Tensor:
    """Sum over all ranks for several GPUs per node (digest section 4.7), in place like :func:`zen_sum`: the
    node's sum split over its ranks, Zen across nodes among the ranks holding the same part, and the parts
    gathered inside the node. ``node_sum`` (:data:`NODE_SUMS`) says how the node splits and gathers: ``dense``, a
    dense reduce-scatter of contiguous chunks (an ``all_to_all_single``, then a local sum: works on gloo and
    NCCL) and an all-gather; ``sparse``, Zen's push inside the node (part p = the hash set S_p of the node's
    rank p, aggregated by p), Zen across nodes on that part as a compact |S_p| vector, then Zen's hash-bitmap pull
    inside the node (the bitmap of what the node touched or the nodes' sum made non-zero). ``exchanges``, if given,
    receives the :class:`Exchange` objects used (their ``records`` hold the bytes per phase)."""
    if node_sum not in NODE_SUMS:
        raise ValueError(f"node_sum must be one of {NODE_SUMS}, got {node_sum!r}")
    if node_sum == "sparse" or (node_sum == "auto" and x_N.device.type == "cpu"):
        _hierarchical_sparse(x_N, groups, seed=seed, hashing=hashing, exchanges=exchanges)
    else:
        _hierarchical_dense(x_N, groups, seed=seed, hashing=hashing, exchanges=exchanges)
    return positive_zeros(x_N)  # a -0.0 no rank sent is +0.0 on every rank (the dtype contract)


def _hierarchical_dense(
    x_N: torch.Tensor, groups: NodeGroups, *, seed: int, hashing: str, exchanges: list | None
) -> torch.Tensor:

    N, G = x_N.numel(), groups.gpus_per_node
    sizes = ring_chunk_sizes(N, G)
    intra = Exchange(groups.intra)
    with intra.phase("reduce_scatter"):
        split = torch.tensor(sizes, dtype=torch.int64)
        mine = sizes[intra.rank]
        got = intra.all_to_all_v(x_N, split, torch.full((G,), mine, dtype=torch.int64))
    chunk = got.view(G, mine).sum(0, dtype=x_N.dtype) if mine else got[:0]  # integers keep their width
    inter = Exchange(groups.inter) if groups.num_nodes > 1 else None
    if inter is not None:
        chunk = zen_sum(chunk, inter, seed=seed, hashing=hashing)
    if exchanges is not None:
        exchanges += [ex for ex in (intra, inter) if ex is not None]
    with intra.phase("all_gather"):
        return x_N.copy_(intra.all_gather_v(chunk, torch.tensor(sizes, dtype=torch.int64)))


def _hierarchical_sparse(
    x_N: torch.Tensor, groups: NodeGroups, *, seed: int, hashing: str, exchanges: list | None
) -> torch.Tensor:
    intra = Exchange(groups.intra)
    inter = Exchange(groups.inter) if groups.num_nodes > 1 else None
    if exchanges is not None:
        exchanges += [ex for ex in (intra, inter) if ex is not None]
    sets, got, recv_W = push(x_N, intra, seed=seed, hashing=hashing)
    p = intra.rank
    if inter is None:  # one node: plain Zen
        with intra.local("aggregate"):
            bitmap, values = aggregate_encode(got, sets, p, _sorted_counts(x_N, recv_W), dtype=x_N.dtype)
        return pull(bitmap, values, intra, sets, x_N)
    size, nbytes = sets.sizes[p], sets.byte_starts[p + 1] - sets.byte_starts[p]
    if _kernel(x_N) and coo_words(x_N.numel(), x_N.dtype) == 2:
        # the node's sum on S_p straight into the persistent |S_p| accumulator (the same index space on every
        # node), summed across nodes in place, read out by the final bitmap, which leaves it zeroed
        acc = sets.accumulator(p)
        try:
            with intra.local("aggregate"):
                bitmap = torch.zeros(nbytes, dtype=torch.uint8)
                native.accumulate_packed(got, size, bitmap, acc)
            zen_sum(acc, inter, seed=seed, hashing=hashing)
            with inter.local("compact"):
                # what the node touched (its ranks' own non-zeros must be overwritten, even by a zero sum) and
                # what the other nodes added
                bitmap |= bits_at(native.extract(acc)[0], nbytes)
                count = int(popcounts(bitmap, torch.tensor([0, nbytes]))[0])
                values = native.take_set(bitmap, acc, count)
        except BaseException:
            acc.zero_()
            raise
        return pull(bitmap, values, intra, sets, x_N)
    with intra.local("aggregate"):
        bitmap, values = aggregate_encode(got, sets, p, _sorted_counts(x_N, recv_W), dtype=x_N.dtype)
        bitmap = bitmap.clone()  # a workspace view: the push across nodes below reuses it
    with inter.local("compact"):
        part = torch.zeros(size, dtype=x_N.dtype, device=x_N.device)
        part[set_positions(bitmap)] = values.to(x_N.device, x_N.dtype)
    zen_sum(part, inter, seed=seed, hashing=hashing)
    with inter.local("compact"):
        bitmap = bitmap | bits_at(torch.nonzero(part, as_tuple=True)[0], nbytes).to(bitmap.device)
        values = part[set_positions(bitmap)]
    return pull(bitmap, values, intra, sets, x_N)
