"""The GPU check's multi-rank step: as much of Zen's multi-rank path as one GPU allows.

NCCL refuses two ranks on one device, so on one GPU the ranks talk over gloo while their tensors live on the GPU.
:func:`multirank` forks ``ranks`` gloo ranks (``zen_analysis.ranks.procs.fork_launch``) and, on ``device``:

1. tries each collective Zen's schemes and Zen-FSDP2 call, recording whether gloo runs it on that device;
2. runs every scheme on integer-valued tensors and compares its sum, bit for bit, with gloo's dense all-reduce;
3. calls Zen-FSDP2's sparse reduce-scatter directly and checks each rank's shard of the summed rows;
4. on CUDA, starts two NCCL ranks on the one GPU, to record what NCCL says.

A step gloo does not support on the device is recorded as ``unsupported`` with gloo's message: that is the
hardware's or torch's limit, not a wrong answer. A wrong sum, or any other error, is ``False``.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from zen_analysis.ranks.procs import RankFailedError, fork_launch

UNSUPPORTED = ("unsupported", "not supported", "Unsupported", "only supports", "is not implemented", "NotImplemented")
"""Fragments of the messages gloo raises for a collective it does not run on a device."""


def _outcome(fn) -> tuple[bool | str, str]:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - recorded, with its message, as the probe's result
        message = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        return ("unsupported" if any(u in str(e) for u in UNSUPPORTED) else False), message


def _collectives(rank: int, world: int, dev: torch.device) -> list[tuple[str, bool | str, str]]:
    from zen_analysis.wire.torch_features import all_gather_single

    def all_reduce():
        x = torch.full((8,), rank + 1.0, device=dev)
        dist.all_reduce(x)
        return bool((x == world * (world + 1) / 2).all()), ""

    def gather_single():
        out = torch.empty(world * 4, device=dev)
        all_gather_single(out, torch.full((4,), float(rank), device=dev))
        return torch.equal(out.cpu(), torch.arange(world).float().repeat_interleave(4)), ""

    def all_to_all_uneven():  # rank r sends r + 1 + j elements to rank j: Zen's packed push, uneven by nature
        send = [rank + 1 + j for j in range(world)]
        recv = [r + 1 + rank for r in range(world)]
        out = torch.empty(sum(recv), device=dev)
        dist.all_to_all_single(out, torch.full((sum(send),), float(rank), device=dev), recv, send)
        want = torch.cat([torch.full((n,), float(r)) for r, n in enumerate(recv)])
        return torch.equal(out.cpu(), want), ""

    def reduce_scatter():
        out = torch.empty(4, device=dev)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor  # 2.13 or 2.11 name
        scatter(out, torch.ones(world * 4, device=dev))
        return bool((out == world).all()), ""

    def broadcast():
        x = torch.full((4,), float(rank), device=dev)
        dist.broadcast(x, src=0)
        return bool((x == 0).all()), ""

    probes = {
        "all_reduce": all_reduce,
        "all_gather_single": gather_single,
        "all_to_all_single (uneven)": all_to_all_uneven,
        "reduce_scatter_tensor": reduce_scatter,
        "broadcast": broadcast,
    }
    return [(name, *_outcome(fn)) for name, fn in probes.items()]


def _schemes(rank: int, world: int, dev: torch.device) -> list[tuple[str, bool | str, str]]:
    from zen_analysis.comm import SCHEMES, build_scheme

    gen = torch.Generator().manual_seed(rank)
    x = torch.zeros(1 << 14)
    idx = torch.randperm(x.numel(), generator=gen)[: x.numel() // 20]
    x[idx] = torch.randint(1, 4, (idx.numel(),), generator=gen).float()
    x = x.to(dev)
    ref = x.clone()
    dist.all_reduce(ref)
    out = []
    for name in SCHEMES:

        def run(name=name):
            y = build_scheme(name).run(x.clone())
            return (y.device == dev and torch.equal(y, ref)), f"sum on {y.device.type}"

        out.append((name, *_outcome(run)))
    return out


def _fsdp_reduce_scatter(rank: int, world: int, dev: torch.device) -> list[tuple[str, bool | str, str]]:
    from torch import nn

    from zen_analysis.fsdp.reduce_scatter import SparseReduceScatter
    from zen_analysis.fsdp.units import EmbeddingUnit

    def run():
        emb = nn.Embedding(1001, 8).to(dev)
        rs = SparseReduceScatter(EmbeddingUnit(unit=emb, embedding=emb, name="t"), row_source="scan")
        per = -(-1001 // world)
        table = torch.zeros(world * per, 8, device=dev)
        rows = torch.tensor([3, 500, 1000, 17 * (rank + 1)], device=dev)
        table[rows] = torch.arange(32, dtype=torch.float32, device=dev).view(4, 8) + rank
        out = torch.empty(per * 8, device=dev)
        want = table.clone()
        dist.all_reduce(want)  # the dense sum the sparse reduce-scatter must give, shard by shard
        rs(out, table.view(-1), dist.group.WORLD, dist.ReduceOp.SUM)
        return torch.equal(out.view(per, 8), want[rank * per : (rank + 1) * per]), "shard of the summed rows"

    return [("SparseReduceScatter", *_outcome(run))]


def _body(rank: int, world: int, device: str) -> list[tuple[str, str, bool | str, str]]:
    torch.set_num_threads(1)
    dev = torch.device(device, 0) if device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    rows = [("collective", *r) for r in _collectives(rank, world, dev)]
    rows += [("scheme", *r) for r in _schemes(rank, world, dev)]
    rows += [("fsdp", *r) for r in _fsdp_reduce_scatter(rank, world, dev)]
    return rows


def _nccl_two_ranks(rank: int, world: int) -> tuple[bool | str, str]:
    torch.cuda.set_device(0)
    group = dist.new_group(backend="nccl")

    def run():
        x = torch.ones(4, device="cuda")
        dist.all_reduce(x, group=group)
        torch.cuda.synchronize()
        return bool((x == world).all()), "NCCL ran two ranks on one GPU"

    return _outcome(run)


def multirank(device: str, ranks: int = 4) -> list[dict]:
    """One row per (kind, name): ``ok`` True, False or ``"unsupported"`` (every rank agreeing, else the worst) and
    the first rank's detail. Kinds: ``collective``, ``scheme``, ``fsdp``, ``nccl``."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    per_rank = fork_launch(_body, ranks, device, timeout_s=60)
    rows = []
    for i, (kind, name, _, detail) in enumerate(per_rank[0]):
        oks = [r[i][2] for r in per_rank]
        ok = False if False in oks else ("unsupported" if "unsupported" in oks else True)
        rows.append({"kind": kind, "name": name, "world": ranks, "device": device, "ok": ok, "detail": detail})
    if device == "cuda":  # NCCL's answer, recorded: it ran (True) or refused (its message)
        try:
            ok, detail = fork_launch(_nccl_two_ranks, 2, timeout_s=30)[0]
        except RankFailedError as e:
            ok, detail = False, str(e).strip().splitlines()[-1][:200]
        row = {"kind": "nccl", "name": "two NCCL ranks on one GPU", "world": 2, "device": device}
        rows.append({**row, "ok": ok or "refused", "detail": detail})
    return rows
