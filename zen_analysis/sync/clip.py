"""Gradient clipping as a sync clips: ``torch.nn.utils.clip_grad_norm_``'s rule (one global L2 norm, every gradient
scaled by ``max_norm / (norm + 1e-6)`` capped at 1) where an embedding's gradient is read on the rows it touched.

Why a sync's: the clip needs the norm of the gradient the ranks agreed on, and only the sync knows where that
gradient lives — whole on every rank (:meth:`~zen_analysis.sync.grad_sync.GradSync.clip_grad_norm_`), sharded across
them (FSDP2's sync, whose norm is a collective), or on a few rows of a table (a sync by rows, a ``sparse=True``
embedding; :func:`clip_grad_norm_by_rows`).

Shape suffixes: K non-zero rows of a sparse gradient, D values per row (the table's width)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from zen_analysis.wire.rows import sparse_rows


@torch.no_grad()
def clip_grad_norm_by_rows(
    params: Iterable[torch.Tensor], max_norm: float, rows: dict[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` (global L2 norm, coefficient ``max_norm / (norm + 1e-6)`` capped at 1)
    where the parameters in ``rows`` are read and scaled on those rows of their gradient alone (every other row
    is zero: it adds nothing to the norm and stays zero when scaled); a sparse gradient's values are scaled. Returns
    the total norm. Not bit-identical to the dense clip (the norm's sum runs in another order), the same whatever
    the sync."""
    params = [p for p in params if p.grad is not None]
    norms = []
    for p in params:
        if p in rows:
            g = sparse_rows(p.grad)[1] if p.grad.is_sparse else p.grad[rows[p]]
            norms.append(torch.linalg.vector_norm(g, 2))
        else:
            norms.append(torch.linalg.vector_norm(p.grad, 2))
    if not norms:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack(norms), 2)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in params:
        if p not in rows:
            p.grad.mul_(coef)
        elif p.grad.is_sparse:
            p.grad = torch.sparse_coo_tensor(*_scaled_sparse(p.grad, coef), is_coalesced=True)  # sparse_rows' order
        else:
            p.grad[rows[p]] *= coef
    return total


def _scaled_sparse(grad: torch.Tensor, coef: torch.Tensor) -> tuple:
    rows_K, values_KD = sparse_rows(grad)
    return rows_K.unsqueeze(0), values_KD * coef, grad.shape
