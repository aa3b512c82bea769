"""The COO wire format every sparse scheme packs: an index (int32 below 2**31 entries, as in the paper) and its
values at their dtype's width, one entry after another, so one collective call carries both; and the sum of
entries by index, how a rank adds what it received (:mod:`zen_analysis.wire.dtypes` says in what precision).
An entry is an element (one value) or a row (``width`` values: :mod:`zen_analysis.wire.rows`).

Shape suffixes: K entries (elements, or rows: ``val_K`` is (K,) or (K, width))."""

from __future__ import annotations

import math

import torch

from zen_analysis.wire.dtypes import accumulate_dtype, value_bytes


def index_dtype(numel: int) -> torch.dtype:
    """Wire width of indices: int32 below 2**31 elements (as in the paper), else int64."""
    return torch.int32 if numel < 2**31 else torch.int64


def index_bytes(numel: int) -> int:
    """Bytes of one index on the wire for a tensor of ``numel`` entries (:func:`index_dtype`'s width)."""
    return 4 if numel < 2**31 else 8


def coo_layout(numel: int, dtype: torch.dtype = torch.float32, width: int = 0) -> tuple[torch.dtype, int]:
    """(wire unit, units per entry) of a packed COO entry: its index (int32 below 2**31 entries, else int64) and
    its values (one for an element; ``width``, the row's length, for a row) at the values' own width, in the widest
    unit both are whole multiples of (int32 words for a float32 value and an int32 index, two per entry; bytes for
    one 2-byte value after a 4-byte index: 6 per entry). The unit is one gloo and NCCL move (they have no int16):
    the buffer's bytes are exactly index + values bytes per entry."""
    ib, vb = index_bytes(numel), value_bytes(dtype) * max(width, 1)
    unit = math.gcd(ib, vb)
    unit = unit if unit in (4, 8) else 1  # 2-byte values: bytes
    return {1: torch.uint8, 4: torch.int32, 8: torch.int64}[unit], (ib + vb) // unit


def coo_words(numel: int, dtype: torch.dtype = torch.float32, width: int = 0) -> int:
    """Units per packed COO entry (:func:`coo_layout`): 2 int32 words for a float32 value below 2**31 elements,
    257 for a row of 256 float32 values."""
    return coo_layout(numel, dtype, width)[1]


def pack_coo(idx_K: torch.Tensor, val_K: torch.Tensor, numel: int) -> torch.Tensor:
    """Indices and values (at their own dtype's width) in one buffer, entry after entry (:func:`coo_layout`), so
    one collective call carries both: same bytes as two buffers, half the calls. ``val_K`` is (K,) for elements or
    (K, D) for rows (index space: ``numel`` rows)."""
    unit, per = coo_layout(numel, val_K.dtype, row_width(val_K))
    cut = index_bytes(numel) // unit.itemsize  # units of the index
    words = torch.empty(idx_K.numel(), per, dtype=unit, device=val_K.device)
    if idx_K.numel():
        words[:, :cut] = idx_K.to(index_dtype(numel)).contiguous().reshape(-1, 1).view(unit)
        words[:, cut:] = val_K.contiguous().reshape(idx_K.numel(), -1).view(unit)
    return words.reshape(-1)


def unpack_coo(
    words: torch.Tensor, numel: int, dtype: torch.dtype = torch.float32, width: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices int64, values of ``dtype``) from :func:`pack_coo`'s buffer: values (K,) for elements (``width``
    0), (K, ``width``) for rows."""
    ib, vb = index_bytes(numel), value_bytes(dtype) * max(width, 1)
    w = words.contiguous().view(torch.uint8).view(-1, ib + vb)
    val = _bytes_as(w[:, ib:], dtype)
    return _bytes_as(w[:, :ib], index_dtype(numel)).long(), (val.view(-1, width) if width else val)


def _bytes_as(columns: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Byte columns of a packed buffer read as one flat tensor of ``dtype`` (a copy: the columns are strided; a
    single row's slice is a view, copied too when its offset is not aligned to ``dtype``)."""
    flat = columns.reshape(-1)
    if flat.data_ptr() == columns.data_ptr() and flat.storage_offset() % dtype.itemsize:
        flat = flat.clone()
    return flat.view(dtype)


def row_width(val_K: torch.Tensor) -> int:
    """Values per entry of a COO value tensor in :func:`coo_layout`'s terms: 0 for elements (K,), D for rows (K, D)."""
    return val_K.shape[1] if val_K.dim() == 2 else 0


def sum_by_index(idx_K: torch.Tensor, val_K: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(distinct indices ascending, the sum of each one's values in ``val_K``'s dtype): added in
    :func:`~zen_analysis.wire.dtypes.accumulate_dtype` in the entries' order (fp16/bf16 in float32, rounded once).
    ``val_K`` may be (K,) or rows (K, D)."""
    u_idx, inverse = torch.unique(idx_K, return_inverse=True)
    acc = accumulate_dtype(val_K.dtype)
    sums = val_K.new_zeros((u_idx.numel(), *val_K.shape[1:]), dtype=acc).index_add_(0, inverse, val_K.to(acc))
    return u_idx, sums.to(val_K.dtype)


__all__ = [
    "coo_layout",
    "coo_words",
    "index_bytes",
    "index_dtype",
    "pack_coo",
    "row_width",
    "sum_by_index",
    "unpack_coo",
]
