"""Zen's pull as FSDP2's all-gather (:class:`~zen_analysis.fsdp.all_gather.ChangedRowsAllGather`): every gathered
table (forward and backward, fp32 and bf16 param dtypes) and the parameters after 5 steps equal stock FSDP2's bit for
bit, with stock or Zen's reduce-scatter, under plain SGD, Adam and AdamW with weight decay; the sparse path sends
fewer bytes than the dense gather where rows stay unchanged, AdamW's decay falls back to the dense gather, and the
comparison is by bits (-0.0 against 0.0 and NaN payloads count as changes)."""

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather

from zen_analysis.fsdp import EmbeddingUnit, embedding_units, install
from zen_analysis.fsdp.all_gather import ChangedRowsAllGather
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.wire.torch_features import all_gather_single

VOCAB, DIM, STEPS = 1001, 8, 5  # 1001 rows: the last shard is padded on 2 and 4 ranks

OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.5),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "adamw_decay": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
}
CASES = [  # (optimizer, Zen's reduce-scatter, param dtype)
    ("sgd", False, None),
    ("sgd", True, None),
    ("adam", False, None),
    ("adam", True, None),
    ("adamw_decay", False, None),
    ("adamw_decay", True, None),
    ("sgd", True, torch.bfloat16),
    ("adamw_decay", False, torch.bfloat16),
]


class _LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(torch.tanh(self.embed(x)))
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB).float(), x.roll(1, 1).reshape(-1))


