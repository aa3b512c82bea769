"""Zen in torchtitan: its debug Llama 3 sharded by torchtitan's own ``parallelize_llama`` (``apply_fsdp_to_decoder``)
on 2 gloo ranks, with the ModelSpec's ``parallelize_fn`` wrapped by :class:`~zen_analysis.fsdp.titan.ZenParallelize`,
trains to stock's losses and parameters; hashed rows with the sparse all-gather too, once it starts from stock's
table. Skipped where torchtitan is not installed (``make test-titan`` installs it in its own venv).

Tolerance: none, the runs agree to the bit. Stock's reduce-scatter and Zen's sum the same two float32 rows per row
(a + b rounds alike in either order), every other unit is stock's, and each rank runs one thread.

The spmd_backend is ``"partial_dtensor"`` (plain FSDP2; :mod:`~zen_analysis.fsdp.titan` says why not 0.3.0's default).
"""

import importlib.util

import pytest
import torch
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from zen_analysis.fsdp.titan import TABLE, ZenParallelize, with_zen
from zen_analysis.ranks.procs import fork_launch

# each test skips, not the module: tests/test_layout.py checks that every test file is collected
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchtitan") is None, reason="torchtitan is not installed (make test-titan)"
)

STEPS, BATCH, SEQ = 3, 2, 32
RUNS = {"stock": None, "zen": {"hashed_rows": False}, "zen hashed + all-gather": {"all_gather": True}}


def _train(rank, world, zen):
    """(loss each step, every parameter in full and in the original row order after STEPS steps, what Zen
    installed)."""
    import torchtitan.distributed.parallel_dims as parallel_dims
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import model_registry

    parallel_dims.device_type = "cpu"  # torchtitan picks "cuda" when it finds no accelerator (tools.utils)
    spec = model_registry("debugmodel")
    for layer in spec.model.layers:  # flex attention compiles itself: minutes on CPU; the parallelize path is as is
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    parallelize = spec.parallelize_fn if zen is None else ZenParallelize(spec.parallelize_fn, **zen)
    parallelism = ParallelismConfig(spmd_backend="partial_dtensor")
    dims = ParallelDims.from_config(parallelism, world)
    dims.build_mesh()
    with torch.device("meta"):
        model = spec.model.build()
    model = parallelize(
        model,
        parallel_dims=dims,
        training=TrainingConfig(mixed_precision_param="float32", mixed_precision_reduce="float32"),
        parallelism=parallelism,
        compile_config=CompileConfig(),
        ac_config=None,
        dump_folder="",
    )
    for unit in model.modules():  # gloo has no PREMUL_SUM, torchtitan's op for its divide factor 1: the sum it is
        if isinstance(unit, FSDPModule):
            unit.set_force_sum_reduction_for_comms(True)
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    table = getattr(model, TABLE)
    if zen and zen.get("hashed_rows", True):  # the table as drawn, loaded in the original order: stock's start
        table.load_state_dict({"weight": table.weight.detach().clone()})
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4)
    losses = []
    for step in range(STEPS):
        x = torch.randint(0, 2048, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(100 * step + rank))
        logits = model(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    params = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in model.state_dict().items()}
    installed = None if zen is None else parallelize.installed
    return losses, params, installed and [z.reduce_scatters[TABLE].calls for z in installed]


def _all_runs(rank, world):
    return {name: _train(rank, world, zen) for name, zen in RUNS.items()}


def test_zen_in_torchtitans_parallelize_trains_to_stocks_losses_and_parameters():
    for rank_out in fork_launch(_all_runs, 2, timeout_s=240):
        stock_losses, stock_params, _ = rank_out["stock"]
        for name in ("zen", "zen hashed + all-gather"):
            losses, params, calls = rank_out[name]
            assert calls == [STEPS], (name, calls)  # one unit, Zen's reduce-scatter ran each step
            assert losses == stock_losses, name
            assert params.keys() == stock_params.keys()
            for k in params:
                assert torch.equal(params[k], stock_params[k]), f"{name}: {k} differs from stock's"


def test_with_zen_wraps_a_config_and_warns_on_a_tied_table_and_refuses_other_spmd_backends():
    from torchtitan.config import ParallelismConfig
    from torchtitan.models.llama3 import model_registry

    spec = model_registry("debugmodel")

    class _Config:  # torchtitan's Trainer.Config stand-in (its registry needs tensorboard): what with_zen touches
        model_spec, parallelism = spec, ParallelismConfig()

    wrapped = with_zen(_Config(), hashed_rows=False)
    assert isinstance(wrapped.model_spec.parallelize_fn, ZenParallelize)
    assert wrapped.model_spec.parallelize_fn.inner is spec.parallelize_fn
    assert wrapped.parallelism.spmd_backend == "partial_dtensor"
    assert _Config.model_spec.parallelize_fn is spec.parallelize_fn  # the config given is left as it was
    assert _Config.parallelism.spmd_backend == "spmd_types"

    calls = []
    tied = torch.nn.Module()
    tied.tok_embeddings, tied.enable_weight_tying = torch.nn.Embedding(4, 2), True
    with pytest.warns(UserWarning, match="tied"):
        ZenParallelize(lambda m, **kw: calls.append(m) or m)(tied)
    assert calls == [tied]
    with pytest.raises(ValueError, match="partial_dtensor"):
        ZenParallelize(spec.parallelize_fn)(tied, parallelism=ParallelismConfig())  # 0.3.0's default: spmd_types
