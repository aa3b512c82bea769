"""Zen under FSDP2: the embedding unit's sparse reduce-scatter gives stock FSDP2's shard gradients after every step
and its parameters after 5 steps, bit for bit on integer-valued gradients (fp32, bf16 and fp16 reduce dtypes, every
division FSDP2 offers) and within float rounding on a language model's; a unit that mixes the table with other
parameters, or ties it, is refused with what to do."""

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from zen_analysis.fsdp import EmbeddingUnit, UnitError, install
from zen_analysis.fsdp.auto import AutoReduceScatter
from zen_analysis.fsdp.training import FSDPSync
from zen_analysis.ranks.procs import fork_launch

VOCAB, DIM, STEPS = 1001, 8, 5  # 1001 rows: the last shard is padded on 2 and 4 ranks


class _Integer(nn.Module):
    """Integer-valued gradients every step: the table's is the sum of integer weights at the ids' positions (it does
    not depend on the parameters), the head's the sum of the table's integer-valued rows."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.head = nn.Linear(DIM, 3, bias=False)
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randint(-3, 4, (VOCAB, DIM), generator=g).float())
            self.head.weight.copy_(torch.randint(-2, 3, (3, DIM), generator=g).float())

    def forward(self, x: torch.Tensor, step: int) -> torch.Tensor:
        e = self.embed(x)
        c = torch.randint(-2, 3, e.shape, generator=torch.Generator().manual_seed(7 + step)).float()
        return (e * c).sum() + self.head(e.detach()).sum()


class _LM(nn.Module):
    """A small language model: float gradients, cross entropy."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.hidden = nn.Linear(DIM, DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, x: torch.Tensor, step: int) -> torch.Tensor:
        logits = self.head(torch.tanh(self.hidden(self.embed(x[:, :-1]))))
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))


