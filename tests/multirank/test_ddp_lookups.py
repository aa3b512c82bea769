"""The natural hook's rows for a dense embedding gradient come from the embedding's forward (the ids it looked up),
not from a pass over the table, and give stock DDP's parameters whatever else the user does with the gradient:
micro-batches under ``no_sync``, gradients not zeroed between steps, training in ``eval()`` mode, a regularizer over
the table from the first step or from a later one (caught on every step it is there: the hook warns once and scans
those steps)."""

import warnings

import pytest
import torch
from torch import nn

from zen_analysis.ranks.procs import fork_launch

V = 600


class _LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, 16)
        self.head = nn.Linear(16, V)

    def forward(self, x):
        return self.head(torch.tanh(self.embed(x)))


def _loss(model, x, case, step):
    loss = nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, V), x[:, 1:].reshape(-1))
    if case == "regularizer" or (
        case == "late_regularizer" and step >= 2
    ):  # rows 0-49 get a gradient no forward looked up (the ids are drawn from 100 up)
        loss = loss + 1e-2 * model.module.embed.weight[:50].pow(2).sum()
    return loss


def _train(rank, world, case):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from zen_analysis.sync.ddp import register

    out = {}
    for hook in ("stock", "natural"):
        torch.manual_seed(0)
        model = DDP(_LM())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            state = register(model, mode="natural") if hook == "natural" else None
            opt = torch.optim.SGD(model.parameters(), lr=0.5)
            params = []
            for step in range(4):
                gen = torch.Generator().manual_seed(100 * step + rank)
                x = torch.randint(100, V // (1 + rank % 2), (4, 6), generator=gen)  # ranks see different rows
                if case == "eval" and step == 1:  # dropout off, as some recipes train: the table trains all the same
                    model.eval()
                if case != "no_zero" or step == 0:
                    opt.zero_grad()
                if case == "no_sync":  # a first micro-batch accumulated locally, its ids kept for the synced one
                    with model.no_sync():
                        _loss(model, torch.randint(100, V, (4, 6), generator=gen), case, step).backward()
                _loss(model, x, case, step).backward()
                opt.step()
                params.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone())
        out[hook] = torch.stack(params)
        if state is not None:
            (look,) = state._lookups.values()
            out["lookup"] = (look.checked, look.enabled)
            out["outside_steps"] = look.outside_steps
            out["warned"] = [str(w.message) for w in caught if "elsewhere than its lookups" in str(w.message)]
            out["sparse_buckets"] = state.sparse_buckets
        dist.barrier()
    return out


CASES = [
    pytest.param("plain", marks=pytest.mark.smoke),
    "no_sync",
    "no_zero",
    "eval",
    "regularizer",
    "late_regularizer",
]


@pytest.mark.parametrize("case", CASES)
def test_looked_up_rows_give_stock_ddp_parameters(case):
    for r in fork_launch(_train, 3, case):
        torch.testing.assert_close(r["natural"], r["stock"], rtol=1e-5, atol=1e-6)
        assert r["sparse_buckets"] == 4
        if "regularizer" in case:  # caught on every step it is there, said once; those steps are found by a scan
            assert r["outside_steps"] == (4 if case == "regularizer" else 2) and len(r["warned"]) == 1
        else:  # the looked-up rows were used every step (checked once against a scan)
            assert r["lookup"] == (True, True) and r["outside_steps"] == 0 and not r["warned"]


def test_register_takes_the_row_source_and_scan_keeps_no_recorder():
    from torch.nn.parallel import DistributedDataParallel as DDP

    from zen_analysis.sync.ddp import NaturalState

    with pytest.raises(ValueError, match="row_source must be 'ids' or 'scan'"):
        NaturalState(row_source="batch")

    def body(rank, world):
        from zen_analysis.sync.ddp import register

        scan = register(DDP(_LM()), mode="natural", row_source="scan")
        ids = register(DDP(_LM()), mode="natural")
        return len(scan._lookups), len(ids._lookups)

    assert fork_launch(body, 2) == [(0, 1), (0, 1)]
