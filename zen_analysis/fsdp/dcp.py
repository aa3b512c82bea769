"""Checkpoints of an FSDP2 model and its optimizer through ``torch.distributed.checkpoint`` (DCP), hashed tables in
the original row order.

    path = zen_analysis.fsdp.dcp.save(ckpt_dir, model, opt, step=k)      # every rank, collectively
    step, extra = zen_analysis.fsdp.dcp.load(newest(ckpt_dir), model, opt)

Each rank writes its own shards (``get_state_dict`` gives the sharded DTensors, ``dcp.save`` writes them), so no
rank holds the whole model beyond the hashed tables' reordering below. DCP can reshard on load to another world
size, and the files do not depend on it (the hashed order depends on the vocabulary and seed alone).

**Row order.** A table stored in Zen's hashed order (:class:`~zen_analysis.fsdp.hashed.HashedRows`) reaches the
files in its original order: the model's weight through the module's own state-dict hooks (``get_state_dict``
calls ``model.state_dict()``, so they run), and every optimizer tensor laid out like the table (Adam's
``exp_avg`` / ``exp_avg_sq``: dim 0 of the table's length) through :func:`~zen_analysis.fsdp.hashed.to_original`
here, since an optimizer's state dict has no such hooks; on load, :func:`~zen_analysis.fsdp.hashed.to_stored`
undoes it before ``set_state_dict``. A checkpoint is therefore the same whether the table was hashed or not: a
stock FSDP2 model (or a hashed one with another seed) reads it, and a user never sees the permutation.
Reordering a sharded tensor gathers it whole on each rank for that call (the memory of one replica of the table).

**Atomicity.** The folder follows the toolkit's one checkpoint protocol (:mod:`zen_analysis.atomic`, as
the training loop's checkpoints do): ``save`` builds ``<dir>/step-<k>.partial/`` (k in 8 digits; one a killed run
left is removed), every rank writes its shards there, and after a barrier rank 0 fsyncs them, writes ``meta.json``
(the step, the world size, the sha256 of every DCP file, and ``extra``) last and renames the folder to
``<dir>/step-<k>``: one ``rename`` of a directory, atomic on POSIX, the parent directory fsynced after it. A rank
killed at any point before it leaves only a ``.partial`` folder, which :func:`newest` ignores, so the previous
checkpoint stays the newest complete one. (DCP's own ``.metadata``, written last by its coordinator, is not enough:
a partial folder can hold it and no ``extra``.) :func:`newest` also skips, saying so, a checkpoint whose files no
longer match their checksums. The folder must be on a filesystem every rank sees, as DCP's file writer requires
anyway. Saving a step that exists already (a run resumed from an older checkpoint) removes the old folder just
before the rename; killed in between, the checkpoint before it is the newest. ``keep`` prunes all but the newest
``keep``. Checkpoints this module wrote before (``step-<k>/`` unpadded, marked by ``zen.json`` without checksums)
still load, and count in :func:`newest` and :func:`complete`.

**What is not saved.** Per-rank RNG states: resuming is exact without them when nothing a step draws depends on a
generator carried over from earlier steps: its batch a pure function of (step, rank), as in the test, and dropout
absent or reseeded from (step, rank). A loop that draws from a global generator must save its state itself (in
``extra``, or beside the checkpoint). Zen's comms need nothing either: the reduce-scatter keeps
no state between steps (byte counters aside), and the sparse all-gather compares its shard's bits with what it last
sent, so rows a load changed are sent (a fresh process has no replica yet: its first gather is dense). ``auto``'s
reduce-scatter (:class:`~zen_analysis.fsdp.auto.AutoReduceScatter`) is the exception: its call counter and decisions
say when it decides next; its ``state_dict()`` is JSON, so pass it in ``extra`` and give it back to
``load_state_dict`` after :func:`load` (the toolkit's loop carries it in each rank's sync state).
``extra`` is JSON, rank 0's: pass the same on every rank (a scheduler's ``state_dict()``, a data position).

Shape suffixes: R rows of the table (one stored position each).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from zen_analysis import atomic
from zen_analysis.fsdp.hashed import HashedRows, hashed_rows_of, to_original, to_stored

MARKER = atomic.CHECKPOINT_MARKER
"""Written last, inside the folder before its rename: the step, the world size, the files' checksums, ``extra``."""
_WRAPPERS = ("_orig_mod", "_checkpoint_wrapped_module")
"""Name segments that DCP drops from an FQN (``torch.compile``, activation checkpointing)."""


def step_dir(directory: str | os.PathLike, step: int) -> Path:
    """Where :func:`save` puts the checkpoint taken after ``step`` steps."""
    return atomic.checkpoint_dir(directory, step)


