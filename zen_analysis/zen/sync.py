"""Zen's synchronization: Balanced Parallelism with hierarchical-hash push and hash-bitmap pull.

``zen_sum(x_N, ex)`` is one sparse all-reduce over the exchange's process group (any size):

1. **push** — the rank's non-zeros are bucketed by server with Algorithm 1 (:mod:`zen_analysis.zen.hierarchical`;
   the plain argsort bucketing with ``hashing="argsort"``), the per-server counts are exchanged, and indices
   and values travel in one ``all_to_all_single`` each;
2. **aggregate** — server p sums what it received (a partition of the index space: no other rank holds it);
3. **pull** — server p encodes its aggregate as a hash bitmap over S_p plus values
   (:mod:`zen_analysis.zen.bitmap`) and all-gathers it; bitmap sizes are static and the value counts follow
   from the bitmaps, so the pull needs no count exchange.

The result equals ``all_reduce`` of the dense tensors (bit for bit on integer-valued inputs). Byte accounting
goes through :class:`~zen_analysis.comm.exchange.Exchange`, so the ``zen`` scheme's traffic model covers it.
"""

from __future__ import annotations

import torch

from zen_analysis.comm.exchange import Exchange, push_to_owners
from zen_analysis.zen.bitmap import HashBitmap, unpack_bits
from zen_analysis.zen.hierarchical import bucket_reference, hierarchical_hash

HASHINGS = ("hierarchical", "argsort")


def push(x_N: torch.Tensor, ex: Exchange, *, seed: int, hashing: str = "hierarchical") -> tuple[torch.Tensor, torch.Tensor]:
    """(indices sorted ascending, summed values) of the partition this rank serves after the push."""
    idx_K = torch.nonzero(x_N, as_tuple=True)[0]
    if hashing == "hierarchical":
        buckets = hierarchical_hash(idx_K, ex.world, seed=seed)
    elif hashing == "argsort":
        buckets = bucket_reference(idx_K, ex.world, seed=seed)
    else:
        raise ValueError(f"hashing must be one of {HASHINGS}, got {hashing!r}")
    send_idx = idx_K[buckets.positions_K]
    return push_to_owners(send_idx, x_N[send_idx], buckets.counts_n.to(torch.int64).cpu(), x_N.numel(), ex)


def pull(u_idx: torch.Tensor, u_val: torch.Tensor, numel: int, ex: Exchange, hb: HashBitmap) -> torch.Tensor:
    """Every server's aggregate, hash-bitmap encoded and all-gathered, decoded into a dense tensor."""
    bitmap, values = hb.encode(ex.rank, u_idx, u_val)
    sizes_W = torch.tensor([hb.bitmap_bytes(p) for p in range(ex.world)], dtype=torch.int64)
    with ex.phase("pull"):
        all_bits = ex.all_gather_v(bitmap, sizes_W)
        masks = [unpack_bits(b, hb.sizes[p]) for p, b in enumerate(torch.split(all_bits, sizes_W.tolist()))]
        counts_W = torch.tensor([int(m.sum()) for m in masks], dtype=torch.int64)
        all_val = ex.all_gather_v(values, counts_W)
    out_N = torch.zeros(numel, dtype=u_val.dtype, device=u_val.device)
    for p, (m, v) in enumerate(zip(masks, torch.split(all_val, counts_W.tolist()))):
        out_N[hb.partition(p).to(m.device).long()[m]] = v
    return out_N


def zen_sum(x_N: torch.Tensor, ex: Exchange, *, seed: int = 0, hashing: str = "hierarchical") -> torch.Tensor:
    """Sum of the ranks' flat tensors ``x_N`` via push (hash owners) and hash-bitmap pull."""
    hb = HashBitmap(x_N.numel(), ex.world, seed)
    u_idx, u_val = push(x_N, ex, seed=seed, hashing=hashing)
    return pull(u_idx, u_val, x_N.numel(), ex, hb)


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
    ranks holding the same chunk, and an all-gather of the chunks inside the node. ``exchanges``, if given,
    receives the :class:`Exchange` objects used (their ``records`` hold the bytes per phase)."""
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
        return intra.all_gather_v(chunk, torch.tensor(sizes, dtype=torch.int64)).to(x_N.device)
