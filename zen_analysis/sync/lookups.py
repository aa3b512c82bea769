"""The rows a step's forward passes looked up: where an embedding's dense gradient can be non-zero, known for free.

An untied ``nn.Embedding``'s gradient is zero outside the ids its forward passes looked up since the last sum, so a
sum by rows can take those ids as its rows instead of a row-wise pass over the whole table (17M elements for the
lstm-words table: tens of milliseconds a step on one core). :class:`LookedUp` keeps them with a forward pre-hook:
every forward's ids while grad is enabled (in ``train()`` or ``eval()`` mode alike: a recipe that trains with
dropout off still trains the table; ``torch.no_grad()`` evaluation records nothing), accumulated until
:meth:`LookedUp.take`, so micro-batches under ``no_sync`` and recomputed forwards (activation checkpointing) are all
counted; a superset is harmless (a row whose gradient is zero is summed as zeros).

What the ids assume: the table's gradient comes from its lookups alone. A gradient from elsewhere (a regularizer
over the whole table, the weight used by another module) can be non-zero anywhere, so every backward is checked, at
the cost of a few Python calls: the lookup's backward node hands its gradient on, and the weight's own gradient hook
then sees the sum of every contribution; when the table was looked up once in that backward, the two are the same
tensor exactly when nothing else contributed (the lookup's gradient is held in between, so it cannot be summed into
in place nor its memory reused). A backward with anything else in it, or with no lookup or several lookups of the
table (which the check cannot tell apart), makes :meth:`LookedUp.take` answer None: that step's rows are found by a
row-wise pass, so its sum is the dense one, and a warning says so once. :meth:`LookedUp.check` also compares the
first step's ids with a row-wise pass.

Shape suffixes: K rows the forwards looked up, R rows of the table, D values per row (the table's width)."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from zen_analysis.wire.rows import nonzero_rows


class LookedUp:
    """The ids ``embedding``'s forwards looked up with grad enabled since the last :meth:`take` (a forward pre-hook
    and a forward hook on it; :meth:`remove` takes them off). ``None`` from :meth:`take` means "unknown, scan": a
    forward whose ids were not a tensor, a gradient that reached the weight from elsewhere than its lookups (module
    docstring), or the recorder turned off."""

    def __init__(self, embedding: nn.Module, *, name: str = "embedding") -> None:
        self.name = name
        self.enabled = True
        self.checked = False
        """Whether :meth:`check` has compared the ids with a row-wise pass yet."""
        self.last_union: torch.Tensor | None = None
        """The rows of the last sum's union (its caller keeps it): a gradient not zeroed between steps still holds
        them."""
        self.outside_steps = 0
        """Sums whose gradient came from elsewhere than the lookups (or could not be told apart): found by a
        row-wise pass."""
        self._ids: list[torch.Tensor | None] = []
        self._weight: torch.Tensor | None = None
        """The weight the current forward uses (FSDP2 swaps in its unsharded parameter before this pre-hook)."""
        self._lookups: list[torch.Tensor] = []
        """This backward's gradient from its lookup, held until the weight's hook sees the sum."""
        self._seen = 0
        """Lookup gradients this backward handed on so far."""
        self._only_lookups = True
        """Whether every backward since the last :meth:`take` had its gradient from one lookup alone."""
        self._why = ""
        self._warned = False
        self._watched: dict[int, tuple] = {}
        """The weights (by id) whose gradient hook is on: (tensor, handle)."""
        self._handles = [
            embedding.register_forward_pre_hook(self._record, with_kwargs=True),
            embedding.register_forward_hook(self._watch),
        ]

    def _record(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self._weight = None
        weight = getattr(module, "weight", None)
        if torch.is_grad_enabled() and isinstance(weight, torch.Tensor) and weight.requires_grad:
            ids = args[0] if args else kwargs.get("input")
            self._ids.append(ids.detach().reshape(-1) if isinstance(ids, torch.Tensor) else None)
            self._weight = weight

    def _watch(self, module: nn.Module, args: tuple, output) -> None:
        """After a recorded forward: a hook on the lookup's backward node (the node whose edge reaches the weight's
        gradient accumulator) and, once per weight tensor, a hook on the weight's summed gradient."""
        weight, self._weight = self._weight, None
        if weight is None or not isinstance(output, torch.Tensor) or output.grad_fn is None:
            return
        found = _lookup_node(output.grad_fn, weight)
        if found is None:
            self._doubt("its forward's output does not lead to the weight by a node this check recognises")
            return
        node, edge = found
        node.register_hook(lambda grads_in, grads_out: self._lookup_grad(grads_in[edge]))
        if id(weight) not in self._watched:
            self._watched[id(weight)] = (weight, weight.register_hook(self._summed))

    def _lookup_grad(self, grad: torch.Tensor | None) -> None:
        if grad is None:
            return
        self._seen += 1
        # a second lookup settles it (no check): its gradients are let go, so autograd may sum them in place
        self._lookups = [grad] if self._seen == 1 else []

    def _summed(self, grad: torch.Tensor) -> None:
        """The weight's gradient hook: ``grad`` is every contribution of this backward summed."""
        lookups, seen, self._lookups, self._seen = self._lookups, self._seen, [], 0
        if seen != 1:
            self._doubt(f"{seen} lookups of the table in one backward, which the check cannot tell apart")
        elif lookups[0] is not grad and (
            lookups[0].data_ptr() != grad.data_ptr() or lookups[0]._version != grad._version
        ):
            self._doubt(
                "its gradient got a contribution from elsewhere than its lookups (a regularizer, another module)"
            )

    def _doubt(self, why: str) -> None:
        self._only_lookups = False
        self._why = self._why or why

    def take(self, device: torch.device) -> torch.Tensor | None:
        """The looked-up rows (sorted, distinct, int64 on ``device``), or None for a row-wise pass; clears the
        record."""
        ids, self._ids = self._ids, []
        only, why, self._only_lookups, self._why = self._only_lookups, self._why, True, ""
        self._lookups, self._seen = [], 0
        if not self.enabled or any(i is None for i in ids):
            return None
        if not only:
            self.outside_steps += 1
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"{self.name}: {why}, so this step's rows are found by a row-wise pass (the sum is the dense "
                    "one); every such step is found and summed so (row_source='scan' does it every step without "
                    "the check)",
                    stacklevel=3,
                )
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
        for handle in self._handles:
            handle.remove()
        for _, handle in self._watched.values():
            handle.remove()
        self._watched.clear()


def _lookup_node(root, weight: torch.Tensor, limit: int = 16):
    """(node, edge index) of the embedding lookup's backward node within ``limit`` nodes of ``root`` (the first with
    an edge to ``weight``'s gradient accumulator), or None."""
    seen, queue = set(), [root]
    while queue and len(seen) < limit:
        node = queue.pop(0)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for i, (child, _) in enumerate(node.next_functions):
            if child is not None and getattr(child, "variable", None) is weight:
                # the lookup's own node, or none: another node with an edge to the weight is another use of it
                return (node, i) if type(node).__name__.startswith("EmbeddingBackward") else None
        queue.extend(child for child, _ in node.next_functions)
    return None
