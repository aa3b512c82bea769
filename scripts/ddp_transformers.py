"""A plain DDP training script with a transformers causal LM, and Zen dropped in with one call.

    torchrun --nproc-per-node 4 scripts/ddp_transformers.py --zen natural           # default size
    torchrun --nproc-per-node 2 scripts/ddp_transformers.py --size smoke --steps 5  # seconds
    torchrun --nproc-per-node 4 scripts/ddp_transformers.py --model lstm --size lstm-words  # the paper's LSTM
    torchrun --nproc-per-node 4 scripts/ddp_transformers.py --model deepfm --size deepfm --batch 1024  # its DeepFM

The model is a Llama (or ``--model gpt2``; or ``--model lstm``, a word-level LSTM LM in plain PyTorch on the
``lstm-words`` recipe's word vocabulary) built from config with an untied input embedding (its gradient is row-sparse),
the data the toolkit's default corpus (the Python standard library's source, tokenized locally: no download). ``--model
deepfm`` trains the paper's recommendation workload instead: the toolkit's DeepFM (one 1M x 17 table of field
embeddings) on its generated Criteo-like clicks, ``--batch`` samples a rank (the paper's is 1,024), as a user trains a
CTR model with a library's model class and their own DDP loop. Everything here is stock PyTorch + transformers except
``register``: ``--zen natural`` sums the embedding's gradient losslessly with Zen (the rest stays DDP's own all-reduce),
``--zen topk`` compresses every bucket (DGC top-5%) and sums with Zen, ``--zen off`` is stock DDP.
``--sparse-embedding`` makes the input embedding an ``nn.Embedding(sparse=True)`` (trained by ``SparseAdam``, or by the
one ``SGD`` with ``--optimizer sgd``; stock DDP all-gathers it on gloo and cannot sum it on NCCL). gloo on CPU, NCCL
when every rank sees a GPU. ``--out`` writes rank 0's per-step losses, step times, bytes and seconds as JSON.

What a DDP user already has, with ``--zen off``: ``--hook fp16`` / ``--hook bf16`` (torch's ``fp16_compress_hook`` /
``bf16_compress_hook``: every bucket cast to half width, divided by the ranks, all-reduced, cast back; DDP refuses to
register the bf16 one without CUDA and NCCL >= 2.10, but gloo sums bfloat16 on torch 2.13, so on gloo
:func:`bf16_by_hand` does the same arithmetic) and ``--hook powersgd --powersgd-rank N`` (torch's ``powerSGD_hook``,
plain all-reduce for the first ``--powersgd-start`` steps). PowerSGD's hook issues its second and third all-reduce
from inside future callbacks, which gloo runs on its worker threads: with two buckets or more the buckets' chains
issue their collectives in an order that differs between ranks (gloo then aborts, "collective mismatch", or pairs one
bucket's P with another's when the sizes agree) or block both worker threads in ``wait()`` (a hang). With one bucket
the chain is serial and runs; so on gloo ``--hook powersgd`` without ``--bucket-mb`` sets DDP's bucket cap to the
gradients' size (one bucket) and says so, and with more than one bucket it refuses to compress (exit 3 at the first
PowerSGD step, "unable to run here: ...") rather than hang.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from zen_analysis import recipes
from zen_analysis.sync.ddp import register
from zen_analysis.wire.exchange import ring_bytes_sent
from zen_analysis.workload import ctr as ctr_data
from zen_analysis.workload.batches import TokenData, prepare
from zen_analysis.workload.models import CTRInputs, DeepFM

SIZES = {
    "smoke": recipes.smoke,
    "default": recipes.default,
    "lstm-words": recipes.lstm_words,
    "deepfm": recipes.deepfm,
    "deepfm-smoke": recipes.deepfm_smoke,
}
FAMILIES = {"llama": "llama", "gpt2": "llama", "lstm": "lstm", "deepfm": "deepfm"}
"""Each ``--model``'s recipe architecture: its ``--size`` must be a recipe of that kind (an LM's or DeepFM's)."""


