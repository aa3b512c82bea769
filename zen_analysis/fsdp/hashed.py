"""Hashed row ownership under FSDP2: an embedding table stored in a fixed order derived from Zen's h0, so that each
contiguous FSDP2 shard holds a hash-balanced set of rows.

FSDP2 shards a table by contiguous rows (rank r holds rows ``[r * ceil(V / W), (r + 1) * ceil(V / W))``). With a
vocabulary ordered by frequency (a word vocabulary, BPE merges) the first shard owns most rows a batch touches
(the paper's C3), so its owner receives most of every sparse reduce-scatter. Zen assigns index i to a server by
``h0(i)``; here the table's rows are stored sorted by ``h0(row)`` (:func:`hashed_order`), a fixed pseudo-random
permutation of the rows that depends on the vocabulary size and the seed alone, so any contiguous split of the
stored rows, for any number of ranks, is a hash partition, and Theorem 2 bounds the busiest rank's received rows.

:class:`HashedRows` applies it to one ``nn.Embedding`` before ``fully_shard``:

* the weight is permuted in place (stored row ``j`` holds id ``order[j]``);
* a forward pre-hook maps each id to its stored row (``row_of_id[ids]``: an index gather over the batch's ids); an id
  outside ``[0, V)`` is passed on as it is, so ``F.embedding`` raises for it what it raises on a plain table
  (``IndexError`` on the CPU, a device assert on CUDA: no host sync to check it);
* ``padding_idx`` is mapped the same way: the module's ``padding_idx`` names the pad's stored row, as its weight is
  in the stored order (its row stays as it is and gets no gradient; ``reset_parameters`` zeroes that row), and
  :attr:`HashedRows.padding_id` keeps the id. ``max_norm`` renormalises the looked-up rows, and
  ``scale_grad_by_freq`` counts each id as often as before: both act on the stored rows of the same ids;
* ``state_dict`` gives the table in the original row order and ``load_state_dict`` takes it in that order (so
  ``torch.distributed.checkpoint`` and ``save_pretrained`` see the original order). Under FSDP2 the table is a
  sharded DTensor, and reordering it gathers the full table on every rank for that call (the memory of one
  replica, as DDP holds all along); :func:`to_original` / :func:`to_stored` do the same for a tensor laid out like
  the table (an optimizer's moments).

What a user does not get: code that indexes ``embedding.weight`` directly (not through the module's forward) sees
the stored order; resizing the table (``resize_token_embeddings``) or setting ``padding_idx`` must happen before
:class:`HashedRows`.

Shape suffixes: R rows of the table (one per id), W ranks (one count each).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from zen_analysis.zen.hashing import h0

STRATA = 256
"""Ids per stratum of :func:`hashed_order`: any split into up to this many contiguous shards gets every stratum."""


def hashed_order(num_rows: int, seed: int = 0, *, strata: int | None = STRATA) -> torch.Tensor:
    """int64 (num_rows,): the id stored at each row.

    ``strata=None``: the ids sorted by ``h0(id, seed)`` (ties by id), the paper's hash partition: every contiguous
    split of it is a hash partition. ``strata=s`` (the default): the ids cut into blocks of ``s`` consecutive ids,
    each block ordered by h0, and the blocks interleaved (the first id of every block by h0, then the second...), so
    every contiguous shard of at least ``ceil(V / s)`` rows takes its share of every block. In a vocabulary ordered by
    frequency (BPE merges, a word vocabulary) a block holds ids of like frequency, and the shards' loads differ by
    the sampling noise inside blocks rather than across the whole vocabulary (``zen-analysis bench fsdp-balance``
    measures both orders: ``docs/results/bench/fsdp-balance.md``). On a vocabulary in no particular order it is as
    good as the plain hash."""
    ids_R = torch.arange(num_rows, dtype=torch.int64)
    if strata is None:
        return torch.sort(h0(ids_R, seed), stable=True).indices
    if strata < 2:
        raise ValueError(f"strata must be at least 2 ids (one id a block keeps the original order), got {strata}")
    block_R = torch.div(ids_R, strata, rounding_mode="floor")
    rank_R = torch.empty_like(ids_R)
    rank_R[torch.argsort(block_R * 2**32 + h0(ids_R, seed))] = ids_R  # rank of each id in (block, h0) order
    within_R = rank_R - block_R * strata
    blocks = -(-num_rows // strata)
    return torch.argsort(within_R * blocks + block_R)


def inverse(order_R: torch.Tensor) -> torch.Tensor:
    """The stored row of each id: ``inverse(order)[order[j]] == j``."""
    out = torch.empty_like(order_R)
    out[order_R] = torch.arange(order_R.numel(), dtype=order_R.dtype, device=order_R.device)
    return out


def _reorder(t: torch.Tensor, index_R: torch.Tensor) -> torch.Tensor:
    """``t.index_select(0, index_R)``; a DTensor is gathered, reordered and laid out again as it was."""
    if isinstance(t, DTensor):
        full = t.full_tensor().index_select(0, index_R.to(t.device))
        return distribute_tensor(full, t.device_mesh, t.placements, src_data_rank=None)
    return t.index_select(0, index_R.to(t.device))


def fsdp_shard_rows(num_rows: int, world: int) -> int:
    """Rows per FSDP2 shard of a ``num_rows``-row table on ``world`` ranks (``torch.chunk``'s, the last padded)."""
    return math.ceil(num_rows / world)


def received_rows(row_sets: list[torch.Tensor], num_rows: int, world: int, row_of_id: torch.Tensor | None = None):
    """int64 (world,): the rows each rank's shard is sent in one sparse reduce-scatter, when rank r pushes the
    distinct ids ``row_sets[r]`` (its own shard's included), stored contiguously (``row_of_id`` None) or at
    ``row_of_id[id]`` (:class:`HashedRows`)."""
    per = fsdp_shard_rows(num_rows, world)
    counts_W = torch.zeros(world, dtype=torch.int64)
    for ids in row_sets:
        rows = torch.unique(ids.reshape(-1).to(torch.int64))
        if row_of_id is not None:
            rows = row_of_id[rows]
        counts_W += torch.bincount(torch.div(rows, per, rounding_mode="floor"), minlength=world)
    return counts_W


def balls_into_bins_bound(total: int, world: int) -> float:
    """Theorem 2's bound on busiest / mean for ``total`` rows hashed to ``world`` owners: the balls-into-bins
    maximum load ``m / n + sqrt(2 m ln n / n)`` over the mean ``m / n``, i.e. ``1 + sqrt(2 n ln n / m)`` (the
    leading term; Theorem 2 states it up to a constant)."""
    return 1.0 + math.sqrt(2.0 * world * math.log(world) / total) if total and world > 1 else 1.0


class HashedRows:
    """One ``nn.Embedding`` stored in Zen's hashed row order (module docstring). Apply before ``fully_shard``."""

    def __init__(self, embedding: nn.Embedding, *, seed: int = 0, strata: int | None = STRATA) -> None:
        if isinstance(embedding.weight, DTensor):
            raise ValueError("hash the rows before fully_shard: the table is sharded already (its order is fixed)")
        if getattr(embedding, "_zen_hashed_rows", None) is not None:
            raise ValueError("this embedding's rows are hashed already")
        self.seed = seed
        self.order_R = hashed_order(embedding.num_embeddings, seed, strata=strata)
        self.row_of_id_R = inverse(self.order_R)
        self._row_of_id = {self.row_of_id_R.device: self.row_of_id_R}
        """``row_of_id_R`` on each device the ids came from (copied there once; a buffer would be left uninitialised
        by ``to_empty`` after meta-device construction)."""
        self.padding_id = _padding_id(embedding.padding_idx, embedding.num_embeddings)
        """The padding id, in the original order (None without one); ``embedding.padding_idx`` is its stored row."""
        with torch.no_grad():
            embedding.weight.copy_(embedding.weight.index_select(0, self.order_R.to(embedding.weight.device)))
        if self.padding_id is not None:
            embedding.padding_idx = int(self.row_of_id_R[self.padding_id])
        embedding._zen_hashed_rows = self

        def to_original_hook(module, state_dict, prefix, local_metadata) -> None:
            if prefix + "weight" in state_dict:
                state_dict[prefix + "weight"] = to_original(state_dict[prefix + "weight"], self)

        def to_stored_hook(module, state_dict, prefix, *_) -> None:
            if prefix + "weight" in state_dict:
                state_dict[prefix + "weight"] = to_stored(state_dict[prefix + "weight"], self)

        self._handles = [
            embedding.register_forward_pre_hook(self._map_ids, prepend=True, with_kwargs=True),
            embedding.register_state_dict_post_hook(to_original_hook),
            embedding.register_load_state_dict_pre_hook(to_stored_hook),
        ]

    def stored_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """int64, ``ids``' shape: the stored row of each id in ``[0, V)``, and any other id as it is (so that
        ``F.embedding`` raises for it what it raises on a plain table, on the device, without a host sync)."""
        row_of_id = self._row_of_id.get(ids.device)
        if row_of_id is None:
            row_of_id = self._row_of_id[ids.device] = self.row_of_id_R.to(ids.device)
        last = row_of_id.numel() - 1
        inside = (ids >= 0) & (ids <= last)
        return torch.where(inside, row_of_id[ids.clamp(0, last)], ids)

    def _map_ids(self, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """The forward pre-hook: the ids (``input``, positional or by name) replaced by their stored rows. Ids of a
        dtype ``F.embedding`` refuses (it takes int64 and int32) are left for it to refuse."""
        if args:
            ids, rest = args[0], args[1:]
        elif "input" in kwargs:
            ids, rest = kwargs["input"], ()
        else:
            return None
        if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32):
            return None
        rows = self.stored_rows(ids)
        if args:
            return (rows, *rest), kwargs
        return args, {**kwargs, "input": rows}


def _padding_id(padding_idx: int | None, num_rows: int) -> int | None:
    """``padding_idx`` as ``nn.Embedding`` and ``F.embedding`` read it: a negative one counts from the end."""
    if padding_idx is None:
        return None
    if not -num_rows <= padding_idx < num_rows:
        raise ValueError(f"padding_idx {padding_idx} is outside the table's {num_rows} rows")
    return padding_idx + num_rows if padding_idx < 0 else padding_idx


def to_original(t: torch.Tensor, hashed: HashedRows) -> torch.Tensor:
    """A tensor laid out like the stored table (the weight, a gradient, a moment) in the original row order."""
    return _reorder(t, hashed.row_of_id_R)


def to_stored(t: torch.Tensor, hashed: HashedRows) -> torch.Tensor:
    """A tensor in the original row order laid out as the table is stored."""
    return _reorder(t, hashed.order_R)


def hashed_rows_of(embedding: nn.Module) -> HashedRows | None:
    """The :class:`HashedRows` applied to ``embedding``, if any."""
    return getattr(embedding, "_zen_hashed_rows", None)
