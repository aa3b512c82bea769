"""A tensor handed to a collective stays referenced from Python until the backend has released it."""

import torch

from zen_analysis.wire import inflight


def _owned_elsewhere(t: torch.Tensor) -> torch.Tensor:
    """A second C++ owner of ``t`` (a view keeps its base's TensorImpl), as a collective's work is on gloo's
    thread."""
    before = t._use_count()
    view = t.view(-1)
    assert t._use_count() == before + 1
    return view


def test_a_tensor_is_held_until_the_backend_lets_go_then_released():
    t = torch.ones(4)
    inflight.hold(t)
    backend = _owned_elsewhere(t)
    assert inflight.pending() == 1
    del t  # the caller's temporary dies; its Python object lives on in the hold, not on the backend's thread
    assert inflight.pending() == 1 and not inflight.settle(timeout=0.01)  # gives up, still holding
    del backend  # the backend lets go: a plain decrement, no GIL needed
    assert inflight.pending() == 0 and inflight.settle(timeout=0.01)


def test_holding_is_pruned_as_collectives_complete():
    backends = []
    for _ in range(5):
        t = torch.ones(2)
        inflight.hold(t)
        backends.append(_owned_elsewhere(t))
    assert inflight.pending() == 5
    backends = backends[3:]
    assert inflight.pending() == 2
    backends.clear()
    assert inflight.pending() == 0