class WordLSTM(torch.nn.Module):
    """``--model lstm``: a word-level LSTM LM as a user writes it in plain PyTorch, the Zen paper's natural-sparsity
    workload: an embedding of the vocabulary, a 2-layer LSTM and an adaptive softmax (its cutoffs from the recipe;
    a full softmax without). ``model(input_ids=x, targets=y)`` returns the mean loss."""

    def __init__(self, vocab_size: int, m) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, m.hidden_size)
        self.lstm = torch.nn.LSTM(m.hidden_size, m.hidden_size, num_layers=m.num_layers, batch_first=True)
        cutoffs = [c for c in m.adaptive_cutoffs if c < vocab_size]
        self.adaptive = bool(cutoffs)
        if self.adaptive:
            self.head = torch.nn.AdaptiveLogSoftmaxWithLoss(m.hidden_size, vocab_size, cutoffs, div_value=4.0)
        else:  # a recipe without cutoffs (--size smoke): a full softmax
            self.head = torch.nn.Linear(m.hidden_size, vocab_size)

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.embed

    def set_input_embeddings(self, embedding: torch.nn.Embedding) -> None:
        self.embed = embedding

    def forward(self, input_ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.embed(input_ids))
        h = h.reshape(-1, h.shape[-1])
        if self.adaptive:
            return self.head(h, targets.reshape(-1)).loss
        return torch.nn.functional.cross_entropy(self.head(h), targets.reshape(-1))


UNABLE = "unable to run here: "
"""The line a variant that cannot run on this backend prints (then exit 3): the sweep reports it instead of a crash."""
UNABLE_EXIT = 3


class UnableHere(RuntimeError):
    """A variant this backend cannot run, found inside a hook (raised there, so every rank stops at the same step)."""


def bf16_by_hand(process_group, bucket) -> torch.futures.Future:
    """torch's ``bf16_compress_hook``'s arithmetic for gloo, which DDP does not let register torch's (it checks the
    hook's name for CUDA and NCCL): the bucket cast to bfloat16 and divided by the ranks (before the sum, as torch
    does), all-reduced, and the result copied back into the fp32 bucket. Returns the future DDP waits on."""
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    half = buffer.to(torch.bfloat16).div_(group.size())
    fut = dist.all_reduce(half, group=group, async_op=True).get_future()
    return fut.then(lambda f: buffer.copy_(f.value()[0]))


class HookBytes:
    """Torch's own DDP hook (``fp16``, ``bf16``, ``powersgd``) wrapped to count what it sends, bucket by bucket
    (:meth:`hook`):
    ``bytes_sent`` (rank's ring volume, cumulative) and ``buckets`` (buckets in the last step). The bytes come from
    the shapes, as torch's hooks decide them: fp16/bf16 one all-reduce of the bucket at 2 bytes; PowerSGD plain
    all-reduce before ``start_powerSGD_iter``, then three all-reduces (the uncompressed tensors, the Ps, the Qs) whose
    sizes follow its own rule (a gradient viewed as n x m is compressed iff (n + m) r x min_compression_rate < n m,
    r = min(n, m, rank))."""

    def __init__(self, kind: str, world: int, rank: int, state=None, gloo: bool = False):
        self.kind, self.world, self.rank, self.state, self.gloo = kind, world, rank, state, gloo
        self.bytes_sent, self.buckets, self._seen = 0, 0, 0

    def _ring(self, numel: int, width: int) -> int:
        return ring_bytes_sent(numel, width, self.world, self.rank)

    def hook(self, process_group, bucket):  # unannotated: DDP compares annotations as objects, not strings
        """The comm hook DDP calls per bucket (a bound method: DDP reads its name): torch's, its bytes counted."""
        self._seen += 1
        if self.kind in ("fp16", "bf16"):
            self.bytes_sent += self._ring(bucket.buffer().numel(), 2)
            hook = default_hooks.fp16_compress_hook
            if self.kind == "bf16":
                hook = bf16_by_hand if self.gloo else default_hooks.bf16_compress_hook
            fut = hook(process_group, bucket)
        else:
            s = self.state
            width = bucket.buffer().element_size()
            if s.iter < s.start_powerSGD_iter:
                self.bytes_sent += self._ring(bucket.buffer().numel(), width)
            else:
                if self.gloo and self.buckets > 1:
                    raise UnableHere(
                        f"{UNABLE}torch's powerSGD_hook on gloo with {self.buckets} DDP buckets: it issues each "
                        "bucket's P and Q all-reduces from callbacks on gloo's worker threads, in an order that "
                        "differs between ranks (collective mismatch) or with both threads blocked (a hang); "
                        "it runs with one bucket (a --bucket-mb at least the gradients' size) or on NCCL"
                    )
                uncompressed = ps = qs = 0
                for g in bucket.gradients():
                    n, m = g.view(g.shape[0], -1).shape
                    r = min(n, m, s.matrix_approximation_rank)
                    if (n + m) * r * s.min_compression_rate < n * m:
                        ps, qs = ps + n * r, qs + m * r
                    else:
                        uncompressed += g.numel()
                self.bytes_sent += sum(self._ring(k, width) for k in (uncompressed, ps, qs))
            fut = powerSGD_hook.powerSGD_hook(s, bucket)
        if bucket.is_last():
            self.buckets, self._seen = self._seen, 0
        return fut


