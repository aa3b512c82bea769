import copy
import re

import pytest
import torch

from zen_analysis.train.optim import LazyRowAdamW, densify_sparse_grads, fused_adamw
from zen_analysis.wire.rows import nonzero_rows

STATE_KEYS = ("step", "exp_avg", "exp_avg_sq")


def same_state(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in STATE_KEYS)


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_every_row_touched_is_bit_identical_to_adamw(weight_decay):
    """Dense random gradients touch every row: parameters and state equal AdamW(foreach=False) bit for bit, over
    two param groups with their own hyperparameters (one of them with a width that is no SIMD multiple)."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(97, 16), (31, 7)]
    init = [torch.randn(s, generator=gen) for s in shapes]
    ours = [torch.nn.Parameter(w.clone()) for w in init]
    ref = [torch.nn.Parameter(w.clone()) for w in init]

    def groups(ps):
        return [{"params": [ps[0]]}, {"params": [ps[1]], "lr": 3e-2, "betas": (0.8, 0.99), "eps": 1e-6}]

    opt = LazyRowAdamW(groups(ours), lr=1e-2, weight_decay=weight_decay)
    adamw = torch.optim.AdamW(groups(ref), lr=1e-2, weight_decay=weight_decay, foreach=False)
    for _ in range(5):
        for a, b in zip(ours, ref):
            a.grad = torch.randn(a.shape, generator=gen)
            b.grad = a.grad.clone()
        opt.step()
        adamw.step()
    for a, b in zip(ours, ref):
        assert torch.equal(a, b)
        assert same_state(opt.state[a], adamw.state[b])
    assert opt.state[ours[0]]["step"].dtype == torch.float32 and opt.state[ours[0]]["step"].item() == 5


def test_untouched_rows_keep_weights_and_moments_touched_rows_take_an_adamw_step():
    """Per step, the untouched rows (weights, both moments) are unchanged; the touched rows equal AdamW run on a
    table of just those rows, given their moments and the shared step count. A step with no row touched moves
    nothing but the counter."""
    gen = torch.Generator().manual_seed(1)
    V, D, lr, wd = 40, 6, 1e-2, 0.1
    p = torch.nn.Parameter(torch.randn(V, D, generator=gen))
    opt = LazyRowAdamW([p], lr=lr, weight_decay=wd)
    none = torch.tensor([], dtype=torch.long)
    touched = [torch.arange(V), torch.tensor([1, 5, 6, 30]), none, torch.tensor([0, 5, 39])]
    for t, rows in enumerate(touched, start=1):
        g = torch.zeros(V, D)
        g[rows] = torch.randn(len(rows), D, generator=gen)
        p.grad = g
        state = opt.state[p]
        before = {"w": p.detach().clone()} | ({k: state[k].clone() for k in STATE_KEYS} if state else {})
        if state:  # the hand reference: AdamW on a copy holding just the touched rows
            q = torch.nn.Parameter(before["w"][rows].clone())
            q.grad = g[rows].clone()
            ref = torch.optim.AdamW([q], lr=lr, weight_decay=wd, foreach=False)
            ref.state[q] = {
                "step": before["step"].clone(),
                "exp_avg": before["exp_avg"][rows].clone(),
                "exp_avg_sq": before["exp_avg_sq"][rows].clone(),
            }
            ref.step()
        opt.step()
        assert state["step"].item() == t
        if t == 1:
            continue
        untouched = torch.ones(V, dtype=torch.bool)
        untouched[rows] = False
        assert torch.equal(p[untouched], before["w"][untouched])
        for k in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(state[k][untouched], before[k][untouched])
        assert torch.equal(p[rows], q)
        assert torch.equal(state["exp_avg"][rows], ref.state[q]["exp_avg"])
        assert torch.equal(state["exp_avg_sq"][rows], ref.state[q]["exp_avg_sq"])


def test_sparse_embedding_grads_give_the_parameters_of_dense_ones():
    """nn.Embedding(sparse=True) and (sparse=False) on the same ids, repeated ids included. The upstream gradient
    is small positive integers, so each row's summed gradient is exact whatever order the dense backward and the
    sparse coalesce add in (with general floats those two sums differ in the last bits before the optimizer runs),
    and no touched row sums to zero."""
    gen = torch.Generator().manual_seed(2)
    V, D = 60, 8
    sparse = torch.nn.Embedding(V, D, sparse=True)
    dense = torch.nn.Embedding(V, D, sparse=False)
    dense.load_state_dict(sparse.state_dict())
    opt_s = LazyRowAdamW(sparse.parameters(), lr=1e-2, weight_decay=0.1)
    opt_d = LazyRowAdamW(dense.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(4):
        ids = torch.randint(0, V // 2, (16, 5), generator=gen)  # half the table, with repeats
        up = torch.randint(1, 9, (16, 5, D), generator=gen).float()
        for emb, opt in ((sparse, opt_s), (dense, opt_d)):
            opt.zero_grad()
            (emb(ids) * up).sum().backward()
            opt.step()
        assert sparse.weight.grad.is_sparse and not dense.weight.grad.is_sparse
        assert torch.equal(nonzero_rows(sparse.weight.grad), nonzero_rows(dense.weight.grad))
        assert torch.equal(nonzero_rows(dense.weight.grad), ids.unique())
    assert torch.equal(sparse.weight, dense.weight)
    assert same_state(opt_s.state[sparse.weight], opt_d.state[dense.weight])


def test_a_sparse_embedding_made_dense_steps_as_adamw_on_a_dense_embedding():
    """``model.sparse_embedding`` with ``train.embedding_update=dense``: the sparse gradient (repeated ids included)
    made dense gives AdamW the dense embedding's gradient and so its step, bit for bit here (integer upstream
    gradients: every sum exact whatever its order); ``keep`` (the lazy update's table) stays sparse."""
    gen = torch.Generator().manual_seed(4)
    V, D = 60, 8
    sparse = torch.nn.Embedding(V, D, sparse=True)
    dense = torch.nn.Embedding(V, D, sparse=False)
    dense.load_state_dict(sparse.state_dict())
    opt_s = torch.optim.AdamW(sparse.parameters(), lr=1e-2, weight_decay=0.1)
    opt_d = torch.optim.AdamW(dense.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(3):
        ids = torch.randint(0, V // 2, (16, 5), generator=gen)
        up = torch.randint(1, 9, (16, 5, D), generator=gen).float()
        for emb, opt in ((sparse, opt_s), (dense, opt_d)):
            opt.zero_grad()
            (emb(ids) * up).sum().backward()
        assert densify_sparse_grads(sparse.parameters(), keep=sparse.weight) == 0 and sparse.weight.grad.is_sparse
        assert densify_sparse_grads([*sparse.parameters(), *dense.parameters()]) == 1
        assert not sparse.weight.grad.is_sparse and torch.equal(sparse.weight.grad, dense.weight.grad)
        opt_s.step()
        opt_d.step()
    assert torch.equal(sparse.weight, dense.weight)


def test_densify_with_buffers_reuses_one_table_and_equals_a_fresh_one_every_step():
    """The loop's reused dense table (``buffers``): the gradient each step equals a fresh ``to_dense`` one, bit for
    bit, with last step's rows zeroed (the batches' ids move between halves of the table, so a stale row would
    show), through a clip that scales the table in place and ``zero_grad(set_to_none=True)``; one table throughout,
    and the fused AdamW the loop picks steps it as the single-tensor AdamW steps a fresh one, to the last bit or
    one."""
    gen = torch.Generator().manual_seed(5)
    V, D = 50, 4
    reused = torch.nn.Embedding(V, D, sparse=True)
    fresh = torch.nn.Embedding(V, D, sparse=True)
    fresh.load_state_dict(reused.state_dict())
    assert fused_adamw(reused.parameters()) is True and fused_adamw([torch.zeros(2, dtype=torch.long)]) is None
    opt_r = torch.optim.AdamW(reused.parameters(), lr=1e-2, fused=fused_adamw(reused.parameters()))
    opt_f = torch.optim.AdamW(fresh.parameters(), lr=1e-2, foreach=False)
    buffers, tables = {}, set()
    for step in range(4):
        half = (step % 2) * (V // 2)
        ids = torch.randint(half, half + V // 2, (8, 3), generator=gen)
        up = torch.randint(1, 9, (8, 3, D), generator=gen).float()
        for emb, opt in ((reused, opt_r), (fresh, opt_f)):
            opt.zero_grad(set_to_none=True)
            (emb(ids) * up).sum().backward()
        assert densify_sparse_grads(reused.parameters(), buffers=buffers) == 1
        assert densify_sparse_grads(fresh.parameters()) == 1
        assert torch.equal(reused.weight.grad, fresh.weight.grad)
        assert torch.equal(nonzero_rows(reused.weight.grad), ids.unique())
        tables.add(reused.weight.grad.data_ptr())
        for emb in (reused, fresh):
            torch.nn.utils.clip_grad_norm_(emb.parameters(), 1.0)
        opt_r.step()
        opt_f.step()
    assert len(tables) == 1
    torch.testing.assert_close(reused.weight, fresh.weight, rtol=0, atol=1e-6)


def test_explicit_rows_equal_found_rows_and_may_add_zero_gradient_rows():
    gen = torch.Generator().manual_seed(3)
    V, D = 30, 5
    init = torch.randn(V, D, generator=gen)
    a, b, c = (torch.nn.Parameter(init.clone()) for _ in range(3))
    opt_a, opt_b, opt_c = (LazyRowAdamW([x], lr=1e-2, weight_decay=0.1) for x in (a, b, c))
    for _ in range(3):
        rows = torch.randperm(V, generator=gen)[:7].sort().values
        g = torch.zeros(V, D)
        g[rows] = torch.randn(7, D, generator=gen)
        a.grad, b.grad, c.grad = g.clone(), g.clone(), g.clone()
        opt_a.step()
        opt_b.step(rows={b: rows})
        extra = torch.cat([rows, torch.tensor([V - 1])]).unique()  # plus one zero-gradient row
        w_before = c.detach()[V - 1].clone()
        opt_c.step(rows={c: extra})
        if V - 1 not in rows:
            assert not torch.equal(c[V - 1], w_before)  # listed rows are stepped: decay at least
    assert torch.equal(a, b) and same_state(opt_a.state[a], opt_b.state[b])


def test_nonzero_rows_dense_and_sparse():
    g = torch.zeros(6, 3)
    g[1, 2] = -1.0
    g[3, 0] = float("nan")
    g[4, 1] = -0.0  # negative zero is zero
    g[5, 0] = 1e-45  # a denormal is not
    assert torch.equal(nonzero_rows(g), torch.tensor([1, 3, 5]))
    assert nonzero_rows(g).dtype == torch.int64
    s = torch.sparse_coo_tensor(torch.tensor([[4, 1, 4]]), torch.ones(3, 3), (6, 3), check_invariants=True)  # repeated
    assert torch.equal(nonzero_rows(s), torch.tensor([1, 4]))
    assert nonzero_rows(torch.zeros(0, 4)).numel() == 0 and nonzero_rows(torch.zeros(3, 0)).numel() == 0


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), ()])
def test_non_2d_parameter_raises(shape):
    with pytest.raises(ValueError, match=re.escape(str(tuple(shape)))):
        LazyRowAdamW([torch.nn.Parameter(torch.zeros(shape))])
    opt = LazyRowAdamW([torch.nn.Parameter(torch.zeros(2, 2))])
    with pytest.raises(ValueError):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(shape))]})
    assert len(opt.param_groups) == 1


