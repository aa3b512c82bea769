"""Row granularity: an embedding table's gradient as the rows it touches, each carrying ``dim`` values.

The natural sparsity of an embedding gradient is row-shaped: a batch's token ids select rows of ``dim`` values, all
other rows are exactly zero (Zen paper section 2.2). Summing it element by element scans all ``rows x dim``
elements and sends an index per element; summing it by rows sends one index per row and lets the scheme hash,
bitmap-encode and scatter rows (:meth:`~zen_analysis.comm.schemes.base.CommScheme.sum_rows`). The index space is
the rows: a row's index is its position in the table, and the byte models count one index plus ``dim`` values per
entry.

A row set is a sorted 1-D int64 tensor of distinct rows, with a (K, dim) value tensor beside it.

Shape suffixes: R rows of the table, D values per row (the table's width), K non-zero rows.
"""

from __future__ import annotations

import torch

from zen_analysis.wire.coo import sum_by_index


def nonzero_rows(grad_RD: torch.Tensor) -> torch.Tensor:
    """The sorted rows of a 2-D gradient that hold a non-zero: for a dense tensor one row-wise pass
    (:func:`row_mask`); for a sparse COO tensor (``nn.Embedding(sparse=True)``) the rows of its coalesced indices
    whose values are not all zero."""
    if grad_RD.dim() != 2:
        raise ValueError(f"a row gradient is 2-D (rows, dim), got shape {tuple(grad_RD.shape)}")
    if grad_RD.is_sparse:
        rows_K, val_KD = sparse_rows(grad_RD)
        return rows_K[row_mask(val_KD)]
    return torch.nonzero(row_mask(grad_RD), as_tuple=True)[0]


def row_mask(g_RD: torch.Tensor) -> torch.Tensor:
    """Bool (R,): the rows of a dense (R, D) tensor with an element ``!= 0`` (NaN and inf count, ``-0.0`` does not).

    Two row reductions, ``amax(1) != 0 | amin(1) != 0``, with no (R, D) temporary: a row is all zero iff its max
    and min both are, and a NaN propagates through both. Two reductions read the table without writing an (R, D)
    mask, which ``g.bool().any(1)``, ``(g != 0).any(1)``, a flat ``nonzero`` and ``count_nonzero(g, dim=1)`` all
    do, so this is the cheapest of them on an embedding-sized table. Integer and empty-row tensors take
    ``(g != 0).any(1)``."""
    if not g_RD.is_floating_point() or g_RD.shape[1] == 0:
        return (g_RD != 0).any(1)
    return (g_RD.amax(1) != 0) | (g_RD.amin(1) != 0)


def sparse_rows(grad_RD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted distinct rows, their (K, dim) values) of a sparse COO row gradient, duplicates summed (coalesced)."""
    g = grad_RD.coalesce()
    if g.sparse_dim() != 1:
        raise ValueError(f"a sparse row gradient has one sparse dimension (the rows), got {g.sparse_dim()}")
    return g.indices()[0], g.values().contiguous()


def canonical_rows(rows_K: torch.Tensor, values_KD: torch.Tensor, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows_K`` / ``values_KD`` checked (1-D integer rows in ``[0, num_rows)``, one (dim,) value row each) and
    made a row set: sorted and distinct, duplicate rows summed in the dtype's accumulate dtype. Free of work when
    the rows are sorted and distinct already (one comparison pass)."""
    if values_KD.dim() != 2 or rows_K.dim() != 1 or rows_K.numel() != values_KD.shape[0]:
        raise ValueError(
            f"rows must be 1-D with one row of values each: got rows {tuple(rows_K.shape)}, "
            f"values {tuple(values_KD.shape)}"
        )
    if rows_K.dtype.is_floating_point or rows_K.dtype == torch.bool:
        raise ValueError(f"rows must be integer row indices, got dtype {rows_K.dtype}")
    rows_K = rows_K.to(torch.int64)
    if rows_K.numel():
        lo, hi = int(rows_K.min()), int(rows_K.max())
        if lo < 0 or hi >= num_rows:
            raise ValueError(f"rows must lie in [0, {num_rows}), got rows from {lo} to {hi}")
        if not bool((rows_K[1:] > rows_K[:-1]).all()):
            rows_K, values_KD = sum_by_index(rows_K, values_KD)
    return rows_K, values_KD
