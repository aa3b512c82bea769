"""A plain DDP training script with a transformers causal LM, and Zen dropped in with one call.

    torchrun --nproc-per-node 4 scripts/ddp_transformers.py --zen natural           # default size
    torchrun --nproc-per-node 2 scripts/ddp_transformers.py --size smoke --steps 5  # seconds

The model is a Llama (or ``--model gpt2``) built from config with an untied input embedding (its gradient is
row-sparse), the data the toolkit's default corpus (the Python standard library's source, tokenized locally: no
download). Everything here is stock PyTorch + transformers except ``register``: ``--zen natural`` sums the
embedding's gradient losslessly with Zen (the rest stays DDP's own all-reduce), ``--zen topk`` compresses every
bucket (DGC top-5%) and sums with Zen, ``--zen off`` is stock DDP. ``--sparse-embedding`` makes the input embedding
an ``nn.Embedding(sparse=True)`` (trained by ``SparseAdam``; stock DDP all-gathers it on gloo and cannot sum it on
NCCL). gloo on CPU, NCCL when every rank sees a GPU. ``--out`` writes rank 0's per-step losses, step times, bytes
and seconds as JSON.
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
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from zen_analysis import recipes
from zen_analysis.sync.ddp import register
from zen_analysis.wire.exchange import ring_bytes_sent
from zen_analysis.workload.data import TokenData, prepare

SIZES = {"smoke": recipes.smoke, "default": recipes.default}


def build(family: str, vocab_size: int, m, seq_len: int) -> torch.nn.Module:
    """A causal LM of the recipe's size, from config, with untied input and output embeddings."""
    if family == "gpt2":
        return GPT2LMHeadModel(
            GPT2Config(
                vocab_size=vocab_size,
                n_embd=m.hidden_size,
                n_layer=m.num_layers,
                n_head=m.num_heads,
                n_positions=seq_len,
                tie_word_embeddings=False,
                bos_token_id=0,
                eos_token_id=0,
            )
        )
    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=m.hidden_size,
            num_hidden_layers=m.num_layers,
            num_attention_heads=m.num_heads,
            num_key_value_heads=m.num_heads,
            intermediate_size=64 * round(8 * m.hidden_size / 3 / 64),
            max_position_embeddings=seq_len,
            tie_word_embeddings=False,
        )
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zen", choices=["natural", "topk", "off"], default="natural")
    p.add_argument("--model", choices=["llama", "gpt2"], default="llama")
    p.add_argument("--sparse-embedding", action="store_true", help="nn.Embedding(sparse=True) as input embedding")
    p.add_argument("--threshold", choices=["local", "global"], default="local", help="--zen topk: DGC threshold")
    p.add_argument("--overlap", action="store_true", help="--zen topk: sum on a worker thread during backward")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (its default: 25)")
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
    model = build(args.model, data.vocab_size, m, recipe.train.seq_len)
    if args.sparse_embedding:
        dense = model.get_input_embeddings()
        sparse = torch.nn.Embedding(dense.num_embeddings, dense.embedding_dim, sparse=True)
        sparse.weight.data.copy_(dense.weight.data)
        model.set_input_embeddings(sparse)
    model = DDP(model.to(device), device_ids=[device.index] if cuda else None, bucket_cap_mb=args.bucket_mb)
    kw = {"threshold": args.threshold, "overlap": args.overlap} if args.zen == "topk" else {}
    state = register(model, mode=args.zen, **kw) if args.zen != "off" else None
    embedding = model.module.get_input_embeddings().weight
    rest = [q for q in model.parameters() if q is not embedding]
    opts = [torch.optim.AdamW(rest if args.sparse_embedding else model.parameters(), lr=args.lr)]
    if args.sparse_embedding:
        opts.append(torch.optim.SparseAdam([embedding], lr=args.lr))
    numel = sum(q.numel() for q in model.parameters())
    # stock DDP's volume per step: a ring all-reduce of the dense gradients; a sparse embedding's rows all-gathered
    # (gloo sends each row's int64 index and values to every other rank)
    stock_bytes = ring_bytes_sent(numel - (embedding.numel() if args.sparse_embedding else 0), 4, world, rank)
    row_bytes = 8 + 4 * embedding.shape[1]

    rows, before = [], (0, 0, 0.0, 0.0)
    for step in range(args.steps):
        x, y = data.batch("train", step=step, worker=rank, batch_size=args.batch)
        t0 = time.perf_counter()
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        logits = model(input_ids=x.to(device), use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.to(device).reshape(-1))
        loss.backward()
        for opt in opts:
            opt.step()
        step_s = time.perf_counter() - t0
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        now = (
            getattr(state, "bytes_sent", 0) + getattr(state, "threshold_bytes_sent", 0),
            getattr(state, "allreduce_bytes_sent", 0),
            getattr(state, "sync_s", 0.0),
            getattr(state, "exposed_s", 0.0),
        )
        sparse_b, dense_b, sync_s, exposed_s = (a - b for a, b in zip(now, before))
        before = now
        if state is None:
            dense_b = stock_bytes
            sparse_b = (world - 1) * row_bytes * int(x.unique().numel()) if args.sparse_embedding else 0
        rows.append(
            {
                "step": step,
                "loss": mean.item() / world,
                "step_s": step_s,
                "sparse_bytes": sparse_b,
                "dense_bytes": dense_b,
                "bytes": sparse_b + dense_b,
                "sync_s": sync_s,
                "exposed_s": exposed_s,
            }
        )
        if rank == 0:
            print(f"step {step}: loss {rows[-1]['loss']:.4f}, {step_s:.3f} s, {rows[-1]['bytes']:,} B sent", flush=True)
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "zen": args.zen,
                    "model": args.model,
                    "sparse_embedding": args.sparse_embedding,
                    "threshold": args.threshold,
                    "overlap": args.overlap,
                    "ranks": world,
                    "backend": dist.get_backend(),
                    "parameters": numel,
                    "steps": rows,
                },
                f,
            )
    # the DDP model first, while the process group lives on: a Python comm hook's last asynchronous all-reduce may
    # still be releasing its tensors on gloo's worker thread, which needs the GIL, and a process group destroyed
    # with the model (the Reducer holds the last reference after destroy_process_group) joins that thread while
    # holding the GIL: a deadlock at exit
    del model, opts, state
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
