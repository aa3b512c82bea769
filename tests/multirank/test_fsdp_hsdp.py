"""Zen under HSDP (2 replicas x 2 shards on 4 gloo ranks): the embedding unit on the shard sub-mesh with Zen's
reduce-scatter and Zen's replica sum, the other units stock HSDP on the 2-D mesh, gives stock HSDP's shard gradients
after every step and its parameters after 5 steps, bit for bit on integer-valued gradients (fp32, bf16 and fp16
reduce dtypes, a factor set, sums forced, gradient accumulation without the replica sum) and within float rounding
on a language model's, gradients clipped; both sparse collectives send less than stock's dense ones."""

import torch
from test_fsdp import _LM, STEPS, VOCAB, _Integer  # a sibling test module: pytest puts its folder on the path
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from zen_analysis.fsdp.hsdp import clip_grad_norm_, shard_embedding_hsdp
from zen_analysis.ranks.procs import fork_launch

REPLICAS, SHARDS = 2, 2


def _sharded(model, zen, reduce_dtype, divide):
    """``model`` sharded for HSDP, stock or with Zen on its table, with the division ``divide`` (factor, forced
    sums) set as a user sets it on stock HSDP units; returns Zen's handle or None."""
    mesh = init_device_mesh("cpu", (REPLICAS, SHARDS), mesh_dim_names=("replicate", "shard"))
    mp = MixedPrecisionPolicy(reduce_dtype=reduce_dtype)
    if zen:
        handle = shard_embedding_hsdp(model.embed, mesh, mp_policy=mp, name="embed")
    else:
        handle = None
        fully_shard(model.embed, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    factor, force_sum = divide
    # gloo has no PREMUL_SUM: stock units sum and divide after; Zen's reduce-scatter takes the PREMUL_SUM
    for unit in (model,) if zen else (model, model.embed):
        if factor is not None:
            unit.set_gradient_divide_factor(factor)
        unit.set_force_sum_reduction_for_comms(force_sum or factor is not None)
    if zen:
        if factor is not None:
            handle.set_gradient_divide_factor(factor)
        handle.set_force_sum_reduction_for_comms(force_sum)
    return handle


def _train(rank, model_cls, reduce_dtype, divide, micro, zen):
    """(table shard gradient each step, every parameter's shard after STEPS steps, grad norms, Zen's handle's
    counts)."""
    torch.manual_seed(0)
    model = model_cls()
    handle = _sharded(model, zen, reduce_dtype, divide)
    opt = torch.optim.SGD(model.parameters(), lr=1.0 if model_cls is _Integer else 0.5)
    grads, norms = [], []
    for step in range(STEPS):
        for m in range(micro):  # accumulation: the replica sum on the last micro-batch only, as stock HSDP allows
            model.set_requires_all_reduce(m == micro - 1)
            gen = torch.Generator().manual_seed(100 * step + 10 * m + rank)
            model(torch.randint(0, VOCAB, (4, 9), generator=gen), step).backward()
        grads.append(model.embed.weight.grad.to_local().clone())
        if model_cls is _LM:
            clip = clip_grad_norm_ if zen else torch.nn.utils.clip_grad_norm_
            norms.append(float(clip(model.parameters(), 0.5)))
        opt.step()
        opt.zero_grad()
    params = [p.to_local().detach().clone() for p in model.parameters()]
    counts = None
    if handle is not None:
        counts = (handle.reduce_scatter_bytes(), handle.replica_bytes(), handle.dense_bytes_per_step(), handle.calls)
    return grads, params, norms, counts


def _both(rank, world, cases):
    return [[_train(rank, *case, zen) for zen in (False, True)] for case in cases]


AVG = (None, False)
CASES = [
    # (model, reduce dtype, (divide factor, forced sums) as set on stock HSDP, micro-batches a step)
    (_Integer, None, AVG, 1),
    (_Integer, torch.bfloat16, AVG, 1),
    (_Integer, torch.float16, AVG, 1),  # fp16: divided before and after, both collectives sum
    (_Integer, None, (None, True), 1),  # sums forced: summed, then divided by R x S
    (_Integer, None, (3.0, True), 1),
    (_Integer, None, (8.0, False), 1),  # Zen's reduce-scatter PREMUL_SUM(1/8); stock on gloo sums, then divides
    (_Integer, None, AVG, 2),
    (_LM, None, AVG, 1),
    (_LM, torch.bfloat16, AVG, 1),
]


def test_zen_hsdp_gives_stock_hsdp_gradients_and_parameters():
    world = REPLICAS * SHARDS
    for rank_out in fork_launch(_both, world, CASES, timeout_s=240):
        for (model_cls, reduce_dtype, divide, micro), (stock, ours) in zip(CASES, rank_out):
            what = f"{model_cls.__name__} reduce={reduce_dtype} divide={divide} micro={micro}"
            (g_s, p_s, n_s, _), (g_z, p_z, n_z, (rs_bytes, replica_bytes, dense, calls)) = stock, ours
            if model_cls is _Integer:
                for step, (a, b) in enumerate(zip(g_z, g_s)):
                    assert torch.equal(a, b), f"{what}: step {step}'s shard gradient differs"
                for a, b in zip(p_z, p_s):
                    assert torch.equal(a, b), f"{what}: parameters after {STEPS} steps differ"
            else:
                tol = {"rtol": 2e-2, "atol": 1e-4} if reduce_dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-7}
                for a, b in zip(g_z + p_z, g_s + p_s):
                    torch.testing.assert_close(a, b, **tol, msg=what)
                torch.testing.assert_close(torch.tensor(n_z), torch.tensor(n_s), **tol, msg=what)
            assert calls == STEPS, (what, calls)  # one replica sum a step, micro-batches or not
            # 36 ids a rank a micro-batch in a 1001 x 8 table: both sums carry rows, far below stock's dense ones
            assert 0 < rs_bytes < STEPS * micro * dense["reduce_scatter"] / 4, (what, rs_bytes, dense)
            assert 0 < replica_bytes < STEPS * dense["replica"] / 2, (what, replica_bytes, dense)
