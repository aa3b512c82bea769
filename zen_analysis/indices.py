"""The one check of an index input: every public function that takes non-zero positions runs it.

An index set is a 1-D tensor of integer positions in a flattened tensor of ``numel`` elements. Before this
check existed, each entry point converted with ``.long()``: floats were truncated, negative indices wrapped
around in ``x[idx]`` (a wrong answer, no error), and the C and torch hash paths disagreed on what they did
not expect. Now they all refuse, naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32, torch.uint64)


def check_indices(
    indices: torch.Tensor | np.ndarray | Sequence[int], numel: int | None = None, *, name: str = "indices"
) -> torch.Tensor:
    """``indices`` as a 1-D int64 tensor (same device), after checking it holds positions in ``[0, numel)``.

    Raises ``ValueError`` for a floating-point or boolean dtype, more than one dimension, a negative index, or
    one ``>= numel`` (when ``numel`` is given). An empty input of any shape is the empty set. The cost is one
    pass over the indices (their min and max).
    """
    t = torch.as_tensor(indices)
    if t.numel() == 0:
        return t.reshape(0).to(torch.long)
    if t.dtype not in _INT_DTYPES:
        raise ValueError(f"{name} must be an integer tensor of positions, got dtype {t.dtype}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D (flat positions in the flattened tensor), got shape {tuple(t.shape)}")
    wide = t.to(torch.long)  # lossless below 2**63; torch has few kernels for the unsigned types
    lo, hi = torch.stack(torch.aminmax(wide)).tolist()  # one host sync on a GPU
    if t.dtype == torch.uint64 and lo < 0:
        raise ValueError(f"{name}: unsigned 64-bit values >= 2**63 do not fit an int64 position")
    if lo < 0:
        raise ValueError(f"{name} must be non-negative, got {lo} (negative positions would wrap around)")
    if numel is not None and hi >= numel:
        raise ValueError(f"{name} must lie in [0, {numel}), got {hi}")
    return wide
