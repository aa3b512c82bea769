""":class:`zen_analysis.sync.lookups.LookedUp` on one process: the ids of every forward with grad enabled (eval mode
included, ``no_grad`` excluded), and None (scan) for a backward whose table gradient is not its one lookup's alone."""

import warnings

import pytest
import torch
from torch import nn

from zen_analysis.sync.lookups import LookedUp


class _Scaled(nn.Embedding):  # Gemma's kind: the lookup, then a scale
    def forward(self, ids):
        return super().forward(ids) * 3.0


def _step(emb, look, extra):
    emb.zero_grad(set_to_none=True)
    emb.train(extra != "eval")
    ids = torch.tensor([[1, 2], [3, 2]])
    loss = emb(ids).sum()
    if extra == "regularizer":
        loss = loss + emb.weight.pow(2).sum()
    if extra == "twice":
        loss = loss + emb(ids + 5).sum()
    if extra == "only_elsewhere":
        loss = emb.weight.sum()
    loss.backward()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = look.take(torch.device("cpu"))
    return (None if rows is None else rows.tolist()), [str(w.message) for w in caught]


@pytest.mark.parametrize("cls", [nn.Embedding, _Scaled])
def test_ids_in_eval_mode_and_none_for_a_gradient_from_elsewhere(cls):
    emb = cls(20, 4)
    look = LookedUp(emb, name="embed")
    assert _step(emb, look, None) == ([1, 2, 3], [])
    assert _step(emb, look, "eval") == ([1, 2, 3], [])
    rows, said = _step(emb, look, "regularizer")
    assert rows is None and len(said) == 1 and "elsewhere than its lookups" in said[0]
    assert _step(emb, look, "twice") == (None, [])  # said once already
    assert _step(emb, look, "only_elsewhere")[0] is None
    assert look.outside_steps == 3
    assert _step(emb, look, None) == ([1, 2, 3], [])  # a plain step after them uses the ids again
    with torch.no_grad():
        emb(torch.tensor([7]))
    assert look.take(torch.device("cpu")).tolist() == []
    look.remove()
    emb(torch.tensor([7])).sum().backward()
    assert look.take(torch.device("cpu")).tolist() == [] and look.outside_steps == 3


def test_the_checked_gradient_is_still_stolen_by_autograd_not_copied():
    emb = nn.Embedding(20, 4)
    LookedUp(emb)
    ptrs = []
    out = emb(torch.tensor([1, 4]))
    out.grad_fn.register_hook(lambda grads_in, grads_out: ptrs.append(grads_in[0].data_ptr()))
    out.sum().backward()
    assert ptrs == [emb.weight.grad.data_ptr()]
