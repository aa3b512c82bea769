"""Hierarchical hashing (Zen, OSDI'25, Algorithm 1): bucket a worker's non-zero indices by destination server.

Context: Balanced Parallelism pushes each non-zero to the server h0(idx) mod n. Sorting the indices by owner
would do (``bucket_reference``, kept for tests and benchmarks); Algorithm 1 replaces the sort with a hash
memory that GPU threads write into concurrently:

* the memory has one partition per server (first-level hash h0, identical on every rank, so the same index
  meets the same server everywhere), each with a *parallel region* of ``r1 / n`` slots and a *serial region*
  of ``r2 / n`` slots;
* an index probes up to ``k`` slots of its partition's parallel region with second-level hashes h1..hk (these
  may differ between ranks: they only place the index, never route it) and keeps the first empty one; here
  h_i = (g + i * step) mod (r1 / n), double hashing from the bits of h0 the partition id leaves unused (or
  a fresh hash with ``level2_seed``), so the k probes cost no extra hashing;
* indices whose k probes all collide are appended to the serial region with a per-partition counter;
* the occupied slots of partition p are the indices for server p.

Here the threads are bulk-synchronous torch rounds (CPU or CUDA tensors alike): round i scatters every
still-unplaced index into its i-th slot if that slot was empty at the start of the round, then reads the slots
back; the index whose write survived owns the slot, the others go on to round i + 1. Because all writes of a
round land before the read-back, there is no read-after-write race (the paper's lock-free check has one; a CUDA
kernel would use atomicCAS). The serial region is filled with a cumulative count per partition; if it would
overflow, it grows to fit (``serial_overflows`` counts those events) — an index is never dropped.

``r1`` is the *total* parallel capacity over all partitions (default 2 x the number of indices, load factor
0.5, as the paper's "r1 = 2|G|d" reads once one accepts it as a total), ``r2 = r1 / 10`` (the paper's choice).
Shape legend: K indices, n partitions, S slots per partition.

Shape suffixes: K distinct indices of one rank (the hash's input).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zen_analysis.indices import check_indices
from zen_analysis.zen import native
from zen_analysis.zen.hashing import h0_unchecked, owner

EMPTY = -1


@dataclass
class Buckets:
    """Indices grouped by partition: ``positions_K`` indexes the input (so values gather as ``values[positions_K]``),
    partition p's entries are ``positions_K[offsets[p]:offsets[p + 1]]``; order inside a partition is free."""

    positions_K: torch.Tensor
    counts_n: torch.Tensor
    serial_count: int = 0
    """Indices that went to serial regions (all k probes collided)."""
    serial_overflows: int = 0
    """Partitions whose serial region had to grow."""

    @property
    def offsets(self) -> list[int]:
        return [0, *torch.cumsum(self.counts_n, 0).tolist()]

    def split(self, indices_K: torch.Tensor) -> list[torch.Tensor]:
        """One index tensor per partition."""
        return list(torch.split(indices_K[self.positions_K], self.counts_n.tolist()))


def _level2_seed(seed: int, i: int) -> int:
    return (seed * 0x9E3779B1 + 0x632BE5AB * (i + 1)) & 0xFFFFFFFF


def hierarchical_hash(
    indices_K: torch.Tensor,
    num_partitions: int,
    *,
    seed: int,
    k: int = 3,
    r1: int | None = None,
    r2: int | None = None,
    level2_seed: int | None = None,
    backend: str = "auto",
) -> Buckets:
    """Algorithm 1 on distinct non-negative ``indices_K`` (any order, any device).

    ``seed`` is h0's (shared by all ranks); ``level2_seed`` seeds h1..hk (default: ``seed``; may differ per
    rank). Callers must pass distinct indices (Zen's push passes ``nonzero``'s positions): the hash memory holds
    input *positions*, not index values, so a repeated index is not merged. Both backends place every occurrence in
    its own slot of its h0 partition, and ``positions_K`` is still a permutation of ``range(K)``: an index passed m
    times comes out as many times as it was passed (m entries in its partition). Its copies follow the same k
    probes, so at most k of them find parallel slots and the rest go to the serial region (inflating
    ``serial_count``). (``HashBitmap.encode`` refuses duplicates.) ``backend``: ``"native"``, the
    compiled CPU kernel (:mod:`zen_analysis.zen.native`: one pass, compare-and-swap, one thread per torch
    thread); ``"torch"``, bulk-synchronous torch rounds (CPU or CUDA); ``"auto"``, native for CPU tensors when it
    builds, else torch. Both place every index in its h0 partition; slot order (and so the order inside a
    partition, and which indices reach the serial region) may differ.
    """
    return hierarchical_hash_unchecked(
        check_indices(indices_K), num_partitions, seed=seed, k=k, r1=r1, r2=r2, level2_seed=level2_seed, backend=backend
    )


