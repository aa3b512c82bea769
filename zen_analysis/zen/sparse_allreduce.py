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

Shape suffixes: N elements of the flat tensor, K non-zero rows on this rank, D values per row (the table's width), W
ranks in the group, G rows this rank received in the push (repeats kept), U rows of the sum (the union).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from zen_analysis import workspace
from zen_analysis.wire.coo import coo_words, pack_coo, sum_by_index, unpack_coo
from zen_analysis.wire.dtypes import positive_zeros
from zen_analysis.wire.exchange import Exchange, ring_chunk_sizes
from zen_analysis.zen import native
from zen_analysis.zen.bitmap import bits_at, popcounts, set_positions, static_sets
from zen_analysis.zen.hierarchical import bucket_reference
from zen_analysis.zen.push_pull import HASHINGS as HASHINGS
from zen_analysis.zen.push_pull import aggregate_encode as aggregate_encode
from zen_analysis.zen.push_pull import indices_of_bits, kernel_applies, pull, push, sorted_counts


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
        rows_U = indices_of_bits(all_bits, sets)
    return rows_U, all_val.view(-1, D)


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
        bitmap, values = aggregate_encode(got, sets, ex.rank, sorted_counts(x_N, recv_W), dtype=x_N.dtype)
    return pull(bitmap, values, ex, sets, x_N, wire=wire)


class NodeGroups:
    """The two families of process groups of the hierarchical mode, for ``gpus_per_node`` ranks per node:
    ``intra`` (this rank's node) and ``inter`` (the ranks with this rank's local rank, one per node).
    Every rank must construct it at the same point (``new_group`` is collective)."""

    def __init__(self, gpus_per_node: int) -> None:
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
            bitmap, values = aggregate_encode(got, sets, p, sorted_counts(x_N, recv_W), dtype=x_N.dtype)
        return pull(bitmap, values, intra, sets, x_N)
    size, nbytes = sets.sizes[p], sets.byte_starts[p + 1] - sets.byte_starts[p]
    if kernel_applies(x_N) and coo_words(x_N.numel(), x_N.dtype) == 2:
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
        bitmap, values = aggregate_encode(got, sets, p, sorted_counts(x_N, recv_W), dtype=x_N.dtype)
        bitmap = bitmap.clone()  # a workspace view: the push across nodes below reuses it
    with inter.local("compact"):
        part = torch.zeros(size, dtype=x_N.dtype, device=x_N.device)
        part[set_positions(bitmap)] = values.to(x_N.device, x_N.dtype)
    zen_sum(part, inter, seed=seed, hashing=hashing)
    with inter.local("compact"):
        bitmap = bitmap | bits_at(torch.nonzero(part, as_tuple=True)[0], nbytes).to(bitmap.device)
        values = part[set_positions(bitmap)]
    return pull(bitmap, values, intra, sets, x_N)
