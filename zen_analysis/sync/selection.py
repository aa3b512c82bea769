"""Which parameters natural sparsity sums with a sparse scheme by default (:func:`select_sparse`), and why the
others go the dense way: a tied weight's gradient is dense (the output layer touches every row), and so is a
position or token-type table's (every row the sequence reaches is touched in every batch). Used by
:func:`zen_analysis.sync.ddp.register` and so by both adapters."""

from __future__ import annotations

import warnings

from torch import nn

_POSITION_NAMES = ("wpe", "pos", "position")
"""How a model without ``get_input_embeddings`` names a position table: a module whose own name is ``wpe`` or starts
with ``pos`` / contains ``position`` (``pos_emb``, ``position_embeddings``, ``embed_positions``)."""


def _is_position_name(name: str) -> bool:
    own = name.rsplit(".", 1)[-1].lower()
    return own == "wpe" or own.startswith("pos") or "position" in own


def _input_embedding(module: nn.Module) -> nn.Embedding | None:
    """The model's token table as it names it itself (``get_input_embeddings()``: every transformers model, and the
    toolkit's LSTM and DeepFM), or None."""
    get = getattr(module, "get_input_embeddings", None)
    if get is None:
        return None
    try:
        emb = get()
    except (NotImplementedError, AttributeError):  # transformers' base class, for a model that does not say
        return None
    return emb if isinstance(emb, nn.Embedding) else None


def tied_names(module: nn.Module) -> dict[int, list[str]]:
    """Every parameter (by identity) used under more than one name: a weight tied to another layer (GPT-2's
    ``wte`` and ``lm_head``), with its names."""
    owners: dict[int, list[str]] = {}
    for name, m in module.named_modules():
        for pname, p in m.named_parameters(recurse=False):
            owners.setdefault(id(p), []).append(f"{name}.{pname}" if name else pname)
    return {k: v for k, v in owners.items() if len(v) > 1}


def select_sparse(module: nn.Module) -> tuple[tuple[nn.Parameter, ...], dict[str, str]]:
    """The default selection of natural sparsity, and what it left to the dense all-reduce with the reason.

    Zen pays where a gradient's rows are few of the table's: a token table. So it takes every ``nn.Embedding``
    whose weight trains and is used by it alone, except:

    * a tied weight (also an output layer's): its gradient is dense. Left out, reason ``tied to <names>``.
    * a table whose rows are positions (or token types): every row the sequence reaches is touched in every batch,
      so its gradient is dense by nature, and Zen's index per row is pure overhead. A model that names its token
      table (``get_input_embeddings()``: every transformers model) has that one table summed sparsely and its
      other tables (GPT-2's ``wpe``, OPT's ``embed_positions``) left dense, reason ``not the input embedding (a
      position or type table)``; a model that does not has every table summed except those named as positions
      (:data:`_POSITION_NAMES`), reason ``a position table (by its name)``.

    Returns the chosen weights and ``{parameter name: reason}`` of the embeddings left out."""
    tied = tied_names(module)
    token = _input_embedding(module)
    chosen, left = [], {}
    for name, m in module.named_modules():
        if not isinstance(m, nn.Embedding) or not m.weight.requires_grad:
            continue
        w, pname = m.weight, f"{name}.weight" if name else "weight"
        if any(w is c for c in chosen) or pname in left:
            continue
        if id(w) in tied:
            left[pname] = f"tied to {[o for o in tied[id(w)] if o != pname]}: its gradient is dense"
        elif token is not None and m is not token:
            left[pname] = "not the input embedding (a position or type table): its gradient is dense by nature"
        elif token is None and _is_position_name(name):
            left[pname] = "a position table (by its name): its gradient is dense by nature"
        else:
            chosen.append(w)
    return tuple(chosen), left


def sparse_parameters(module: nn.Module) -> tuple[nn.Parameter, ...]:
    """The parameters natural sparsity applies to by default (:func:`select_sparse`: the untied token tables); a
    tied embedding is skipped with a warning naming it."""
    chosen, left = select_sparse(module)
    warn_tied(left)
    return chosen


def warn_tied(left: dict[str, str]) -> None:
    for name, why in left.items():
        if why.startswith("tied"):
            warnings.warn(f"{name} is {why}, so it goes the dense way (stock all-reduce), not Zen", stacklevel=4)