def hierarchical_hash_unchecked(
    idx_K: torch.Tensor,
    num_partitions: int,
    *,
    seed: int,
    k: int = 3,
    r1: int | None = None,
    r2: int | None = None,
    level2_seed: int | None = None,
    backend: str = "auto",
) -> Buckets:
    """:func:`hierarchical_hash` on int64 indices the caller has checked (Zen's own push: positions from
    ``nonzero``)."""
    if num_partitions < 1 or k < 0:
        raise ValueError("num_partitions must be >= 1 and k >= 0")
    if backend not in ("auto", "native", "torch"):
        raise ValueError(f"backend must be auto, native or torch, got {backend!r}")
    dev, K, n = idx_K.device, idx_K.numel(), num_partitions
    r1 = 2 * K if r1 is None else r1
    r2 = r1 // 10 if r2 is None else r2
    par = max(1, -(-r1 // n))  # slots per partition, parallel region
    ser = max(1, -(-r2 // n))
    if backend != "torch" and dev.type == "cpu" and K < 2**31 and n * (par + ser) < 2**40:
        if native.available():
            l2 = None if level2_seed is None else _level2_seed(level2_seed, 0)
            pos, counts, serial, overflows = native.place_and_compact(
                idx_K, n, seed=seed, k=k, par=par, ser=ser, level2_seed=l2
            )
            return Buckets(pos, counts, serial, overflows)
        if backend == "native":
            raise RuntimeError(f"hierarchical_hash: the native kernel is unavailable: {native.unavailable_reason()}")
        native.warn_fallback()
    elif backend == "native":
        raise ValueError("backend='native' needs a CPU tensor with fewer than 2**31 indices")
    return _torch_rounds(idx_K, n, seed=seed, k=k, par=par, ser=ser, level2_seed=level2_seed)


def _torch_rounds(
    idx_K: torch.Tensor, n: int, *, seed: int, k: int, par: int, ser: int, level2_seed: int | None
) -> Buckets:
    """Algorithm 1 as bulk-synchronous torch rounds (the module docstring): the parallel region's k probes, then
    the serial region; ``par`` / ``ser`` slots per partition."""
    dev, K = idx_K.device, idx_K.numel()
    h_K = h0_unchecked(idx_K, seed)
    if n & (n - 1) == 0:  # power of two: partition = low bits, the rest of the hash is free for the slots
        part_K, rest_K = h_K & (n - 1), h_K >> (n.bit_length() - 1)
    else:
        part_K, rest_K = h_K % n, h_K // n
    pos_dtype = torch.int32 if K < 2**31 else torch.long
    # the hash memory holds input positions (EMPTY = -1): slot -> which index sits there
    memory = torch.full((n, par + ser), EMPTY, dtype=pos_dtype, device=dev)
    flat = memory.view(-1)
    # h1..hk by double hashing from one second-level hash g: probe i is (g + i * step) mod r1/n. By default g is
    # the part of h0 the partition id did not use (well mixed, and free); a level2_seed hashes afresh.
    g_K = rest_K if level2_seed is None else h0_unchecked(idx_K, _level2_seed(level2_seed, 0))
    base_K = part_K * (par + ser)
    pending = None  # None: every index (round 0 needs no gathers)
    for i in range(k):
        g = g_K if pending is None else g_K[pending]
        if g.numel() == 0:
            break
        slot = (base_K if pending is None else base_K[pending]) + (g + i * ((g >> 11) | 1)) % par
        free = flat[slot] == EMPTY
        cand = torch.nonzero(free, as_tuple=True)[0].to(pos_dtype) if pending is None else pending[free]
        cslot = slot[free]
        flat[cslot] = cand  # concurrent writes to one slot: one survives
        won = flat[cslot] == cand  # read back after every write of the round has landed
        blocked = torch.nonzero(~free, as_tuple=True)[0].to(pos_dtype) if pending is None else pending[~free]
        pending = torch.cat([blocked, cand[~won]])
    if pending is None:
        pending = torch.arange(K, device=dev, dtype=pos_dtype)
    pending = pending.long()
    serial_count, overflows = pending.numel(), 0
    if serial_count:
        p = part_K[pending]
        order = torch.argsort(p, stable=True)
        pending, p = pending[order], p[order]
        counts = torch.bincount(p, minlength=n)
        if int(counts.max()) > ser:  # grow the serial region rather than drop an index
            overflows = int((counts > ser).sum())
            grown = torch.full((n, par + int(counts.max())), EMPTY, dtype=memory.dtype, device=dev)
            grown[:, : par + ser] = memory
            memory, ser = grown, int(counts.max())
        start = torch.cumsum(counts, 0) - counts
        rank_in_part = torch.arange(pending.numel(), device=dev) - start[p]
        memory[p, par + rank_in_part] = pending.to(memory.dtype)
    occupied = memory >= 0
    return Buckets(memory[occupied].long(), occupied.sum(1), serial_count, overflows)


def bucket_reference(indices_K: torch.Tensor, num_partitions: int, *, seed: int) -> Buckets:
    """The same grouping by a stable argsort on h0's partition ids (the plain reference)."""
    idx_K = check_indices(indices_K)
    part_K = owner(idx_K, num_partitions, seed)
    return Buckets(torch.argsort(part_K, stable=True), torch.bincount(part_K, minlength=num_partitions))
