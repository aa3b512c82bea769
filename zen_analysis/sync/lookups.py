"""The rows a step's forward passes looked up: where an embedding's dense gradient can be non-zero, known for free.

An untied ``nn.Embedding``'s gradient is zero outside the ids its forward passes looked up since the last sum, so a
sum by rows can take those ids as its rows instead of a row-wise pass over the whole table (17M elements for the
lstm-words table: tens of milliseconds a step on one core). :class:`LookedUp` keeps them with a forward pre-hook:
every training forward's ids (grad enabled: not evaluation's), accumulated until :meth:`LookedUp.take`, so micro-
batches under ``no_sync`` and recomputed forwards (activation checkpointing) are all counted; a superset is harmless
(a row whose gradient is zero is summed as zeros).

What it cannot see: a gradient the weight gets from elsewhere than the embedding's forward (a regularizer over the
whole table, the weight used by another module). The toolkit's loop refuses those by construction (the input
embedding, untied); a user's DDP model is checked once: :meth:`LookedUp.check` compares the first step's ids with a
row-wise pass and, on a row outside them, says so and turns the recorder off (the hook then scans every step).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from zen_analysis.wire.rows import nonzero_rows


class LookedUp:
    """The ids ``embedding``'s training forwards looked up since the last :meth:`take` (a forward pre-hook on it;
    :meth:`remove` takes it off). ``None`` from :meth:`take` means "unknown, scan": a forward whose ids were not
    a tensor, or the recorder turned off."""

    def __init__(self, embedding: nn.Module, *, name: str = "embedding") -> None:
        self.name = name
        self.enabled = True
        self.checked = False
        """Whether :meth:`check` has compared the ids with a row-wise pass yet."""
        self.last_union: torch.Tensor | None = None
        """The rows of the last sum's union (its caller keeps it): a gradient not zeroed between steps still holds
        them."""
        self._ids: list[torch.Tensor | None] = []
        self._handle = embedding.register_forward_pre_hook(self._record, with_kwargs=True)

    def _record(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if module.training and torch.is_grad_enabled():
            ids = args[0] if args else kwargs.get("input")
            self._ids.append(ids.detach().reshape(-1) if isinstance(ids, torch.Tensor) else None)

    def take(self, device: torch.device) -> torch.Tensor | None:
        """The looked-up rows (sorted, distinct, int64 on ``device``), or None for a row-wise pass; clears the
        record."""
        ids, self._ids = self._ids, []
        if not self.enabled or any(i is None for i in ids):
            return None
        if not ids:
            return torch.zeros(0, dtype=torch.long, device=device)
        return torch.unique(torch.cat(ids)).to(device=device, dtype=torch.long)

    def check(self, rows_K: torch.Tensor, table_RD: torch.Tensor) -> bool:
        """Once: whether every non-zero row of ``table_RD`` (this rank's gradient) is among ``rows_K``; if one is
        not, warn, turn the recorder off and return False (the caller then scans, now and from now on)."""
        self.checked = True
        found = nonzero_rows(table_RD)
        outside = found[~torch.isin(found, rows_K.to(found.device))]
        if outside.numel() == 0:
            return True
        self.enabled = False
        warnings.warn(
            f"{self.name}: its gradient has {outside.numel()} non-zero rows its forward did not look up (e.g. row "
            f"{int(outside[0])}): the weight gets a gradient from elsewhere too (a regularizer, another module), so "
            "its rows are found by a row-wise pass every step (row_source='scan' says so without this check)",
            stacklevel=3,
        )
        return False

    def remove(self) -> None:
        self._handle.remove()
