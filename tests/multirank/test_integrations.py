"""Zen's DDP hook where the framework builds DDP: PyTorch Lightning (``ZenDDPStrategy``) and the transformers
``Trainer`` (``ZenTrainer``), each on 2 forked gloo ranks that the framework finds already set up (an external
cluster: it spawns nothing). A few steps stock and with Zen's natural hook, same seed and data: the same per-step
losses and final parameters within float tolerance (the embedding's sums are added in another order), and the
hook's state shows the embedding went through Zen every step, so the test cannot pass with the hook absent."""

import gc
import os
import tempfile

import pytest
import torch
from torch import nn

from zen_analysis.ranks.procs import fork_launch, free_port

STEPS = 3
VOCAB = 300


def _as_external_cluster(rank: int, world: int, port: int) -> None:
    """What torchrun would have set: Lightning's environment then creates no processes (``LOCAL_RANK``) and
    accelerate takes the multi-CPU path (``WORLD_SIZE`` > 1); both keep the process group fork_launch made."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        NODE_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )


def _tokens(n: int, length: int = 9) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, length), generator=torch.Generator().manual_seed(1234))


def _params(module: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()]).clone()


def _lightning_rank(rank, world, port):
    _as_external_cluster(rank, world, port)
    import lightning.pytorch as pl
    import torch.distributed as dist
    from lightning.pytorch.strategies import DDPStrategy
    from torch.utils.data import DataLoader, TensorDataset

    from zen_analysis.sync.integrations import ZenDDPStrategy

    class LitLM(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 16)  # untied: its gradient is row-sparse
            self.hidden = nn.Linear(16, 16)
            self.head = nn.Linear(16, VOCAB, bias=False)
            self.losses = []

        def training_step(self, batch, batch_idx):
            (x,) = batch
            logits = self.head(torch.tanh(self.hidden(self.embed(x[:, :-1]))))
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    data = TensorDataset(_tokens(world * 4 * STEPS))  # Lightning's DistributedSampler gives each rank its half
    out = {}
    for run in ("stock", "zen"):
        torch.manual_seed(0)
        model = LitLM()
        out.setdefault("initial", _params(model))
        strategy = ZenDDPStrategy(mode="natural", scheme="zen") if run == "zen" else DDPStrategy()
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=world,
            strategy=strategy,
            max_steps=STEPS,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        assert trainer.world_size == world and trainer.global_rank == rank
        trainer.fit(model, train_dataloaders=DataLoader(data, batch_size=4))
        out[run] = (torch.tensor(model.losses), _params(model))
        if run == "zen":
            s = strategy.zen_state
            out["state"] = (s.sparse_buckets, s.step, s.bytes_sent)
        del trainer, strategy, model
        gc.collect()  # the DDP model goes before fork_launch destroys the process group
        dist.barrier()
    return out


def test_lightning_zen_strategy_gives_stock_ddp_losses_and_parameters():
    pytest.importorskip("lightning")
    for r in fork_launch(_lightning_rank, 2, free_port(), timeout_s=90):
        (loss_zen, p_zen), (loss_stock, p_stock) = r["zen"], r["stock"]
        assert loss_stock.numel() == STEPS
        torch.testing.assert_close(loss_zen, loss_stock, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(p_zen, p_stock, rtol=1e-5, atol=1e-6)
        assert not torch.equal(p_stock, r["initial"])  # it trained
        sparse_buckets, steps, sent = r["state"]
        assert sparse_buckets == STEPS and steps == STEPS and sent > 0  # the embedding went through Zen every step


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg)


def _hf_rank(rank, world, port, tmp):
    _as_external_cluster(rank, world, port)
    import torch.distributed as dist
    from transformers import Trainer, TrainingArguments

    from zen_analysis.sync.integrations import ZenTrainer

    class Recording:
        """Each step's loss as training_step returns it (the logged loss is averaged over logging steps)."""

        def training_step(self, *args, **kwargs):
            loss = super().training_step(*args, **kwargs)
            self.losses.append(float(loss))
            return loss

    dataset = [{"input_ids": x, "labels": x} for x in _tokens(world * 4 * STEPS)]
    out = {}
    for run in ("stock", "zen"):
        model = _llama()
        args = TrainingArguments(
            output_dir=os.path.join(tmp, run),
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            max_steps=STEPS,
            logging_steps=1,
            dataloader_num_workers=0,
            per_device_train_batch_size=4,
            optim="sgd",
            learning_rate=0.5,
            lr_scheduler_type="constant",
            seed=0,
            disable_tqdm=True,
            dataloader_pin_memory=False,
            remove_unused_columns=False,
        )
        base = ZenTrainer if run == "zen" else Trainer
        cls = type(f"Recording{base.__name__}", (Recording, base), {})
        extra = {"zen_mode": "natural", "zen_scheme": "zen"} if run == "zen" else {}
        trainer = cls(model=model, args=args, train_dataset=dataset, **extra)
        trainer.losses = []
        trainer.train()
        assert args.world_size == world
        out[run] = (torch.tensor(trainer.losses), _params(model))
        if run == "zen":
            s = trainer.zen_state
            out["state"] = (s.sparse_buckets, s.step, s.bytes_sent, type(trainer.model_wrapped).__name__)
        del trainer, model
        gc.collect()  # the DDP model goes before fork_launch destroys the process group
        dist.barrier()
    return out


