"""Lazy row updates for embedding tables: :class:`LazyRowAdamW` steps only the rows of a (V, D) table that received
a gradient this step, the semantics of ``torch.optim.SparseAdam`` and TF Addons' ``LazyAdam`` that recommendation
trainers use; :func:`zen_analysis.wire.rows.nonzero_rows` finds those rows from a dense or sparse gradient.

Why lazy: with V in the tens of thousands and a few hundred ids per batch, a dense AdamW step reads and writes the
whole table and both moments every step, and its decoupled weight decay shrinks every row, trained or not. The lazy
step touches K rows, so its cost follows the batch, not the vocabulary, and pairs with a sparse sync that already
knows the K rows (pass them as ``step(rows=...)``).

The row update itself is torch's own single-tensor AdamW (``torch.optim.adamw.adamw`` with ``foreach=False``) on the
gathered rows, so when every row is selected the result is bit-identical to ``torch.optim.AdamW(foreach=False)``.

Shape suffixes: K rows updated this step, D values per row (the table's width)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch.optim.adamw import adamw

from zen_analysis.wire.rows import row_mask, sparse_rows

__all__ = [
    "LazyRowAdamW",
    "densify_sparse_grads",
    "embedding_rows",
    "fused_adamw",
]


def _grad_rows(grad: torch.Tensor, rows_K: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(rows_K, g_KD, full): the rows to update (found from the gradient when ``rows_K`` is None) and their
    gradient. ``full``: the rows are all V rows and ``g_KD`` is the (V, D) gradient in the parameter's row order, so
    the step can run on the whole tensors in place with no gather or scatter."""
    V = grad.shape[0]
    if grad.layout == torch.sparse_coo and grad.sparse_dim() == 1:
        found_K, g_KD = sparse_rows(grad)  # the listed rows, as SparseAdam takes them (even an all-zero one)
        if rows_K is None or torch.equal(rows_K, found_K):
            return found_K, g_KD, found_K.numel() == V
        return rows_K, grad.index_select(0, rows_K).to_dense(), False
    if grad.layout != torch.strided:
        grad = grad.to_dense()
    if rows_K is None:
        rows_K = row_mask(grad).nonzero().squeeze(1)
    if rows_K.numel() == V:  # unique rows, as many as the table has: all of them
        return rows_K, grad, True
    return rows_K, grad.index_select(0, rows_K), False