def _train(rank, world, model_cls, reduce_dtype, divide, zen, row_source="ids", root_divide=None):
    """(embedding shard gradient each step, every parameter's shard after STEPS steps, rows pushed each step)."""

    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = model_cls()
    mp = MixedPrecisionPolicy(reduce_dtype=reduce_dtype)
    fully_shard(model.embed, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    for unit, (factor, force_sum) in ((model.embed, divide), (model, root_divide or divide)):
        if factor is not None:
            unit.set_gradient_divide_factor(factor)
        unit.set_force_sum_reduction_for_comms(force_sum)
    state = install(model, row_source=row_source) if zen else None
    opt = torch.optim.SGD(model.parameters(), lr=1.0 if model_cls is _Integer else 0.5)
    grads, rows = [], []
    for step in range(STEPS):
        x = torch.randint(0, VOCAB, (4, 9), generator=torch.Generator().manual_seed(100 * step + rank))
        model(x, step).backward()
        grads.append(model.embed.weight.grad.to_local().clone())
        if state is not None:
            rows.append(state.reduce_scatters["embed"].last["rows"])
        opt.step()
        opt.zero_grad()
    params = [p.to_local().detach().clone() for p in model.parameters()]
    return grads, params, rows, (state.bytes_sent() if state else 0)


def _both(rank, world, cases):
    out = []
    for model_cls, reduce_dtype, divide, stock_divide, row_source in cases:
        stock = _train(rank, world, model_cls, reduce_dtype, stock_divide, zen=False)
        ours = _train(rank, world, model_cls, reduce_dtype, divide, True, row_source, root_divide=stock_divide)
        out.append((stock, ours))
    return out


AVG, SUM_THEN_DIVIDE = (None, False), (None, True)
CASES = [
    # (model, reduce dtype, Zen's division, stock's division (gloo has no PREMUL_SUM: its equal), row source)
    (_Integer, None, AVG, AVG, "ids"),
    (_Integer, None, AVG, AVG, "scan"),
    (_Integer, torch.bfloat16, AVG, AVG, "ids"),
    (_Integer, torch.float16, AVG, AVG, "ids"),  # fp16: FSDP2 divides before and after, the collective sums
    (_Integer, None, SUM_THEN_DIVIDE, SUM_THEN_DIVIDE, "ids"),
    (_Integer, None, (3.0, True), (3.0, True), "ids"),
    ("premul", None, None, None, "ids"),  # factor 2W: PREMUL_SUM(1 / 2W); stock on gloo: sum, then divide by 2W
    (_LM, None, AVG, AVG, "ids"),
    (_LM, torch.bfloat16, AVG, AVG, "ids"),
]


def _cases(world):
    out = []
    for c in CASES:
        if c[0] == "premul":
            c = (_Integer, None, (2.0 * world, False), (2.0 * world, True), "ids")
        out.append(c)
    return out


@pytest.mark.parametrize("world", [pytest.param(2, marks=pytest.mark.smoke), 4])
def test_sparse_reduce_scatter_gives_stock_fsdp2_gradients_and_parameters(world):
    cases = _cases(world)
    for rank_out in fork_launch(_both, world, cases, timeout_s=240):
        for (model_cls, reduce_dtype, divide, _, row_source), (stock, ours) in zip(cases, rank_out):
            what = f"{model_cls.__name__} reduce={reduce_dtype} divide={divide} rows={row_source}"
            (g_s, p_s, _, _), (g_z, p_z, rows, sent) = stock, ours
            if model_cls is _Integer:
                for step, (a, b) in enumerate(zip(g_z, g_s)):
                    assert torch.equal(a, b), f"{what}: step {step}'s shard gradient differs"
                for a, b in zip(p_z, p_s):
                    assert torch.equal(a, b), f"{what}: parameters after {STEPS} steps differ"
            else:
                tol = {"rtol": 2e-2, "atol": 1e-4} if reduce_dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-7}
                for a, b in zip(g_z, g_s):
                    torch.testing.assert_close(a, b, **tol, msg=what)
                for a, b in zip(p_z, p_s):
                    torch.testing.assert_close(a, b, **tol, msg=what)
            # 36 ids a rank a step: at most 36 distinct rows pushed, not the 1001-row table
            assert all(0 < r <= 36 for r in rows), (what, rows)
            dense = STEPS * (world - 1) / world * -(-VOCAB // world) * world * DIM * 4
            assert 0 < sent < dense / 4, (what, sent, dense)


def _refusals(rank, world):

    mesh = init_device_mesh("cpu", (world,))
    said = []
    mixed = _LM()
    fully_shard(mixed, mesh=mesh)  # the table in the root unit, beside the dense layers
    tied = nn.Sequential(nn.Embedding(VOCAB, DIM), nn.Linear(DIM, VOCAB, bias=False))
    tied[1].weight = tied[0].weight  # one unit holds the table and the head that shares it
    fully_shard(tied, mesh=mesh)
    plain = nn.Sequential(nn.Linear(4, 4))
    fully_shard(plain, mesh=mesh)
    for model in (mixed, tied, plain):
        with pytest.raises(UnitError) as e:
            install(model)
        said.append(str(e.value))
    return said


def test_a_unit_mixing_or_tying_the_table_is_refused_with_how_to_wrap_it():
    mixed, tied, none = fork_launch(_refusals, 2)[0]
    assert "holds the embedding 'embed' with 3 other parameters" in mixed and "fully_shard(model.embed)" in mixed
    assert "tied" in tied and "stock FSDP2" in tied
    assert "no FSDP2 unit of this model holds an nn.Embedding" in none


def _auto(rank, world):
    """``auto``'s reduce-scatter on a few rows (Zen) and on every row (dense), against ``reduce_scatter_tensor``."""
    emb = nn.Embedding(VOCAB, DIM)
    comm = AutoReduceScatter(EmbeddingUnit(unit=emb, embedding=emb, name="t"), every=1, row_source="scan")
    per = -(-VOCAB // world)
    out = []
    for touched in (torch.tensor([3, 500, 1000]), torch.arange(VOCAB)):
        table = torch.zeros(world * per, DIM)
        values = torch.randint(1, 4, (touched.numel(), DIM), generator=torch.Generator().manual_seed(rank))
        table[touched] = values.float()
        got, want = torch.empty(per * DIM), torch.empty(per * DIM)
        comm(got, table.view(-1), dist.group.WORLD, dist.ReduceOp.SUM)
        dist.reduce_scatter_tensor(want, table.view(-1), op=dist.ReduceOp.SUM)
        out.append((comm.choice, torch.equal(got, want)))
    return out


def test_auto_chooses_zen_for_a_few_rows_and_dense_for_all_with_stock_sums():
    for rank_out in fork_launch(_auto, 2):
        assert rank_out == [("zen", True), ("dense", True)]


def _auto_resumed(rank, world):
    """``auto`` every 3 calls over 6 steps (a few rows, then every row): whole, stopped after 4 calls and resumed from
    its sync's state, and resumed from a checkpoint that holds none (one written before the planner's was saved)."""
    emb = nn.Embedding(VOCAB, DIM)
    per = -(-VOCAB // world)

    def synced(state=None):
        sync = FSDPSync(embedding="auto", every=3)
        sync.comm = AutoReduceScatter(EmbeddingUnit(unit=emb, embedding=emb, name="t"), every=3, row_source="scan")
        if state is not None:
            sync.load_state_dict(state)
        return sync

    def run(sync, steps):
        for step in steps:
            table = torch.zeros(world * per, DIM)
            table[torch.tensor([3, 500, 1000]) if step < 3 else torch.arange(VOCAB)] = 1.0
            sync.comm(torch.empty(per * DIM), table.view(-1), dist.group.WORLD, dist.ReduceOp.SUM)
        return sync

    whole = run(synced(), range(6))
    state = run(synced(), range(4)).state_dict()
    resumed, old = run(synced(state), range(4, 6)), run(synced({}), range(4, 6))
    return whole.decisions, resumed.decisions, old.decisions, resumed.comm.choice


def test_auto_resumed_from_its_state_decides_at_the_uninterrupted_calls_and_lists_every_decision():
    for whole, resumed, old, choice in fork_launch(_auto_resumed, 2):
        calls = [(d["call"], d["choice"]) for d in whole["t"]]
        assert calls == [(0, "zen"), (3, "dense")]
        assert resumed == whole and choice == "dense"  # no decision at the resumed call 4: the one of call 3 stands
        # no state (an older checkpoint): a decision at the first call after the resume, its counter from 0
        assert [(d["call"], d["choice"]) for d in old["t"]] == [(0, "dense")]