def test_grad_none_is_skipped():
    p, q = torch.nn.Parameter(torch.ones(3, 2)), torch.nn.Parameter(torch.ones(3, 2))
    opt = LazyRowAdamW([p, q])
    p.grad = torch.ones(3, 2)
    opt.step()
    assert torch.equal(q, torch.ones(3, 2)) and q not in opt.state and opt.state[p]["step"].item() == 1


def test_state_dict_round_trip_continues_identically():
    gen = torch.Generator().manual_seed(4)
    V, D = 25, 4
    p = torch.nn.Parameter(torch.randn(V, D, generator=gen))
    opt = LazyRowAdamW([p], lr=1e-2, weight_decay=0.05)

    def grad():
        g = torch.zeros(V, D)
        rows = torch.randperm(V, generator=gen)[:6]
        g[rows] = torch.randn(6, D, generator=gen)
        return g

    for _ in range(3):
        p.grad = grad()
        opt.step()
    saved = copy.deepcopy(opt.state_dict())
    q = torch.nn.Parameter(p.detach().clone())
    opt2 = LazyRowAdamW([q], lr=1.0, weight_decay=0.0)  # the loaded groups restore the hyperparameters
    opt2.load_state_dict(saved)
    assert opt2.param_groups[0]["lr"] == 1e-2 and same_state(opt2.state[q], opt.state[p])
    for _ in range(2):
        p.grad = grad()
        q.grad = p.grad.clone()
        opt.step()
        opt2.step()
    assert torch.equal(p, q) and same_state(opt.state[p], opt2.state[q])
