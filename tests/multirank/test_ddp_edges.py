"""The DDP hooks at the edges (issue 41, findings 1-2), on real gloo ranks: every rank ends with the same gradient
bits, signed zeros included; a natural hook that raises leaves its bucket as it was."""

import pytest
import torch
import torch.distributed as dist
from test_scheme_edges import Injected, failing_after  # a sibling test module: pytest puts its folder on the path
from torch import nn

from zen_analysis.ranks.procs import fork_launch


class _ReluNet(nn.Module):
    """``relu(w * x - 5)`` summed: an element of ``w`` whose unit is off gets the gradient ``+0.0 * x``, which is
    ``-0.0`` where the rank's ``x`` is negative (an elementwise product, no GEMM adding it to ``+0.0``); only the
    first row is on. So ``w.grad`` has whole rows of zeros whose signs depend on the rank's batch."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.full((64, 8), 0.01))
        self.out = nn.Linear(8, 1)
        with torch.no_grad():
            self.w[0] = 10.0

    def forward(self, x):
        return self.out(torch.relu(self.w * x[0] - 5).sum(0, keepdim=True))  # one sample: no reduction over a batch


def _grad_bits(rank, world, mode, granularity):
    from torch.nn.parallel import DistributedDataParallel as DDP

    from zen_analysis.sync.ddp import register

    torch.manual_seed(0)
    net = _ReluNet()
    model = DDP(net)
    kwargs = {"ratio": 0.5} if mode == "topk" else {"params": [net.w], "granularity": granularity}
    register(model, mode=mode, scheme="zen", **kwargs)
    x = torch.randn(1, 8, generator=torch.Generator().manual_seed(rank)) * 4
    model(x).sum().backward()
    grads = {n: p.grad.detach().clone().view(torch.int32) for n, p in net.named_parameters()}
    dist.barrier()
    return grads


@pytest.mark.parametrize(
    "mode, granularity",
    [pytest.param("natural", "rows", marks=pytest.mark.smoke), ("natural", "elements"), ("topk", "rows")],
)
def test_every_rank_holds_the_same_gradient_bits_with_signed_zeros(mode, granularity):
    results = fork_launch(_grad_bits, 3, mode, granularity)
    for name, bits in results[0].items():
        for r, other in enumerate(results[1:], 1):
            assert torch.equal(other[name], bits), f"{mode}/{granularity}: rank {r}'s {name} differs from rank 0's"


def _local_negative_zeros(rank, world):
    torch.manual_seed(0)
    net = _ReluNet()
    x = torch.randn(1, 8, generator=torch.Generator().manual_seed(rank)) * 4
    net(x).sum().backward()
    g = net.w.grad
    zero_rows = (g == 0).all(1)
    return bool((torch.signbit(g) & zero_rows[:, None]).any()), bool((~torch.signbit(g) & zero_rows[:, None]).any())


def test_the_relu_net_gives_zero_rows_of_both_signs():
    """The case above is real: without a sync, the ranks' gradients hold zero rows with -0.0 entries."""
    results = fork_launch(_local_negative_zeros, 3)
    assert any(neg for neg, _ in results) and any(pos for _, pos in results)


class _Bucket:
    """The parts of ``dist.GradBucket`` the natural hook reads, over a flat buffer holding ``params``' gradients."""

    def __init__(self, params, buffer):
        self._params, self._buffer, at, self._grads = params, buffer, 0, []
        for p in params:
            self._grads.append(buffer[at : at + p.numel()].view(p.shape))
            at += p.numel()

    def buffer(self):
        return self._buffer

    def parameters(self):
        return self._params

    def gradients(self):
        return self._grads

    def is_last(self):
        return True

    def index(self):
        return 0


def _failing_hook(rank, world, sparse_count):
    from zen_analysis.sync.ddp import NaturalState, natural_hook

    tables = [nn.Parameter(torch.zeros(50, 4)) for _ in range(sparse_count)]
    dense = nn.Parameter(torch.zeros(30))
    params = [*tables, dense]
    gen = torch.Generator().manual_seed(rank)
    buffer = torch.cat(
        [
            torch.randint(-3, 4, (p.numel(),), generator=gen).float() * (torch.rand(p.numel(), generator=gen) < 0.2)
            for p in params
        ]
    )
    names = {id(p): f"p{i}" for i, p in enumerate(params)}
    out = {}
    for k in range(1, 20):
        state = NaturalState(params=tuple(tables), names=names, scheme="zen")
        before = buffer.clone()
        try:
            with failing_after(k):
                natural_hook(state, _Bucket(params, buffer)).wait()
            raised = False
        except Injected:
            raised = True
        if not raised:  # past the hook's last collective: it summed
            out["calls"] = k - 1
            break
        out[k] = torch.equal(buffer, before)
        dist.barrier()
    return out


@pytest.mark.parametrize("sparse_count", [1, 2])
def test_a_natural_hook_that_raises_leaves_its_bucket_as_it_was(sparse_count):
    """A failure after any of the hook's collectives (the dense rest's all-reduce, each sparse sum's) leaves the
    bucket's gradients as they were on every rank: nothing is written before the last collective."""
    for r in fork_launch(_failing_hook, 3, sparse_count):
        assert r["calls"] >= 2 * sparse_count, r  # each sparse sum's collectives (the dense all-reduce is torch's)
        failed = [k for k in r if k != "calls"]
        assert failed and all(r[k] for k in failed), (
            f"a failure after collective(s) {[k for k in failed if not r[k]]} wrote the bucket"
        )
