import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zen_analysis.capture.topk import TopKCompressor


def make(**kw):
    args = dict(ratio=0.05, exact_below=65536, sample_ratio=0.01, error_feedback=True, seed=0)
    args.update(kw)
    return TopKCompressor(**args)


def test_exact_topk_for_small_tensors_matches_torch_topk():
    g = torch.randn(1000)
    idx, val = make().compress(g, worker=0, tensor="w", step=0)
    ref = torch.topk(g.abs(), 50).indices.sort().values
    assert torch.equal(idx, ref) and torch.equal(val, g[ref])


def test_sampled_threshold_keeps_about_k_largest_for_large_tensors():
    torch.manual_seed(0)
    g = torch.randn(200_000)
    idx, val = make().compress(g, worker=0, tensor="w", step=0)
    k = 10_000
    assert 0.7 * k <= idx.numel() <= 1.3 * k
    assert val.abs().min() >= g.abs().median()  # only large entries are selected
    assert torch.equal(val, g[idx])


@settings(max_examples=30, deadline=None)
@given(st.integers(10, 3000), st.integers(0, 2**31 - 1))
def test_error_feedback_conserves_mass(n, seed):
    """What was sent plus the residual equals every gradient seen so far (nothing lost, nothing invented)."""
    gen = torch.Generator().manual_seed(seed)
    comp = make(exact_below=1000)
    total_grad = torch.zeros(n)
    total_sent = torch.zeros(n)
    for step in range(3):
        g = torch.randn(n, generator=gen)
        total_grad += g
        idx, val = comp.compress(g, worker=1, tensor="w", step=step)
        assert (val != 0).all() and idx.unique().numel() == idx.numel()
        total_sent[idx] += val
    residual = comp._residuals[(1, "w")]
    torch.testing.assert_close(total_sent + residual, total_grad, rtol=1e-5, atol=1e-5)


def test_zero_gradient_sends_nothing():
    idx, val = make().compress(torch.zeros(5000), worker=0, tensor="w", step=0)
    assert idx.numel() == 0 and val.numel() == 0


def test_selection_is_reproducible_across_instances():
    g = torch.randn(300_000)
    a = make().compress(g, worker=2, tensor="w", step=4)
    b = make().compress(g, worker=2, tensor="w", step=4)
    assert torch.equal(a[0], b[0])


def test_a_global_threshold_lets_the_worker_with_larger_gradients_send_more():
    """As the Zen paper's DGC: one threshold from every worker's samples (here two workers, gathered by hand)."""
    comp = make()
    small, large = torch.randn(40_000, generator=torch.Generator().manual_seed(1)), None
    large = 4 * torch.randn(40_000, generator=torch.Generator().manual_seed(2))
    pool = lambda s: torch.cat([small.abs(), large.abs()])  # noqa: E731 - every worker's magnitudes (exact size)
    kept_small = comp.select(small, gather=pool).numel()
    kept_large = comp.select(large, gather=pool).numel()
    k = int(40_000 * comp.ratio)
    assert kept_small < k < kept_large  # local thresholds would keep k each
    assert kept_small + kept_large == 2 * k  # the top ratio of the pool, split by magnitude
    assert comp.select(small).numel() == k