def test_hf_zen_trainer_gives_stock_trainer_losses_and_parameters():
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    initial = _params(_llama())
    with tempfile.TemporaryDirectory(prefix="zen-hf-") as tmp:
        results = fork_launch(_hf_rank, 2, free_port(), tmp, timeout_s=90)
    for r in results:
        (loss_zen, p_zen), (loss_stock, p_stock) = r["zen"], r["stock"]
        assert loss_stock.numel() == STEPS
        torch.testing.assert_close(loss_zen, loss_stock, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(p_zen, p_stock, rtol=1e-5, atol=1e-6)
        assert not torch.equal(p_stock, initial)  # it trained
        sparse_buckets, steps, sent, wrapped = r["state"]
        assert wrapped == "DistributedDataParallel"
        assert sparse_buckets == STEPS and steps == STEPS and sent > 0  # the embedding went through Zen every step


class _FakeTrainer:
    """What ZenTrainerMixin needs of a Trainer: ``args.world_size`` and a ``training_step``."""

    def __init__(self, world_size: int) -> None:
        self.args = type("Args", (), {"world_size": world_size})()

    def training_step(self, model, inputs):
        return "stepped"


def test_zen_trainer_fails_loudly_without_a_ddp_model_on_several_ranks():
    from zen_analysis.sync.integrations import ZenTrainerMixin

    class Trainer(ZenTrainerMixin, _FakeTrainer):
        pass

    with pytest.raises(RuntimeError, match="not a DistributedDataParallel"):
        Trainer(2).training_step(nn.Linear(2, 2), {})
    with pytest.warns(UserWarning, match="one process"):  # one process: nothing to sum, training goes on
        assert Trainer(1).training_step(nn.Linear(2, 2), {}) == "stepped"
    with pytest.raises(ValueError, match="mode must be"):
        Trainer(1, zen_mode="dense")


def _tied_rank(rank, world, port, tmp):
    """Both adapters on a model whose token table is tied to its head (a Lightning LM; the Trainer's GPT-2, whose
    other table is the position table wpe): warnings naming the tied weight, stock DDP, no Zen bytes."""
    _as_external_cluster(rank, world, port)
    import warnings

    import lightning.pytorch as pl
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset
    from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

    from zen_analysis.sync.integrations import ZenDDPStrategy, ZenTrainer

    class TiedLM(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 16)
            self.head = nn.Linear(16, VOCAB, bias=False)
            self.head.weight = self.embed.weight

        def training_step(self, batch, batch_idx):
            (x,) = batch
            return nn.functional.cross_entropy(
                self.head(self.embed(x[:, :-1])).reshape(-1, VOCAB), x[:, 1:].reshape(-1)
            )

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy = ZenDDPStrategy(mode="natural")
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=world,
            strategy=strategy,
            max_steps=2,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(TiedLM(), train_dataloaders=DataLoader(TensorDataset(_tokens(world * 8)), batch_size=4))
    out["lightning"] = (strategy.zen_state.summary(), [str(w.message) for w in caught])
    del trainer, strategy
    gc.collect()
    dist.barrier()
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=1, n_head=2, n_positions=16))
    args = TrainingArguments(
        output_dir=tmp,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        max_steps=2,
        per_device_train_batch_size=4,
        disable_tqdm=True,
        dataloader_pin_memory=False,
        remove_unused_columns=False,
    )
    dataset = [{"input_ids": x, "labels": x} for x in _tokens(world * 8)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = ZenTrainer(model=gpt2, args=args, train_dataset=dataset)
        trainer.train()
    out["trainer"] = (trainer.zen_state.summary(), [str(w.message) for w in caught])
    del trainer, gpt2
    gc.collect()
    dist.barrier()
    return out


def test_both_adapters_leave_a_tied_model_to_stock_ddp_with_a_warning():
    """Before: Lightning crashed ("natural mode found no untied nn.Embedding"), the Trainer summed GPT-2's position
    table wpe with Zen and reported its bytes."""
    pytest.importorskip("lightning")
    with tempfile.TemporaryDirectory(prefix="zen-tied-") as tmp:
        results = fork_launch(_tied_rank, 2, free_port(), tmp, timeout_s=120)
    for r in results:
        for adapter, tied in (("lightning", "embed.weight"), ("trainer", "transformer.wte.weight")):
            report, caught = r[adapter]
            assert any(m.startswith(f"{tied} is tied to") for m in caught), (adapter, caught)
            assert any("stays stock DDP" in m for m in caught), (adapter, caught)
            assert not report["hooked"] and report["sparse_names"] == () and report["bytes_sent"] == 0, report
        assert "transformer.wpe.weight" in r["trainer"][0]["left_dense"]  # dense by nature, never Zen's


_LAUNCHER = """
import json, sys
import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from zen_analysis.sync.integrations import ZenDDPStrategy

class LitLM(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(300, 16)
        self.head = nn.Linear(16, 300)
    def training_step(self, batch, batch_idx):
        (x,) = batch
        return nn.functional.cross_entropy(self.head(self.embed(x[:, :-1])).reshape(-1, 300), x[:, 1:].reshape(-1))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

if __name__ == "__main__":
    tokens = torch.randint(0, 300, (16, 9), generator=torch.Generator().manual_seed(1))
    strategy = ZenDDPStrategy(mode="natural", start_method=sys.argv[1])
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=2, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(LitLM(), train_dataloaders=DataLoader(TensorDataset(tokens), batch_size=4))
    print("REPORT " + json.dumps(strategy.zen_state.summary()))
"""


def test_the_process_that_launched_lightnings_ranks_gets_rank_0s_report(tmp_path):
    """ZenDDPStrategy(start_method="fork"), Lightning's own launcher starting the ranks: the state lives in them;
    before, the launching process's zen_state was None, silently. "spawn" goes through the same launcher (its
    report pickled back alike; measured by hand, 40 s here, too slow for the suite)."""
    pytest.importorskip("lightning")
    import json
    import subprocess
    import sys

    script = tmp_path / "launch.py"
    script.write_text(_LAUNCHER)
    proc = subprocess.run([sys.executable, str(script), "fork"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.split("REPORT ", 1)[1])
    assert report["hooked"] and report["step"] == 2 and report["bytes_sent"] > 0
    assert report["sparse_names"] == ["embed.weight"] and report["mode"] == "natural"


def test_the_lazy_classes_show_in_dir_and_help_without_importing_their_frameworks():
    import pydoc
    import subprocess
    import sys

    code = (
        "import sys, zen_analysis.sync.integrations as m\n"
        "names = dir(m)\n"
        "assert 'lightning' not in sys.modules and 'transformers.trainer' not in sys.modules\n"
        "print(' '.join(n for n in m.__all__ if n in names))"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert shown.stdout.split() == ["ZenDDPStrategy", "ZenTrainer", "ZenTrainerMixin", "find_ddp"], shown.stderr
    import zen_analysis.sync.integrations as m

    text = pydoc.render_doc(m, renderer=pydoc.plaintext)
    assert "class ZenDDPStrategy" in text and "class ZenTrainer(" in text
