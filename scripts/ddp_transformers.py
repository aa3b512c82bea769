"""A plain DDP training script with a transformers causal LM, and Zen dropped in with one call.

    torchrun --nproc-per-node 4 scripts/ddp_transformers.py --zen natural           # default size
    torchrun --nproc-per-node 2 scripts/ddp_transformers.py --size smoke --steps 5  # seconds

The model is a Llama built from config (untied input embedding: its gradient is row-sparse), the data the
toolkit's default corpus (the Python standard library's source, tokenized locally: no download). Everything here
is stock PyTorch + transformers except ``register``: ``--zen natural`` sums the embedding's gradient losslessly
with Zen (the rest stays DDP's own all-reduce), ``--zen topk`` compresses every bucket (DGC top-5%) and sums with
Zen, ``--zen off`` is stock DDP. gloo on CPU, NCCL when every rank sees a GPU. ``--out`` writes rank 0's per-step
losses, step times and bytes as JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import LlamaConfig, LlamaForCausalLM

from zen_analysis import recipes
from zen_analysis.train.data import TokenData, prepare
from zen_analysis.zen.ddp import register

SIZES = {"smoke": recipes.smoke, "default": recipes.default}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zen", choices=["natural", "topk", "off"], default="natural")
    p.add_argument("--size", choices=sorted(SIZES), default="default", help="model and data size of that recipe")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--out", help="write rank 0's per-step metrics here (JSON)")
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

    recipe = SIZES[args.size]()
    if rank == 0:  # tokenize once; the others read the cache
        prepare(recipe.data, progress=False)
    dist.barrier()
    data = TokenData(prepare(recipe.data, progress=False), seq_len=recipe.train.seq_len, seed=recipe.train.seed)

    m = recipe.model
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=data.vocab_size, hidden_size=m.hidden_size, num_hidden_layers=m.num_layers,
        num_attention_heads=m.num_heads, num_key_value_heads=m.num_heads,
        intermediate_size=64 * round(8 * m.hidden_size / 3 / 64), max_position_embeddings=recipe.train.seq_len,
        tie_word_embeddings=False,
    )).to(device)  # fmt: skip
    model = DDP(model, device_ids=[device.index] if cuda else None)
    state = register(model, mode=args.zen) if args.zen != "off" else None
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

    rows = []
    for step in range(args.steps):
        x, y = data.batch("train", step=step, worker=rank, batch_size=args.batch)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=x.to(device), use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.to(device).reshape(-1))
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        rows.append({"step": step, "loss": mean.item() / world, "step_s": time.perf_counter() - t0,
                     "zen_bytes_sent_so_far": getattr(state, "bytes_sent", 0)})  # fmt: skip
        if rank == 0:
            print(f"step {step}: loss {rows[-1]['loss']:.4f}, {rows[-1]['step_s']:.3f} s", flush=True)
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump({"zen": args.zen, "ranks": world, "backend": dist.get_backend(), "steps": rows}, f)
    # the DDP model first, while the process group lives on: a Python comm hook's last asynchronous all-reduce may
    # still be releasing its tensors on gloo's worker thread, which needs the GIL, and a process group destroyed
    # with the model (the Reducer holds the last reference after destroy_process_group) joins that thread while
    # holding the GIL: a deadlock at exit
    del model, opt, state
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
