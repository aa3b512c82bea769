"""Zen under the transformers Trainer's FSDP2 (accelerate's ``fsdp2_prepare_model``) on 2 forked gloo ranks that
the Trainer finds already set up.

On CPU ranks accelerate drops the FSDP plugin (its state stays ``MULTI_CPU``) and the Trainer trains DDP; the
``ZenFSDPTrainer`` refuses that at construction. To run the Trainer's FSDP2 path here anyway, :func:`_fsdp_on_cpu`
sets the state accelerate sets on GPU ranks (``DistributedType.FSDP`` and the plugin the Trainer built), after the
Trainer built its Accelerator; everything after that (the wrapping, the optimizer on DTensors, clipping, the full
state dict) is the libraries' own code. A few steps of the stock FSDP2 Trainer and of ``ZenFSDPTrainer`` (hashed
rows, Zen's reduce-scatter on the embedding's unit), same seed and data: the same per-step losses and, in the full
state dict the Trainer saves (the original row order), the same parameters within float rounding; and Zen's
reduce-scatter ran every step, pushing only the looked-up rows."""

import gc
import os
import tempfile

import pytest
import torch
from test_integrations import _as_external_cluster  # a sibling test module: pytest puts its folder on the path

from zen_analysis.config import ModelConfig
from zen_analysis.fsdp.hf_trainer import ZenFSDPTrainer
from zen_analysis.ranks.procs import fork_launch, free_port
from zen_analysis.workload.models import build_model

STEPS = 3
VOCAB = 1000
LENGTH = 9


def _fsdp_on_cpu(base: type) -> type:
    """``base`` whose Accelerator is switched to FSDP as accelerate switches it on GPU ranks (module docstring)."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    class OnCPU(base):
        def create_accelerator_and_postprocess(self) -> None:
            super().create_accelerator_and_postprocess()
            state = self.accelerator.state
            state.fsdp_plugin = FullyShardedDataParallelPlugin(**self.args.fsdp_plugin_args)
            state.distributed_type = PartialState._shared_state["distributed_type"] = DistributedType.FSDP
            self.is_fsdp_enabled = True

    return OnCPU


class _Recording:
    """Each step's loss as training_step returns it, and the rows Zen's reduce-scatter pushed in its backward."""

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        self.losses.append(float(loss))
        zen = getattr(self, "zen_state", None)
        if zen is not None:
            self.rows.append([rs.last["rows"] for rs in zen.reduce_scatters.values()])
        return loss


def _model():
    torch.manual_seed(0)
    cfg = ModelConfig(arch="llama", hidden_size=32, num_layers=1, num_heads=2)  # untied embeddings
    return build_model(cfg, vocab_size=VOCAB, max_seq_len=16)


def _rank(rank, world, port, tmp):
    _as_external_cluster(rank, world, port)
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule
    from transformers import Trainer, TrainingArguments

    tokens = torch.randint(0, VOCAB, (world * 4 * STEPS, LENGTH), generator=torch.Generator().manual_seed(1234))
    dataset = [{"input_ids": x, "labels": x} for x in tokens]

    def args(run: str) -> TrainingArguments:
        return TrainingArguments(
            output_dir=os.path.join(tmp, run),
            use_cpu=True,
            fsdp=True,
            fsdp_config={"version": 2},
            report_to=[],
            save_strategy="no",
            max_steps=STEPS,
            per_device_train_batch_size=4,
            optim="sgd",
            learning_rate=0.5,
            lr_scheduler_type="constant",
            seed=0,
            disable_tqdm=True,
            dataloader_pin_memory=False,
            remove_unused_columns=False,
        )

    out = {}
    try:  # what accelerate does on CPU ranks: the plugin dropped, DDP; Zen refuses rather than train it silently
        ZenFSDPTrainer(model=_model(), args=args("refused"), train_dataset=dataset)
    except RuntimeError as e:
        out["refused"] = str(e)
    for run, base in (("stock", Trainer), ("zen", ZenFSDPTrainer)):
        cls = type(f"Recording{base.__name__}", (_Recording, _fsdp_on_cpu(base)), {})
        trainer = cls(model=_model(), args=args(run), train_dataset=dataset)
        trainer.losses, trainer.rows = [], []
        trainer.train()
        units = [n for n, m in trainer.model.named_modules() if isinstance(m, FSDPModule)]
        full = trainer.accelerator.get_state_dict(trainer.model)  # what save_model writes; rank 0's
        out[run] = (torch.tensor(trainer.losses), {k: v.clone() for k, v in full.items()}, units)
        if run == "zen":
            zen = trainer.zen_state
            calls = {n: rs.calls for n, rs in zen.reduce_scatters.items()}
            out["zen_state"] = (calls, trainer.rows, zen.bytes_sent(), sorted(zen.hashed))
        del trainer
        gc.collect()
        dist.barrier()
    return out


def test_zen_fsdp_trainer_gives_the_stock_fsdp2_trainers_losses_and_parameters():
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    initial = _model().state_dict()
    with tempfile.TemporaryDirectory(prefix="zen-fsdp-hf-") as tmp:
        results = fork_launch(_rank, 2, free_port(), tmp, timeout_s=120)
    for rank, r in enumerate(results):
        assert "MULTI_CPU" in r["refused"] and "ZenTrainer" in r["refused"], r.get("refused")
        (loss_stock, sd_stock, units_stock), (loss_zen, sd_zen, units_zen) = r["stock"], r["zen"]
        assert "model.embed_tokens" in units_stock and units_zen == units_stock  # its own unit, accelerate's doing
        assert loss_stock.numel() == STEPS
        torch.testing.assert_close(loss_zen, loss_stock, rtol=1e-5, atol=1e-6)
        assert (rank == 0) == bool(sd_stock) and sd_zen.keys() == sd_stock.keys()
        for k in sd_stock:
            torch.testing.assert_close(sd_zen[k], sd_stock[k], rtol=1e-5, atol=1e-6, msg=k)
        if rank == 0:
            assert set(sd_stock) == set(initial)
            assert not torch.equal(sd_stock["model.embed_tokens.weight"], initial["model.embed_tokens.weight"])
        calls, rows, sent, hashed = r["zen_state"]
        assert calls == {"model.embed_tokens": STEPS} and hashed == ["model.embed_tokens"]
        assert all(0 < n <= 4 * LENGTH < VOCAB for (n,) in rows) and len(rows) == STEPS, rows  # looked-up rows only
        dense = STEPS * VOCAB // 2 * 32 * 4  # the rows a dense reduce-scatter sends to the other rank, fp32
        assert 0 < sent < dense / 10, (sent, dense)
