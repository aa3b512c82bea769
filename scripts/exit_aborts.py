"""Count the runs whose exit aborts: a torchrun of a small Zen DDP program, R times, and how many ended non-zero.

    .venv/bin/python scripts/exit_aborts.py plain --ranks 8 --runs 100      # the README's script, sparse=True
    .venv/bin/python scripts/exit_aborts.py plain --ranks 4 --runs 100 --hooks natural,stock --load 2  # under load
    .venv/bin/python scripts/exit_aborts.py trainer --ranks 2 --runs 100    # ZenTrainer (transformers)
    .venv/bin/python scripts/exit_aborts.py lightning --ranks 2 --runs 100  # ZenDDPStrategy (Lightning)

Each run is ``torchrun --standalone --nproc-per-node <ranks> scripts/exit_aborts.py --worker <case>``: ``plain`` is
the README's complete script with an ``nn.Embedding(sparse=True)`` and ``register(model, mode="natural")``, ending
as the README says (``del model, state, opt``, then ``destroy_process_group()``); ``--teardown destroy`` only calls
``destroy_process_group()`` (the model still holding the group), ``--teardown none`` nothing at all (the process
group left to the interpreter's exit). ``trainer`` trains a 1-layer Llama with
``ZenTrainer`` and ``lightning`` a small LM with ``ZenDDPStrategy``, each ending as a user's script would, with no
teardown of its own. A run counts as an abort when torchrun exits non-zero; its stderr is searched for
``terminate called`` (the C++ runtime's message before SIGABRT) and ``SIGABRT``. Prints one line per run (a failed
one with what its stderr says) and a summary line per hook: ``case hook teardown ranks load runs failed terminate
sigabrt seconds``. ``--hooks natural,stock`` runs stock DDP (the same script, no ``register``) beside Zen's hook,
alternating, so both meet the same machine; ``--load N`` keeps N busy processes running beside them;
``--lab-nodes N`` runs each in the network lab (``zen-analysis netlab``: N nodes, one torchrun each, 1 Gbit/s).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VOCAB = 1000


def _plain(teardown: str, hook: str = "natural") -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from zen_analysis.sync.ddp import register

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Embedding(VOCAB, 32, sparse=True), nn.Linear(32, VOCAB)))
    state = register(model, mode="natural") if hook == "natural" else None
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(rank)
    for _ in range(10):
        tokens = torch.randint(0, VOCAB, (8, 17), generator=data)
        loss = nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"loss {loss.item():.3f}; Zen sent {state.bytes_sent if state else 0:,} bytes", flush=True)
    if teardown == "readme":
        del model, state, opt
        dist.destroy_process_group()
    elif teardown == "destroy":  # the process group destroyed while the DDP model still holds it
        dist.destroy_process_group()


def _trainer() -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, TrainingArguments

    from zen_analysis.sync.integrations import ZenTrainer

    torch.set_num_threads(1)
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
    tokens = torch.randint(0, VOCAB, (64, 9), generator=torch.Generator().manual_seed(1))
    out = tempfile.TemporaryDirectory(prefix="zen-exit-")  # removed at exit: the Trainer writes nothing there
    args = TrainingArguments(
        output_dir=out.name,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        max_steps=5,
        per_device_train_batch_size=4,
        disable_tqdm=True,
        dataloader_pin_memory=False,
        remove_unused_columns=False,
    )
    trainer = ZenTrainer(
        model=LlamaForCausalLM(cfg), args=args, train_dataset=[{"input_ids": x, "labels": x} for x in tokens]
    )
    trainer.train()
    if args.process_index == 0:
        print(f"Zen sent {trainer.zen_state.bytes_sent:,} bytes", flush=True)


def _lightning() -> None:
    import lightning.pytorch as pl
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from zen_analysis.sync.integrations import ZenDDPStrategy

    torch.set_num_threads(1)

    class LitLM(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 16)
            self.head = nn.Linear(16, VOCAB)

        def training_step(self, batch, batch_idx):
            (x,) = batch
            logits = self.head(self.embed(x[:, :-1]))
            return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB, (64, 9), generator=torch.Generator().manual_seed(1))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=int(os.environ["WORLD_SIZE"]),  # torchrun's ranks: Lightning joins them, starts none
        strategy=ZenDDPStrategy(mode="natural"),
        max_steps=5,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(LitLM(), train_dataloaders=DataLoader(TensorDataset(tokens), batch_size=4))
    if trainer.global_rank == 0:
        print(f"Zen sent {trainer.strategy.zen_state.bytes_sent:,} bytes", flush=True)


def _busy_loop() -> None:
    while True:
        pass


def _count(
    case: str, ranks: int, runs: int, teardown: str, timeout_s: float, hooks: list[str], load: int, lab_nodes: int
) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    # another job keeping the cores busy: where the aborts show (a rank's gloo thread descheduled past its exit)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    counts = {h: {"failed": 0, "terminate": 0, "sigabrt": 0} for h in hooks}
    t0 = time.perf_counter()
    try:
        for i in range(runs):
            for hook in hooks:  # side by side: the machine's load and speed are the same for both
                worker = [__file__, "--worker", case, "--teardown", teardown, "--hook", hook]
                if lab_nodes:  # one torchrun per lab node, over 1 Gbit/s links (zen-analysis netlab, as root)
                    cmd = [sys.executable, "-m", "zen_analysis", "netlab", "--set", f"nodes={lab_nodes}"]
                    cmd += ["--set", f"ranks_per_node={ranks // lab_nodes}", "--set", "bandwidth=1", "--", *worker]
                else:
                    cmd = [str(torchrun), "--standalone", f"--nproc-per-node={ranks}", *worker]
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
                    code, err = p.returncode, p.stderr
                except subprocess.TimeoutExpired as e:
                    code = "timeout"
                    err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
                c = counts[hook]
                if code != 0:
                    c["failed"] += 1
                    c["terminate"] += "terminate called" in err
                    c["sigabrt"] += "SIGABRT" in err
                    lines = err.splitlines()[-200:]
                    tail = " | ".join(line for line in lines if "terminate" in line or "Signal" in line)
                    print(f"run {i} {hook}: exit {code}: {tail[:400]}", flush=True)
                else:
                    print(f"run {i} {hook}: ok ({c['failed']} failed so far)", flush=True)
    finally:
        for h in hogs:
            h.kill()
    seconds = time.perf_counter() - t0
    for hook, c in counts.items():
        print(
            f"case={case} hook={hook} teardown={teardown} ranks={ranks} lab_nodes={lab_nodes} load={load} runs={runs} "
            f"failed={c['failed']} "
            f"terminate={c['terminate']} sigabrt={c['sigabrt']} seconds={seconds:.0f}",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", nargs="?", choices=["plain", "trainer", "lightning"], default="plain")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument(
        "--teardown", choices=["readme", "destroy", "none"], default="readme", help="plain: how the script ends"
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one run may take")
    p.add_argument(
        "--hooks", default="natural", help="plain: natural (Zen's hook), stock (stock DDP), or both: natural,stock"
    )
    p.add_argument("--load", type=int, default=0, help="busy processes kept running beside the runs (the cores' load)")
    p.add_argument(
        "--lab-nodes", type=int, default=0, help="run each in the network lab: this many nodes at 1 Gbit/s (root)"
    )
    p.add_argument("--hook", choices=["natural", "stock"], default="natural", help=argparse.SUPPRESS)
    p.add_argument("--worker", choices=["plain", "trainer", "lightning"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker == "plain":
        _plain(args.teardown, args.hook)
    elif args.worker == "trainer":
        _trainer()
    elif args.worker == "lightning":
        _lightning()
    else:
        hooks = args.hooks.split(",")
        if case_hooks_bad := [
            h for h in hooks if h not in ("natural", "stock") or (h == "stock" and args.case != "plain")
        ]:
            p.error(f"--hooks: {case_hooks_bad} (stock is the plain case's; choose natural, stock)")
        if args.lab_nodes and args.ranks % args.lab_nodes:
            p.error(f"--ranks {args.ranks} is not a multiple of --lab-nodes {args.lab_nodes}")
        _count(args.case, args.ranks, args.runs, args.teardown, args.timeout, hooks, args.load, args.lab_nodes)


if __name__ == "__main__":
    main()
