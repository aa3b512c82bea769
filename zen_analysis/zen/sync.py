"""Zen's synchronization: Balanced Parallelism with hierarchical-hash push and hash-bitmap pull.

``zen_sum(x_N, ex)`` is one sparse all-reduce over the exchange's process group (any size), **in place** like
``dist.all_reduce``: ``x_N`` holds the sum afterwards.

1. **push** — the rank's non-zeros are bucketed by server with Algorithm 1 (:mod:`zen_analysis.zen.hierarchical`;
   the plain argsort bucketing with ``hashing="argsort"``), the per-server counts are exchanged, and indices
   and values travel together in one ``all_to_all_single`` (packed COO);
2. **aggregate** — server p sums what it received (a partition of the index space: no other rank holds it);
3. **pull** — server p encodes its aggregate as a hash bitmap over S_p plus values
   (:mod:`zen_analysis.zen.bitmap`) and all-gathers the bitmap, then the values; bitmap sizes are static and
   the value counts follow from the bitmaps, so the pull needs no count exchange.

Four collective calls: counts, push, bitmaps, values. That is the least for exact bytes: a variable-size message
needs its size known first (the push's counts; the pull's values are counted by the bitmaps, whose sizes are
static), and the pull cannot start before the push has ended.

Work per call, besides the ``nonzero`` and the zeroing and scatter of the result (the passes any dense-in,
dense-out sparse sum makes): O(nnz) for hashing, packing and aggregating; O(numel / 8) bytes of bitmaps to pack
and scan (a pass over the bytes, then work per set bit). The static sets S_p are computed once per (numel, n,
seed, device) and cached (``bitmap.static_sets``, bounded in bytes). Host syncs: the push counts (all_to_all
split sizes) and the pull's value counts (one ``tolist`` of all ranks' popcounts).

The result equals ``all_reduce`` of the dense tensors (bit for bit on integer-valued inputs). Byte and call
accounting goes through :class:`~zen_analysis.comm.exchange.Exchange`, so the ``zen`` scheme's traffic model
covers it; local steps are timed under ``ex.local_seconds`` (extract, hash, aggregate (with the encode), decode,
scatter).
"""

from __future__ import annotations

import torch

from zen_analysis.comm.exchange import Exchange, push_entries, push_to_owners
from zen_analysis.zen import native
from zen_analysis.zen.bitmap import StaticSets, bits_at, popcounts, set_positions, static_sets
from zen_analysis.zen.hierarchical import _hierarchical_hash, bucket_reference

HASHINGS = ("hierarchical", "argsort")