def build(family: str, vocab_size: int, m, seq_len: int) -> torch.nn.Module:
    """A causal LM of the recipe's size, from config, with untied input and output embeddings."""
    if family == "lstm":
        return WordLSTM(vocab_size, m)
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
    p.add_argument(
        "--model",
        choices=sorted(FAMILIES),
        default="llama",
        help="lstm: with --size lstm-words; deepfm: with --size deepfm or deepfm-smoke",
    )
    p.add_argument("--sparse-embedding", action="store_true", help="nn.Embedding(sparse=True) as input embedding")
    p.add_argument("--threshold", choices=["local", "global"], default="local", help="--zen topk: DGC threshold")
    p.add_argument("--overlap", action="store_true", help="--zen topk: sum on a worker thread during backward")
    p.add_argument(
        "--bucket-mb", type=float, help="DDP's bucket_cap_mb (default 25, its own; --hook powersgd on gloo: one bucket)"
    )
    p.add_argument("--size", choices=sorted(SIZES), default="default", help="model and data size of that recipe")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw", help="sgd: one plain SGD for everything")
    p.add_argument(
        "--hook", choices=["none", "fp16", "bf16", "powersgd"], default="none", help="--zen off: torch's DDP hook"
    )
    p.add_argument("--powersgd-rank", type=int, default=1, help="--hook powersgd: matrix_approximation_rank")
    p.add_argument("--powersgd-start", type=int, default=2, help="--hook powersgd: start_powerSGD_iter (>= 2)")
    p.add_argument("--out", help="write rank 0's per-step metrics here (JSON)")
    args = p.parse_args()
    if args.hook != "none" and args.zen != "off":
        p.error(f"--hook {args.hook} is stock DDP's own compression: use it with --zen off (got --zen {args.zen})")
    if args.hook != "none" and args.sparse_embedding:
        p.error(f"--hook {args.hook} compresses dense buckets; a sparse=True embedding's bucket is sparse: drop one")
    deepfm_size = SIZES[args.size]().model.arch == "deepfm"
    if (args.model == "deepfm") != deepfm_size:
        p.error(f"--model {args.model} with --size {args.size}: DeepFM takes deepfm or deepfm-smoke, an LM the others")
    if args.hook == "powersgd" and (args.powersgd_rank < 1 or args.powersgd_start < 2):
        p.error("--powersgd-rank must be >= 1 and --powersgd-start >= 2 (torch's error feedback needs one plain step)")

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

    recipe = SIZES[args.size]()
    ctr = args.model == "deepfm"
    load = ctr_data.prepare if ctr else prepare
    if rank == 0:  # tokenize (or generate the clicks) once; the others read the cache
        load(recipe.data, progress=False)
    dist.barrier()
    if ctr:
        data = ctr_data.CTRData(load(recipe.data, progress=False), seed=recipe.train.seed)
    else:
        data = TokenData(load(recipe.data, progress=False), seq_len=recipe.train.seq_len, seed=recipe.train.seed)

    m = recipe.model
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    if ctr:
        model = DeepFM(num_rows=data.vocab_size, **data.input_dims, dim=m.hidden_size, mlp_sizes=m.mlp_sizes)
    else:
        model = build(args.model, data.vocab_size, m, recipe.train.seq_len)
    if args.sparse_embedding:
        dense = model.get_input_embeddings()
        sparse = torch.nn.Embedding(dense.num_embeddings, dense.embedding_dim, sparse=True)
        sparse.weight.data.copy_(dense.weight.data)
        if ctr:
            model.embed = sparse
        else:
            model.set_input_embeddings(sparse)
    gloo = not cuda
    bucket_mb = 25.0 if args.bucket_mb is None else args.bucket_mb
    if args.hook == "powersgd" and gloo and args.bucket_mb is None:  # PowerSGD's collectives in one order: 1 bucket
        bucket_mb = sum(q.numel() * q.element_size() for q in model.parameters()) / 2**20 + 1
        if rank == 0:
            print(f"gloo: PowerSGD in one DDP bucket ({bucket_mb:.1f} MB cap; --bucket-mb overrides)", flush=True)
    # an adaptive softmax leaves a tail cluster without gradient on a rank whose batch has no target in it (8 ranks
    # x 512 tokens do): DDP must then look for unused parameters, or that rank skips the cluster's bucket and the
    # ranks' collectives no longer match (gloo: "Received data size doesn't match expected size")
    unused = args.model == "lstm" and model.adaptive
    model = DDP(
        model.to(device),
        device_ids=[device.index] if cuda else None,
        bucket_cap_mb=bucket_mb,
        find_unused_parameters=unused,
    )
    kw = {"threshold": args.threshold, "overlap": args.overlap} if args.zen == "topk" else {}
    state = register(model, mode=args.zen, **kw) if args.zen != "off" else None
    hook = None
    if args.hook != "none":
        psgd = None
        if args.hook == "powersgd":
            psgd = powerSGD_hook.PowerSGDState(
                process_group=None,
                matrix_approximation_rank=args.powersgd_rank,
                start_powerSGD_iter=args.powersgd_start,
            )
        hook = HookBytes(args.hook, world, rank, psgd, gloo=gloo)
        model.register_comm_hook(None, hook.hook)
    embedding = model.module.get_input_embeddings().weight
    rest = [q for q in model.parameters() if q is not embedding]
    if args.optimizer == "sgd":  # plain SGD takes the sparse=True embedding's sparse gradient too
        opts = [torch.optim.SGD(model.parameters(), lr=args.lr)]
    else:
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
        if ctr:  # a click model: the logits of the batch's samples, their binary cross-entropy
            logits = model(CTRInputs(*(t.to(device) for t in x)))
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y.to(device))
        elif args.model == "lstm":
            loss = model(input_ids=x.to(device), targets=y.to(device))
        else:
            logits = model(input_ids=x.to(device), use_cache=False).logits
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.size(-1)).float(), y.to(device).reshape(-1)
            )
        try:
            loss.backward()
        except RuntimeError as exc:  # the hook's UnableHere, re-raised by DDP's reducer as a RuntimeError
            if UNABLE not in str(exc):
                raise
            reason = str(exc)[str(exc).index(UNABLE) :].splitlines()[0]
            if rank == 0:
                print(reason, flush=True)
            os._exit(UNABLE_EXIT)  # no teardown: the other ranks stop at the same bucket, the group is unusable
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
        if hook is not None:
            now = (0, hook.bytes_sent, 0.0, 0.0)
        sparse_b, dense_b, sync_s, exposed_s = (a - b for a, b in zip(now, before))
        before = now
        if state is None and hook is None:
            dense_b = stock_bytes
            ids = x.ids_BF if ctr else x
            sparse_b = (world - 1) * row_bytes * int(ids.unique().numel()) if args.sparse_embedding else 0
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
                    "hook": args.hook,
                    "powersgd_rank": args.powersgd_rank if args.hook == "powersgd" else None,
                    "optimizer": args.optimizer,
                    "bucket_mb": bucket_mb,
                    "buckets": hook.buckets if hook is not None else None,
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
    del model, opts, state, hook
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
