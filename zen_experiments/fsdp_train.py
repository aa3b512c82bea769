"""FSDP2 training of a large-vocabulary Llama, stock FSDP2 against Zen-FSDP2, every rank behind a shaped link of the
network lab: what ``zen-analysis bench fsdp`` runs.

The workload is a Llama whose vocabulary is large and the rest small (the embedding's share of the model is
Gemma's): a ``vocab`` x ``hidden`` input table, an untied head of the same size, ``layers`` small blocks. Its
tokens are the word stream of a recipe's data (``lstm-words``: a word vocabulary ordered by frequency, ids below
the table's size), so a batch touches a few hundred rows of the table, as an English batch touches a few thousand
of Gemma's 256k. Each variant (:data:`VARIANTS`) wraps the model the same way (the table a unit of its own, each
block one, the root), trains the same steps from the same initial weights with AdamW (no decay on the table, as
LLM recipes commonly exempt embeddings; 0.1 on the rest) and reports, per step: the wall time and where it went
(compute, all-gather, reduce-scatter, optimizer, rest; the collectives timed by :mod:`zen_analysis.fsdp.timing`),
the bytes each rank wrote to its sockets (``/proc/self/io``), the loss (mean over ranks), and the rows each rank's
shard of the table received.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from zen_analysis.config.model import ModelConfig
from zen_analysis.fsdp import shard
from zen_analysis.fsdp.timing import time_comms
from zen_analysis.workload.batches import PreparedData, TokenData
from zen_analysis.workload.models import build_model, lm_loss
from zen_experiments.exchange_replay import written_bytes


@dataclass(frozen=True)
class FSDPVariant:
    name: str
    zen: bool
    reduce_dtype: str = "fp32"
    """``fp32`` or ``bf16`` (``MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)``)."""
    hashed: bool = False
    """The table stored in the hashed row order (:mod:`zen_analysis.fsdp.hashed`)."""
    all_gather: bool = False
    """The sparse all-gather of the rows that changed (:mod:`zen_analysis.fsdp.all_gather`)."""


VARIANTS = {
    v.name: v
    for v in (
        FSDPVariant("stock", zen=False),
        FSDPVariant("stock-bf16", zen=False, reduce_dtype="bf16"),
        FSDPVariant("zen", zen=True, hashed=True, all_gather=True),
        FSDPVariant("zen-contiguous", zen=True, hashed=False, all_gather=True),
        FSDPVariant("zen-dense-gather", zen=True, hashed=True, all_gather=False),
        FSDPVariant("zen-bf16", zen=True, reduce_dtype="bf16", hashed=True, all_gather=True),
    )
}
"""The variants ``bench fsdp`` trains. ``zen-contiguous`` keeps the table in the vocabulary's order, so each shard
owns a contiguous slice of rows and Zen's reduce-scatter sends every touched row to its slice's owner: the contiguous
row ownership users run (modded-nanogpt's sparse bigram gradient comms, a sparse reduce-scatter into a sharded
optimizer), in FSDP2, and the DDP drop-in's ``scheme="sparse_ps"`` by rows; its all-gather moves only the rows that
changed, where modded-nanogpt gathers its shards densely. ``zen`` is the same with the table stored in Zen's hashed
order (:mod:`zen_analysis.fsdp.hashed`)."""


@dataclass(frozen=True)
class FSDPSettings:
    vocab: int = 262_144
    hidden: int = 64
    layers: int = 2
    heads: int = 2
    seq_len: int = 64
    batch: int = 2
    """Sequences per rank per step."""
    steps: int = 8
    warmup: int = 2
    """Steps not timed (the first gathers are dense: the sparse all-gather keeps no replica yet)."""
    lr: float = 1e-3
    seed: int = 0


def _model(settings: FSDPSettings) -> torch.nn.Module:
    torch.manual_seed(settings.seed)
    cfg = ModelConfig(arch="llama", hidden_size=settings.hidden, num_layers=settings.layers, num_heads=settings.heads)
    return build_model(cfg, vocab_size=settings.vocab, max_seq_len=settings.seq_len)


def _wrap(model, variant: FSDPVariant, mesh):
    """The same units for every variant; Zen's comms on the table's for Zen's. Returns (units by name, Zen)."""
    mp = MixedPrecisionPolicy(reduce_dtype=torch.bfloat16 if variant.reduce_dtype == "bf16" else None)
    inner = model.model
    if variant.zen:
        wrap = {"hashed_rows": variant.hashed, "all_gather": variant.all_gather, "mp_policy": mp}
        zen = shard(model, mesh=mesh, blocks=inner.layers, **wrap)
    else:
        zen = None
        fully_shard(inner.embed_tokens, mesh=mesh, mp_policy=mp)
        for block in inner.layers:
            fully_shard(block, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
    units = {"embed": inner.embed_tokens, **{f"block{i}": b for i, b in enumerate(inner.layers)}, "root": model}
    return units, zen


def _optimizer(model, lr: float) -> torch.optim.Optimizer:
    table = model.get_input_embeddings().weight
    rest = [p for p in model.parameters() if p is not table]
    return torch.optim.AdamW([{"params": [table], "weight_decay": 0.0}, {"params": rest, "weight_decay": 0.1}], lr=lr)


def _train_variant(rank: int, world: int, variant: FSDPVariant, settings: FSDPSettings, data: TokenData) -> list:
    mesh = init_device_mesh("cpu", (world,))
    model = _model(settings)
    units, zen = _wrap(model, variant, mesh)
    clock = time_comms(units)
    opt = _optimizer(model, settings.lr)
    steps = []
    for step in range(settings.steps):
        x, y = data.batch("train", step=step, worker=rank, batch_size=settings.batch)
        dist.barrier()
        t0, w0 = time.perf_counter(), written_bytes()
        loss = lm_loss(model, x, y)
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t2, w1 = time.perf_counter(), written_bytes()
        comm = clock.take()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        received = torch.zeros(world, dtype=torch.int64)
        if zen is not None:
            received[rank] = next(iter(zen.reduce_scatters.values())).last.get("received", 0)
        dist.all_reduce(received)
        by_kind = {k: sum(s for (kind, _), s in comm.items() if kind == k) for k in ("all_gather", "reduce_scatter")}
        steps.append(
            {
                "step": step,
                "step_s": t2 - t0,
                "forward_backward_s": t1 - t0,
                "optimizer_s": t2 - t1,
                "all_gather_s": by_kind["all_gather"],
                "reduce_scatter_s": by_kind["reduce_scatter"],
                "embed_all_gather_s": comm.get(("all_gather", "embed"), 0.0),
                "embed_reduce_scatter_s": comm.get(("reduce_scatter", "embed"), 0.0),
                "written_bytes": w1 - w0,
                "loss": float(mean_loss) / world,
                "received_rows": received.tolist(),
            }
        )
    del model, opt, units, zen
    gc.collect()
    dist.barrier()
    return steps


def fsdp_rank(rank: int, world: int, variants: list[FSDPVariant], settings: FSDPSettings, prepared: PreparedData):
    """One lab rank: every variant in turn (the same processes, the same links), its per-step records."""
    data = TokenData(prepared, seq_len=settings.seq_len, seed=settings.seed)
    if data.vocab_size > settings.vocab:
        raise ValueError(f"the data's vocabulary ({data.vocab_size}) is larger than the table ({settings.vocab} rows)")
    return {v.name: _train_variant(rank, world, v, settings, data) for v in variants}
