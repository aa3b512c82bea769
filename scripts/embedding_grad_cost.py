"""What a dense embedding gradient costs a CPU step, beside ``nn.Embedding(sparse=True)``: one process, no DDP, the
example script's word LSTM (``ddp_transformers.py --model lstm --size lstm-words``: a 69,071 x 256 table) on one
micro-batch, plain SGD, the two embeddings stepped alternately on the same batches.

    .venv/bin/python scripts/embedding_grad_cost.py                # 4 x 128 tokens, 20 steps each
    .venv/bin/python scripts/embedding_grad_cost.py --batch 32     # the recipe's 8 micro-batches

Then what AdamW's dense step over the model costs in torch's three implementations (the single-tensor loop, CPU
torch's default; ``foreach``; ``fused``, which the toolkit's loop takes: :func:`zen_analysis.train.optim.fused_adamw`)
and what placing the summed rows of a ``sparse=True`` gradient in a dense table costs, a new table a step against
the loop's reused one (:func:`zen_analysis.train.optim.densify_sparse_grads`).

Printed: the median seconds of forward, backward, optimizer step and zero_grad per variant and their difference. The
dense gradient is a 71 MB tensor backward zeroes and fills and SGD reads and writes whole; DDP also copies it into
its bucket (not timed here). This is why, on this CPU, Zen's drop-in on a dense ``.grad`` cannot match stock DDP's
``sparse=True`` step whatever the sum costs (docs/guide/your-training.md, "Against what PyTorch users already have").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=4, help="sequences per step (of the recipe's 128 tokens)")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).parent))
    from ddp_transformers import SIZES, WordLSTM

    from zen_analysis.workload.batches import TokenData, prepare

    recipe = SIZES["lstm-words"]()
    data = TokenData(prepare(recipe.data, progress=False), seq_len=recipe.train.seq_len, seed=recipe.train.seed)
    models = {}
    for name in ("dense", "sparse"):
        torch.manual_seed(0)
        model = WordLSTM(data.vocab_size, recipe.model)
        if name == "sparse":
            model.embed = torch.nn.Embedding(data.vocab_size, recipe.model.hidden_size, sparse=True)
        models[name] = (model, torch.optim.SGD(model.parameters(), lr=0.1))
    parts = {name: {"forward": [], "backward": [], "optimizer": [], "zero_grad": []} for name in models}
    for step in range(args.steps + 2):
        x, y = data.batch("train", step=step, worker=0, batch_size=args.batch)
        for name, (model, opt) in models.items():
            t0 = time.perf_counter()
            loss = model(input_ids=x, targets=y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            opt.zero_grad(set_to_none=True)  # as the example script
            t4 = time.perf_counter()
            if step >= 2:  # two warm-up steps
                for part, s in zip(parts[name], (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                    parts[name][part].append(s)
    print(
        f"{data.vocab_size} x {recipe.model.hidden_size} embedding, {args.batch} x 128 tokens, medians of {args.steps}:"
    )
    print(f"{'part':10s} {'dense (ms)':>11s} {'sparse (ms)':>12s} {'dense - sparse':>15s}")
    total = {name: 0.0 for name in models}
    for part in parts["dense"]:
        med = {name: 1e3 * statistics.median(parts[name][part]) for name in models}
        for name in models:
            total[name] += med[name]
        print(f"{part:10s} {med['dense']:11.1f} {med['sparse']:12.1f} {med['dense'] - med['sparse']:15.1f}")
    print(f"{'step':10s} {total['dense']:11.1f} {total['sparse']:12.1f} {total['dense'] - total['sparse']:15.1f}")
    adamw_and_densify(models["dense"][0], models["sparse"][0], data, args)


def adamw_and_densify(dense, sparse, data, args) -> None:
    """AdamW's dense step over ``dense``'s parameters per implementation; a ``sparse`` gradient made dense, a new
    table a step against one reused (medians of ``args.steps``, after 2)."""
    import torch

    from zen_analysis.train.optim import densify_sparse_grads

    def median_ms(fn) -> float:
        times = []
        for _ in range(args.steps + 2):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(times[2:])

    params = list(dense.parameters())
    for q in params:
        q.grad = torch.randn_like(q) * 1e-3
    numel = sum(q.numel() for q in params)
    print(f"AdamW's dense step over {numel / 1e6:.1f}M parameters (ms):")
    for name, kw in (("single-tensor", {"foreach": False}), ("foreach", {"foreach": True}), ("fused", {"fused": True})):
        opt = torch.optim.AdamW(params, lr=1e-4, **kw)
        print(f"  {name:14s} {median_ms(opt.step):8.1f}")
    x, y = data.batch("train", step=0, worker=0, batch_size=args.batch)
    sparse.zero_grad(set_to_none=True)
    sparse(input_ids=x, targets=y).backward()
    grad = sparse.embed.weight.grad
    weight, buffers = sparse.embed.weight, {}

    def made_dense(reuse: bool):
        weight.grad = grad
        densify_sparse_grads([weight], buffers=buffers if reuse else None)

    rows = grad.coalesce().indices().shape[1]
    print(f"a sparse=True gradient's {rows} rows in a dense table (ms):")
    print(f"  {'new table':14s} {median_ms(lambda: made_dense(False)):8.1f}")
    print(f"  {'reused':14s} {median_ms(lambda: made_dense(True)):8.1f}")


if __name__ == "__main__":
    main()
