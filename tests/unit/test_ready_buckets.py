"""ReadyBuckets: a bucket's sum starts as soon as backward has produced every gradient in it, in bucket order."""

import torch
from torch import nn

from zen_analysis.capture.buckets import bucket_parameters
from zen_analysis.sync.grad_sync import ReadyBuckets


def _model_and_buckets():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    groups = bucket_parameters(list(model.named_parameters()), bucket_mb=50 * 4 / 2**20)  # buckets of >= 50 floats
    return model, [[p for _, p in g] for g in groups], groups


def test_buckets_launch_in_order_while_backward_still_runs():
    model, buckets, groups = _model_and_buckets()
    assert [n for n, _ in groups[0]] == ["4.bias", "4.weight", "2.bias", "2.weight"]  # reverse registration
    assert len(buckets) == 2
    events = []
    first = model[0].weight  # the first layer: its gradient is the last backward produces
    first.register_post_accumulate_grad_hook(lambda p: events.append("first layer's gradient"))
    ready = ReadyBuckets(buckets, lambda b: events.append(b))
    ready.arm()
    model(torch.randn(4, 8)).sum().backward()
    ready.disarm()
    # bucket 0 (the last layers) went out before backward reached the first layer; bucket 1 once it did
    assert events.index(0) < events.index("first layer's gradient") <= events.index(1)
    assert sorted(e for e in events if isinstance(e, int)) == [0, 1] and ready.first_launch is not None


def test_a_parameter_without_gradient_holds_its_bucket_back_until_disarm():
    model, buckets, _ = _model_and_buckets()
    launched = []
    ready = ReadyBuckets(buckets, launched.append)
    ready.arm()
    model[4].weight.requires_grad_(False)  # no gradient this backward: bucket 0 never completes
    model(torch.randn(4, 8)).sum().backward()
    assert launched == []  # bucket 1 is complete, but waits behind bucket 0: every rank keeps the same order
    ready.disarm()
    assert launched == [0, 1]


def test_unarmed_backward_launches_nothing_until_disarm_launches_all():
    model, buckets, _ = _model_and_buckets()
    launched = []
    ready = ReadyBuckets(buckets, launched.append)
    for _ in range(2):  # micro-batches before the last: the hooks rest
        model(torch.randn(4, 8)).sum().backward()
    assert launched == []
    ready.disarm()  # a backward it was not armed for (a capture step): everything, in order, after it
    assert launched == [0, 1]