class _Recorder(AllGather):
    """The installed all-gather, with a copy of every buffer it gathered and what the comm said it did."""

    def __init__(self, inner: AllGather) -> None:
        self.inner, self.outputs, self.lasts = inner, [], []

    def allocate(self, size, *, dtype, device):
        return self.inner.allocate(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        work = self.inner(output_tensor, input_tensor, group, async_op)
        if work is not None:
            work.wait()
        self.outputs.append(output_tensor.clone())
        self.lasts.append(dict(getattr(self.inner, "last", {})))
        return None


def _train(mesh, rank, opt_name, zen_rs, param_dtype, zen_ag):
    """(every gathered buffer, the weight each forward used, the parameters after STEPS steps, the comm's record)."""
    torch.manual_seed(0)
    model = _LM()
    mp = MixedPrecisionPolicy(param_dtype=param_dtype)
    fully_shard(model.embed, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    if zen_rs:
        install(model)
    comm = ChangedRowsAllGather(embedding_units(model)[0]) if zen_ag else DefaultAllGather()
    rec = _Recorder(comm)
    model.embed.set_custom_all_gather(rec)
    used = []
    model.embed.register_forward_pre_hook(lambda m, args: used.append(m.weight.detach().clone()))
    opt = OPTIMIZERS[opt_name](model.parameters())
    for step in range(STEPS):
        x = torch.randint(0, VOCAB, (4, 9), generator=torch.Generator().manual_seed(100 * step + rank))
        model(x).backward()
        opt.step()
        opt.zero_grad()
    params = [p.to_local().detach().clone() for p in model.parameters()]
    return rec.outputs, used, params, rec.lasts, comm


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _edges(rank, world):
    """A shard whose rows turn from 0.0 to -0.0 and from one NaN to another, gathered by the comm and densely; and
    the same with ``max_replica_bytes=0`` (always dense, no replica). Returns, per call: (equal to the dense
    gather, rows changed here, dense or not), then the capped comm's (equal, memory)."""
    per = -(-VOCAB // world)
    unit = EmbeddingUnit(unit=None, embedding=nn.Embedding(VOCAB, DIM), name="edges")
    comms = {"replica": ChangedRowsAllGather(unit), "capped": ChangedRowsAllGather(unit, max_replica_bytes=0)}
    shard = torch.randn(per, DIM, generator=torch.Generator().manual_seed(rank))
    shard[0] = 0.0
    shard[1].view(torch.int32)[:] = 0x7FC00000  # a quiet NaN
    out = {k: [] for k in comms}
    for step in range(3):
        if step == 1:
            shard[0] = -0.0
            shard[1].view(torch.int32)[:] = 0x7FC00001  # another NaN: a float == sees neither change
        dense = torch.empty(world * per * DIM)
        all_gather_single(dense, shard.view(-1))
        for name, comm in comms.items():
            output = torch.empty(world * per * DIM)
            shard_in = output.narrow(0, rank * per * DIM, per * DIM)  # in place, as FSDP2 passes it
            shard_in.copy_(shard.view(-1))
            comm(output, shard_in, dist.group.WORLD)
            out[name].append((_bits_equal(output, dense), comm.last["changed"], comm.last["dense"]))
    return out, comms["capped"].memory_bytes, comms["replica"].memory_bytes


def _ranks(rank, world):
    mesh = init_device_mesh("cpu", (world,))
    results = []
    for opt_name, zen_rs, param_dtype in CASES:
        stock = _train(mesh, rank, opt_name, zen_rs, param_dtype, zen_ag=False)
        ours = _train(mesh, rank, opt_name, zen_rs, param_dtype, zen_ag=True)
        comm = ours[4]
        results.append(
            {
                "gathers": [_bits_equal(a, b) for a, b in zip(ours[0], stock[0])] + [len(ours[0]) == len(stock[0])],
                "forward": [_bits_equal(a, b) for a, b in zip(ours[1], stock[1])],
                "params": [_bits_equal(a, b) for a, b in zip(ours[2], stock[2])],
                "lasts": ours[3],
                "sent": sum(last["sent"] for last in ours[3]),
                "dense_call": ours[0][0].numel() // world * ours[0][0].element_size() * (world - 1),
                "memory": comm.memory_bytes,
            }
        )
    return results, _edges(rank, world)


@pytest.mark.parametrize("world", [2, 4])
def test_changed_rows_all_gather_gives_stock_fsdp2_bits(world):
    per_rank = fork_launch(_ranks, world, timeout_s=120)
    rows = world * -(-VOCAB // world)
    for rank, (results, (edges, capped_memory, memory)) in enumerate(per_rank):
        for (opt_name, zen_rs, param_dtype), r in zip(CASES, results):
            what = f"rank {rank} {opt_name} zen_rs={zen_rs} param_dtype={param_dtype}"
            assert all(r["gathers"]), f"{what}: a gathered table differs from stock FSDP2's: {r['gathers']}"
            assert all(r["forward"]) and len(r["forward"]) == STEPS, f"{what}: a forward's weight differs"
            assert all(r["params"]), f"{what}: parameters after {STEPS} steps differ"
            lasts = r["lasts"]
            assert len(lasts) == 2 * STEPS, f"{what}: forward and backward each gather ({len(lasts)} calls)"
            assert lasts[0]["dense"] == 1, f"{what}: the first call has no replica: dense"
            backward = lasts[1::2]  # reshard_after_forward: the table is gathered again before backward
            assert all(b["changed_total"] == 0 and not b["dense"] for b in backward), (what, backward)
            forward = lasts[2::2]  # after an optimizer step
            itemsize = 2 if param_dtype == torch.bfloat16 else 4
            assert r["memory"] == rows * DIM * itemsize, (what, r["memory"])
            if opt_name == "adamw_decay":  # weight decay moves every row: the dense gather each step
                assert all(f["dense"] for f in forward), (what, forward)
                if param_dtype is None:  # (in bf16 a row's cast moves only when the decay crosses a rounding step)
                    assert all(f["changed_total"] >= VOCAB - world for f in forward), (what, forward)
            else:
                assert all(not f["dense"] and 0 < f["changed_total"] < VOCAB for f in forward), (what, forward)
            if opt_name == "sgd":  # plain SGD changes only this step's rows: at most 36 ids a rank
                assert all(f["changed_total"] <= 36 * world for f in forward), (what, forward)
                assert all(f["sent"] < r["dense_call"] / 3 for f in forward), (what, forward, r["dense_call"])
        replica, capped = edges["replica"], edges["capped"]
        assert all(equal for equal, _, _ in replica + capped), (rank, edges)
        assert [(changed, dense) for _, changed, dense in replica] == [(-1, 1), (2, 0), (0, 0)], (rank, replica)
        assert all(dense for _, _, dense in capped) and capped_memory == 0, (rank, capped, capped_memory)
        assert memory == rows * DIM * 4, (rank, memory)
