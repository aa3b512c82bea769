"""The rows Zen sums under FSDP2 are the rows the gradient has, whatever the user does around the lookups: training
in ``eval()`` mode from step 1 on (the id recorder records whenever grad is enabled), and a gradient that reaches
the table from elsewhere (a term over the whole table from step 2 on: those steps are found and summed by a row-wise
pass, said once). Both against stock FSDP2 from the same weights and batches, bit for bit on integer-valued
gradients, through ``shard()`` (hashed rows) and ``install()``. And ``install()`` on units that have Zen already is
refused, while ``ZenFSDP.remove()`` puts stock's comms back so it can be installed again."""

import warnings

import pytest
import torch
from test_fsdp import STEPS, VOCAB, _Integer  # a sibling test module: pytest puts its folder on the path
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from zen_analysis.fsdp import UnitError, install, shard
from zen_analysis.fsdp.hashed import hashed_rows_of, to_original
from zen_analysis.ranks.procs import fork_launch


class _L2Embedding(torch.nn.Embedding):
    """With ``l2`` set, a term over the whole table (its sum) in the forward, where FSDP2's table is unsharded: an
    integer-valued gradient on every row, beside the lookup's."""

    l2 = False

    def forward(self, x):
        out = super().forward(x)
        return out + self.weight.sum() if self.l2 else out


def _train(rank, world, case, variant):
    """The embedding's full gradient each step (original row order) and every parameter after STEPS steps."""
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = _Integer()
    model.embed.__class__ = _L2Embedding
    zen = None
    if variant == "shard":
        zen = shard(model, mesh=mesh, seed=3)
    else:
        fully_shard(model.embed, mesh=mesh)
        fully_shard(model, mesh=mesh)
        zen = install(model) if variant == "install" else None
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    grads, said = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(STEPS):
            x = torch.randint(0, VOCAB, (4, 9), generator=torch.Generator().manual_seed(100 * step + rank))
            model.embed.l2 = case == "regularizer" and step >= 2
            if case == "eval" and step == 1:  # after a first step in train mode (checked against a scan)
                model.eval()
            model(x, step).backward()
            grad = model.embed.weight.grad
            if variant == "shard":
                grad = to_original(grad, hashed_rows_of(model.embed))
            grads.append(grad.full_tensor())
            opt.step()
            opt.zero_grad()
        said = [str(w.message) for w in caught if "elsewhere than its lookups" in str(w.message)]
    weight = model.embed.weight
    if variant == "shard":
        weight = to_original(weight.detach(), hashed_rows_of(model.embed))
    params = [weight.full_tensor()] + [p.full_tensor() for n, p in model.named_parameters() if "embed" not in n]
    look = zen.reduce_scatters["embed"].lookups if zen is not None else None
    watched = len(look._watched) if look is not None else 1  # one gradient hook: FSDP2 keeps its unsharded weight
    return grads, params, said, (look.outside_steps if look is not None else None), watched


def _cases(rank, world):
    return {c: {v: _train(rank, world, c, v) for v in ("stock", "install", "shard")} for c in ("eval", "regularizer")}


def test_zen_under_fsdp2_sums_the_rows_the_gradient_has():
    for by_case in fork_launch(_cases, 2, timeout_s=240):
        for case, out in by_case.items():
            _check(case, out)


def _check(case, out):
    g_s, p_s, *_ = out["stock"]
    for variant in ("install", "shard"):
        g_z, p_z, said, outside, watched = out[variant]
        assert watched == 1, f"{case}/{variant}: {watched} weights hooked"
        for step, (a, b) in enumerate(zip(g_z, g_s)):
            assert torch.equal(a, b), f"{case}/{variant}: step {step}'s gradient differs from stock FSDP2's"
        for a, b in zip(p_z, p_s):
            assert torch.equal(a, b), f"{case}/{variant}: parameters differ from stock FSDP2's"
        if case == "regularizer":  # steps 2, 3, 4 found, said once
            assert outside == STEPS - 2 and len(said) == 1, (variant, outside, said)
        else:
            assert outside == 0 and not said, (variant, outside, said)


def _twice(rank, world):
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = _Integer()
    zen = shard(model, mesh=mesh, seed=3)
    with pytest.raises(UnitError) as refused:
        install(model)
    zen.remove()
    again = install(model)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    for step in range(3):
        x = torch.randint(0, VOCAB, (4, 9), generator=torch.Generator().manual_seed(100 * step + rank))
        model(x, step).backward()
        opt.step()
        opt.zero_grad()
    first, second = zen_lookups(zen), zen_lookups(again)
    return str(refused.value), len(first._ids), len(second._ids), again.reduce_scatters["embed"].calls


def zen_lookups(zen):
    return zen.reduce_scatters["embed"].lookups


def test_install_on_units_with_zen_already_is_refused_and_remove_puts_stock_back():
    for said, first_ids, second_ids, calls in fork_launch(_twice, 2, timeout_s=120):
        assert "Zen is on 'embed'" in said and "remove()" in said
        # the first install's recorder is off (nothing piles up); the second's is taken every step
        assert first_ids == 0 and second_ids == 0 and calls == 3
