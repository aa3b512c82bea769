"""A table stored in the hashed row order (:class:`~zen_analysis.fsdp.hashed.HashedRows`) is a plain
``nn.Embedding`` to its user, on one process: the same lookups, gradients (in the original order) and updates bit for
bit with ``padding_idx`` (positive and negative), ``max_norm`` and ``scale_grad_by_freq``, and the same exception for
an id outside the table."""

import pytest
import torch
from torch import nn

from zen_analysis.fsdp.hashed import HashedRows, to_original

V, D = 1000, 6


def _pair(**kwargs) -> tuple[nn.Embedding, nn.Embedding, HashedRows]:
    """(a plain table, the same table hashed, its HashedRows), from the same weights."""
    torch.manual_seed(0)
    plain = nn.Embedding(V, D, **kwargs)
    hashed = nn.Embedding(V, D, **kwargs)
    hashed.load_state_dict(plain.state_dict())
    return plain, hashed, HashedRows(hashed, seed=3)


def _batch(step: int, pad: int | None) -> torch.Tensor:
    """Low ids most frequent (repeats for scale_grad_by_freq), the padding id at a few places."""
    g = torch.Generator().manual_seed(step)
    ids = torch.clamp((torch.rand(5, 7, generator=g) ** 3 * V).long(), max=V - 1)
    if pad is not None:
        ids[:, 0] = pad
    return ids


@pytest.mark.parametrize(
    "kwargs",
    [
        {"padding_idx": 0},
        {"padding_idx": -1},  # nn.Embedding reads it as V - 1
        {"padding_idx": 417, "scale_grad_by_freq": True},
        {"max_norm": 1.0},
        {"max_norm": 0.5, "norm_type": 1.0, "padding_idx": 2},
    ],
    ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()),
)
def test_a_hashed_table_trains_as_the_plain_one(kwargs):
    plain, hashed, h = _pair(**kwargs)
    pad = plain.padding_idx
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (plain, hashed)]
    c = torch.randn(5, 7, D, generator=torch.Generator().manual_seed(9))
    for step in range(3):
        ids = _batch(step, pad)
        outs = [m(ids) for m in (plain, hashed)]
        assert torch.equal(outs[0], outs[1]), step
        for out in outs:
            (out * c).sum().backward()
        assert torch.equal(to_original(hashed.weight.grad, h), plain.weight.grad), step
        for opt in opts:
            opt.step()
            opt.zero_grad()
    assert torch.equal(hashed.state_dict()["weight"], plain.state_dict()["weight"])
    # the module names the pad's stored row (its weight is in the stored order); HashedRows keeps the id
    assert h.padding_id == pad and (pad is None or hashed.padding_idx == int(h.row_of_id_R[pad]))
    if pad is not None:  # the padding row never moved, and the plain module's re-initialisation zeroes it
        hashed.reset_parameters()
        assert not hashed.state_dict()["weight"][pad].any()


@pytest.mark.parametrize("bad", [-1, -1000, V, V + 5])
def test_an_id_outside_the_table_raises_what_the_plain_table_raises(bad):
    plain, hashed, _ = _pair()
    ids = torch.tensor([[3, bad], [bad, 7]])
    with pytest.raises(IndexError) as want:
        plain(ids)
    with pytest.raises(IndexError) as got:
        hashed(ids)
    assert str(got.value) == str(want.value)


def test_ids_of_another_dtype_or_by_name_are_taken_as_the_plain_table_takes_them():
    plain, hashed, _ = _pair()
    ids = torch.tensor([[3, 999], [0, 7]])
    assert torch.equal(hashed(ids.int()), plain(ids.int()))
    assert torch.equal(hashed(input=ids), plain(input=ids))
    with pytest.raises(RuntimeError) as want:
        plain(ids.float())
    with pytest.raises(RuntimeError) as got:
        hashed(ids.float())
    assert str(got.value) == str(want.value)