def hashed_tables(model: nn.Module) -> dict[str, HashedRows]:
    """The hashed tables of ``model`` by the FQN of their weight as ``get_state_dict`` names it."""
    out = {}
    for name, module in model.named_modules():
        hashed = hashed_rows_of(module)
        if hashed is not None:
            kept = [part for part in name.split(".") if part and part not in _WRAPPERS]
            out[".".join([*kept, "weight"])] = hashed
    return out


def _reorder_moments(optim_sd: dict, tables: dict[str, HashedRows], convert) -> dict:
    """``optim_sd`` with every state tensor of a hashed table laid out like the table (dim 0 of the table's
    length: Adam's moments; not its scalar ``step``) passed through ``convert``. A new dict: the optimizer's own
    tensors are left as they are."""
    state = dict(optim_sd.get("state", {}))
    for fqn, hashed in tables.items():
        if fqn not in state:
            continue  # no state yet (a parameter the optimizer does not hold, or a stateless optimizer)
        rows = hashed.order_R.numel()
        state[fqn] = {
            k: convert(v, hashed) if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == rows else v
            for k, v in state[fqn].items()
        }
    return {**optim_sd, "state": state}


def _checked_tables(model: nn.Module, model_sd: dict) -> dict[str, HashedRows]:
    tables = hashed_tables(model)
    missing = [fqn for fqn in tables if fqn not in model_sd]
    if missing:
        raise KeyError(f"hashed tables {missing} not among the state dict's keys: a wrapper renames them")
    return tables


def state_in_original_order(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``{"model": ..., "optim": ...}``: ``get_state_dict``'s sharded state, every hashed table's optimizer tensors
    in the original row order (the model's weight is already, by its hooks). What :func:`save` writes."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optim": _reorder_moments(optim_sd, _checked_tables(model, model_sd), to_original)}


def save(
    directory: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    step: int,
    extra: dict | None = None,
    keep: int | None = None,
) -> Path:
    """Write ``<directory>/step-<step>`` from every rank (a collective: all ranks call it) and return its path.
    ``step``: the steps done, i.e. the next step to run after :func:`load`. Built as ``step-<step>.partial`` and
    committed by rank 0 once every rank's shards are written (module docstring)."""
    rank = dist.get_rank()
    if rank == 0:
        atomic.begin_checkpoint(directory, step)  # a killed run's leftover removed
    dist.barrier()
    partial = atomic.partial_checkpoint_dir(directory, step)
    write_state(partial, model, optimizer)
    dist.barrier()  # every rank's shards are in place
    if rank == 0:
        atomic.commit_checkpoint(partial, step=step, world=dist.get_world_size(), extra=extra, keep=keep)
    dist.barrier()  # no rank returns (and may load, or die) before the rename
    return step_dir(directory, step)


def write_state(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """DCP's files of the model's and optimizer's sharded state in ``path`` (every rank its shards; a collective),
    hashed tables in the original row order: what :func:`save` writes and :func:`read_state` reads."""
    dcp.save(state_in_original_order(model, optimizer), checkpoint_id=path)


def read_state(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """:func:`write_state`'s files into ``model`` and ``optimizer`` (a collective); see :func:`load`."""
    template = state_in_original_order(model, optimizer)
    dcp.load(template, checkpoint_id=path)
    tables = _checked_tables(model, template["model"])
    set_state_dict(
        model,
        optimizer,
        model_state_dict=template["model"],
        optim_state_dict=_reorder_moments(template["optim"], tables, to_stored),
    )


def load(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, dict | None]:
    """Read the checkpoint at ``path`` (a folder :func:`save` returned, :func:`newest`'s) into ``model`` and
    ``optimizer`` on every rank (a collective); returns its ``(step, extra)``. The model may be hashed with any
    seed or not at all: the files are in the original row order. An optimizer with no state yet gets it first
    (``get_state_dict`` takes one step at learning rate 0 with zero gradients, which leaves the parameters as
    they are), so the state's layout is known to read into."""
    marker = atomic.read_checkpoint_marker(path)
    read_state(path, model, optimizer)
    return marker.step, marker.extra


def complete(directory: str | os.PathLike) -> list[Path]:
    """The complete checkpoints under ``directory``, oldest by step first (``.partial`` folders, and any folder
    without a readable marker, left out; files not hashed)."""
    return [p for _, p in atomic.complete_checkpoints(directory)]


def newest(directory: str | os.PathLike, log=print) -> Path | None:
    """The newest complete checkpoint under ``directory`` whose files match their checksums, or None when there is
    none; one skipped gets a line through ``log`` saying why. Any world size may read it (DCP reshards)."""
    found = atomic.newest_checkpoint(directory, log=log)
    return found[1] if found else None
