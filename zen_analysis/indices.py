"""The one check of an index input: every public function that takes non-zero positions runs it.

An index set is a 1-D tensor of integer positions in a flattened tensor of ``numel`` elements. Before this
check existed, each entry point converted with ``.long()``: floats were truncated, negative indices wrapped
around in ``x[idx]`` (a wrong answer, no error), and the C and torch hash paths disagreed on what they did
not expect. Now they all refuse, naming what is wrong.

:func:`check_indices` costs one pass (min and max). Callers that test sortedness anyway use
:func:`as_index_tensor` and then :func:`check_bounds` on the first and last element, which costs nothing more.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32, torch.uint64)


def as_index_tensor(indices: torch.Tensor | np.ndarray | Sequence[int], *, name: str = "indices") -> torch.Tensor:
    """``indices`` as a 1-D int64 tensor (same device) after the checks that need no pass over the values:
    an integer dtype and one dimension (an empty input of any shape is the empty set). Values are not checked:
    follow with :func:`check_bounds`."""
    t = torch.as_tensor(indices)
    if t.numel() == 0:
        return t.reshape(0).to(torch.long)
    if t.dtype not in _INT_DTYPES:
        raise ValueError(f"{name} must be an integer tensor of positions, got dtype {t.dtype}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D (flat positions in the flattened tensor), got shape {tuple(t.shape)}")
    wide = t.to(torch.long)  # lossless below 2**63 (larger uint64 values turn negative: caught as such)
    return wide


def check_bounds(lo: int, hi: int, numel: int | None = None, *, name: str = "indices") -> None:
    """Raise ``ValueError`` unless the smallest (``lo``) and largest (``hi``) index lie in ``[0, numel)``."""
    if lo < 0:
        raise ValueError(
            f"{name} must be non-negative, got {lo} (negative positions would wrap around; unsigned 64-bit "
            "values >= 2**63 read as negative)"
        )
    if numel is not None and hi >= numel:
        raise ValueError(f"{name} must lie in [0, {numel}), got {hi}")


def check_indices(
    indices: torch.Tensor | np.ndarray | Sequence[int], numel: int | None = None, *, name: str = "indices"
) -> torch.Tensor:
    """``indices`` as a 1-D int64 tensor (same device), after checking it holds positions in ``[0, numel)``.

    Raises ``ValueError`` for a floating-point or boolean dtype, more than one dimension, a negative index, or
    one ``>= numel`` (when ``numel`` is given). An empty input of any shape is the empty set. The cost is one
    pass over the indices (their min and max, one host sync on a GPU).
    """
    t = as_index_tensor(indices, name=name)
    if t.numel():
        lo, hi = torch.stack(torch.aminmax(t)).tolist()
        check_bounds(lo, hi, numel, name=name)
    return t