def _send_buckets(x_N: torch.Tensor, ex: Exchange, *, seed: int, hashing: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(indices grouped by server, their values, entries per server) of this rank's non-zeros."""
    if hashing not in HASHINGS:
        raise ValueError(f"hashing must be one of {HASHINGS}, got {hashing!r}")
    with ex.local("extract"):
        idx_K = torch.nonzero(x_N, as_tuple=True)[0]
    with ex.local("hash"):
        if hashing == "hierarchical":
            buckets = _hierarchical_hash(idx_K, ex.world, seed=seed)
        else:
            buckets = bucket_reference(idx_K, ex.world, seed=seed)
        send_idx = idx_K[buckets.positions_K]
        send_val = x_N[send_idx]
        counts_W = buckets.counts_n.to(torch.int64).cpu()
    return send_idx, send_val, counts_W


def push(x_N: torch.Tensor, ex: Exchange, *, seed: int, hashing: str = "hierarchical") -> tuple[torch.Tensor, torch.Tensor]:
    """(indices sorted ascending, summed values) of the partition this rank serves after the push."""
    return push_to_owners(*_send_buckets(x_N, ex, seed=seed, hashing=hashing), x_N.numel(), ex)


def aggregate_encode(r_idx: torch.Tensor, r_val: torch.Tensor, sets: StaticSets, p: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Server p's aggregate of the received (indices, values), hash-bitmap encoded: (bitmap over S_p, summed
    values of its set bits in S_p order). On the CPU with the kernel: a dense accumulator over S_p (no sort);
    else a sort of the received indices."""
    s_p = sets.partition(p)
    nbytes = sets.byte_starts[p + 1] - sets.byte_starts[p]
    if r_idx.device.type == "cpu" and native.available():
        pos = torch.searchsorted(s_p, r_idx.to(s_p.dtype))
        bitmap = torch.zeros(nbytes, dtype=torch.uint8, device="cpu")
        native.bits_set(pos, bitmap)
        acc = torch.zeros(s_p.numel(), dtype=torch.float32, device="cpu").index_add_(0, pos, r_val)
        count = int(native.popcounts(bitmap, torch.tensor([0, nbytes], device="cpu"))[0])
        return bitmap, native.gather_set(bitmap, acc, count)
    u_idx, inverse = torch.unique(r_idx, return_inverse=True)
    u_val = torch.zeros(u_idx.numel(), dtype=torch.float32, device=r_val.device).index_add_(0, inverse, r_val)
    pos = torch.searchsorted(s_p, u_idx.to(s_p.dtype))  # u_idx ascending, so pos too: values in S_p order
    return bits_at(pos, nbytes), u_val


def pull(bitmap: torch.Tensor, u_val: torch.Tensor, ex: Exchange, sets: StaticSets, out_N: torch.Tensor) -> torch.Tensor:
    """Every server's hash bitmap and values all-gathered and written into ``out_N`` (zeroed first)."""
    kernel = out_N.device.type == "cpu" and out_N.dtype == torch.float32 and native.available()
    sizes_W = torch.diff(torch.tensor(sets.byte_starts, dtype=torch.int64, device="cpu"))  # split sizes: host
    with ex.phase("pull"):
        all_bits = ex.all_gather_v(bitmap, sizes_W)
        with ex.local("decode"):
            counts_W = (native.popcounts if kernel else popcounts)(all_bits, sets.byte_starts_t).cpu()
        all_val = ex.all_gather_v(u_val, counts_W)
    if kernel:  # one pass over the bitmaps writing each value where its bit points
        with ex.local("scatter"):
            out_N.zero_()
        with ex.local("decode"):
            native.decode_scatter(all_bits, sets.byte_starts_t, sets.starts_t, sets.order, all_val, counts_W, out_N)
        return out_N
    with ex.local("decode"):
        bit_B = set_positions(all_bits)
        part = torch.searchsorted(sets.byte_starts_t[1:], bit_B >> 3, right=True)
        idx = sets.order[sets.starts_t[part] + bit_B - 8 * sets.byte_starts_t[part]].long()
    with ex.local("scatter"):
        out_N.zero_()
        out_N[idx] = all_val.to(out_N.device, out_N.dtype)
    return out_N


def zen_sum(x_N: torch.Tensor, ex: Exchange, *, seed: int = 0, hashing: str = "hierarchical") -> torch.Tensor:
    """Sum of the ranks' flat tensors ``x_N`` via push (hash owners) and hash-bitmap pull, in place; returns
    ``x_N``."""
    sets = static_sets(x_N.numel(), ex.world, seed, x_N.device)
    r_idx, r_val = push_entries(*_send_buckets(x_N, ex, seed=seed, hashing=hashing), x_N.numel(), ex)
    with ex.local("aggregate"):
        bitmap, values = aggregate_encode(r_idx, r_val, sets, ex.rank)
    return pull(bitmap, values, ex, sets, x_N)


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


def zen_sum_hierarchical(
    x_N: torch.Tensor, groups: NodeGroups, *, seed: int = 0, hashing: str = "hierarchical", exchanges: list | None = None
) -> torch.Tensor:
    """Sum over all ranks for several GPUs per node (digest section 4.7): a dense reduce-scatter inside the node
    (an ``all_to_all_single`` of chunks, then a local sum: works on gloo and NCCL), Zen across nodes among the
    ranks holding the same chunk, and an all-gather of the chunks inside the node; in place, like
    :func:`zen_sum`. ``exchanges``, if given, receives the :class:`Exchange` objects used (their ``records``
    hold the bytes per phase)."""
    from zen_analysis.comm.exchange import ring_chunk_sizes

    N, G = x_N.numel(), groups.gpus_per_node
    sizes = ring_chunk_sizes(N, G)
    intra = Exchange(groups.intra)
    with intra.phase("reduce_scatter"):
        split = torch.tensor(sizes, dtype=torch.int64)
        mine = sizes[intra.rank]
        got = intra.all_to_all_v(x_N, split, torch.full((G,), mine, dtype=torch.int64))
    chunk = got.view(G, mine).sum(0) if mine else got[:0]
    inter = Exchange(groups.inter) if groups.num_nodes > 1 else None
    if inter is not None:
        chunk = zen_sum(chunk, inter, seed=seed, hashing=hashing)
    if exchanges is not None:
        exchanges += [ex for ex in (intra, inter) if ex is not None]
    with intra.phase("all_gather"):
        return x_N.copy_(intra.all_gather_v(chunk, torch.tensor(sizes, dtype=torch.int64)))