class LazyRowAdamW(torch.optim.Optimizer):
    """AdamW with lazy row updates for 2-D (V, D) parameters (embedding tables), as ``torch.optim.SparseAdam`` and
    TF Addons' ``LazyAdam``: a row whose gradient is zero this step skips the step entirely; the other rows take an
    ordinary AdamW step (decoupled weight decay), computed by ``torch.optim.adamw.adamw`` itself.

    How it differs from ``torch.optim.AdamW``, for the rows not touched in a step:

    * their weights do not move: no Adam update from their stale moments, and **no weight decay**;
    * their moments ``exp_avg`` / ``exp_avg_sq`` stay as they were (AdamW would decay them by beta1 / beta2), so
      they are stale when the row is next touched;
    * the bias-correction counter ``step`` is one per parameter (as in SparseAdam and AdamW, not per row): it counts
      every ``step()`` call in which the parameter has a gradient, touched rows or not.

    When every row is touched in every step, parameters and state are bit-identical to
    ``torch.optim.AdamW(..., foreach=False)`` with the same hyperparameters.

    Gradients may be dense (rows found by one row-wise pass, :func:`~zen_analysis.wire.rows.row_mask`) or sparse COO
    from ``nn.Embedding(sparse=True)``
    (coalesced; its indices are the rows). State per parameter, as AdamW's: ``step`` (a scalar float32 tensor on
    the CPU; float64 when that is torch's default dtype), ``exp_avg`` and ``exp_avg_sq`` (dense, V x D).
    """

    def __init__(
        self,
        params: Iterable,
        lr: float | torch.Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
    ) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameters: {betas}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def add_param_group(self, param_group: dict) -> None:
        """As ``Optimizer.add_param_group``; raises ValueError (and adds nothing) if a parameter is not 2-D."""
        super().add_param_group(param_group)
        bad = [tuple(p.shape) for p in self.param_groups[-1]["params"] if p.dim() != 2]
        if bad:
            self.param_groups.pop()
            raise ValueError(f"LazyRowAdamW updates rows of 2-D (V, D) parameters; got parameter(s) of shape {bad}")

    def _state(self, p: torch.Tensor) -> dict:
        """The parameter's state, created zero on first use exactly as ``torch.optim.AdamW`` creates it."""
        state = self.state[p]
        if len(state) == 0:
            scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
            state["step"] = torch.tensor(0.0, dtype=scalar)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(
        self,
        closure: Callable[[], float] | None = None,
        *,
        rows: dict[torch.Tensor, torch.Tensor] | None = None,
    ) -> float | None:
        """One lazy AdamW step; returns the closure's loss (None without a closure).

        ``rows``: optional ``{param: int64 (K,) row indices}``, sorted and unique, for parameters whose touched
        rows the caller already knows (e.g. from a sparse sync); the listed rows are stepped even where their
        gradient is zero. Parameters not in it have their rows found from the gradient.
        Parameters whose ``.grad`` is None are skipped (their ``step`` does not advance).
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        rows = rows or {}
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self._state(p)
                given_K = rows.get(p)
                if given_K is not None:
                    given_K = torch.as_tensor(given_K).to(device=p.device, dtype=torch.long)
                    if given_K.dim() != 1:
                        raise ValueError(f"rows must be 1-D row indices, got shape {tuple(given_K.shape)}")
                rows_K, g_KD, full = _grad_rows(p.grad, given_K)
                if rows_K.numel() == 0:
                    state["step"] += 1  # the counter is per parameter: it advances even when no row moves
                    continue
                if full:
                    p_KD, m_KD, v_KD = p, state["exp_avg"], state["exp_avg_sq"]
                else:
                    p_KD = p.index_select(0, rows_K)
                    m_KD = state["exp_avg"].index_select(0, rows_K)
                    v_KD = state["exp_avg_sq"].index_select(0, rows_K)
                adamw(
                    [p_KD],
                    [g_KD],
                    [m_KD],
                    [v_KD],
                    [],
                    [state["step"]],
                    foreach=False,
                    capturable=False,
                    differentiable=False,
                    fused=False,
                    amsgrad=False,
                    beta1=beta1,
                    beta2=beta2,
                    lr=group["lr"],
                    weight_decay=group["weight_decay"],
                    eps=group["eps"],
                    maximize=False,
                )
                if not full:
                    p.index_copy_(0, rows_K, p_KD)
                    state["exp_avg"].index_copy_(0, rows_K, m_KD)
                    state["exp_avg_sq"].index_copy_(0, rows_K, v_KD)
        return loss


def embedding_rows(grad: torch.Tensor, union_rows: torch.Tensor | None = None) -> torch.Tensor:
    """The sorted rows of an embedding gradient that hold a non-zero: from ``union_rows`` (the rows a sync by rows
    says may be non-zero; every other row is zero) with a pass over those rows alone, else one row-wise pass over
    the table (a sparse gradient: its coalesced indices). The same rows either way, so a lazy update and the clip
    read the same numbers whatever the sync."""
    if grad.is_sparse:
        rows_K, values_KD = sparse_rows(grad)
        return rows_K[row_mask(values_KD)]
    if union_rows is None:
        return row_mask(grad).nonzero().squeeze(1)
    rows_K = torch.sort(union_rows.to(grad.device)).values
    return rows_K[row_mask(grad[rows_K])]


def fused_adamw(params: Iterable[torch.Tensor]) -> bool | None:
    """``fused=`` for the training loop's AdamW: ``True`` where torch has a fused kernel for every parameter (floating
    point, on CPU or CUDA), else ``None`` (torch's own choice).

    Why: on CPU torch's default is the single-tensor loop, which reads and writes each parameter and both moments in
    several passes; the fused kernel does one, and with a large embedding table under AdamW's dense step that is
    most of the optimizer's time (``scripts/embedding_grad_cost.py`` measures both). The numbers differ from the
    single-tensor loop's in the last bit of some elements (the fused kernel rounds its intermediate terms once)."""
    supported = ("cpu", "cuda")
    ps = list(params)
    return bool(ps) and all(p.is_floating_point() and p.device.type in supported for p in ps) or None


@torch.no_grad()
def densify_sparse_grads(
    params: Iterable[torch.Tensor],
    keep: torch.Tensor | None = None,
    buffers: dict[torch.Tensor, tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> int:
    """Make every sparse COO gradient among ``params`` dense (coalesced first: duplicate rows summed as the sparse
    path sums them), all but ``keep``'s (the lazy update's embedding, which steps the rows it holds); returns how
    many it made dense.

    Why: ``model.sparse_embedding`` with ``train.embedding_update=dense``: backward gives the embedding's rows with
    no (vocabulary x hidden) table to zero and fill, the sync sums those rows, and AdamW, which takes no sparse
    gradient, then steps the summed rows placed in a dense gradient, zero elsewhere: the gradient a dense embedding
    would have had, so the step is AdamW's own (equal up to the order duplicate rows were summed in backward).

    ``buffers`` (a dict the caller keeps across steps): each parameter's dense gradient is one table reused from
    step to step, where only last step's rows are zeroed and this step's copied in, instead of a new zeroed table
    a step (whose cost follows the vocabulary, not the batch). The same numbers: the
    rows of a coalesced gradient are distinct, and nothing writes the table but this (the clip scales it, zeros
    stay zero; ``zero_grad(set_to_none=True)`` drops the reference, not the buffer)."""
    made = 0
    for p in params:
        if p is keep or p.grad is None or not p.grad.is_sparse:
            continue
        grad = p.grad.coalesce()
        if buffers is None or grad.sparse_dim() != 1:
            p.grad = grad.to_dense()
        else:
            rows_K = grad.indices()[0]
            held = buffers.get(p)
            if held is None or held[0].shape != p.shape or held[0].dtype != grad.dtype:
                table = torch.zeros(p.shape, dtype=grad.dtype, device=grad.device)
            else:
                table, last_K = held
                table.index_fill_(0, last_K, 0)
            table.index_copy_(0, rows_K, grad.values())
            buffers[p] = (table, rows_K)
            p.grad = table
        made += 1
    return made
