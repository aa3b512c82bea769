"""GradientCapture in one process: per-worker records are exact and training sees the same gradient."""

import torch

from zen_analysis.capture.hooks import GradientCapture, match_tensors
from zen_analysis.capture.traces import TraceReader, TraceWriter, write_manifest
from zen_analysis.config import CaptureConfig, ModelConfig
from zen_analysis.train.model import build_model, lm_loss

import pytest


def _model():
    torch.manual_seed(0)
    return build_model(ModelConfig(hidden_size=32, num_heads=2), vocab_size=300, max_seq_len=16)


def _batches(V):
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(0, 300, (2, 16), generator=gen) for _ in range(V)]


def test_records_sum_to_the_accumulated_gradient_and_training_is_unchanged(tmp_path):
    V = 3
    cfg = CaptureConfig(every=1, topk_tensors=("*layers.0.mlp.down_proj.weight",), topk_ratio=1.0, error_feedback=False)
    ref = _model()
    for x in _batches(V):
        (lm_loss(ref, x, x) / V).backward()

    model = _model()
    writer = TraceWriter(tmp_path, rank=0, run_id="t", world_size=1, steps_per_shard=1)
    cap = GradientCapture(cfg, model, writer, rank=0, seed=0)
    for v, x in enumerate(_batches(V)):
        with cap.worker(step=0, worker=v):
            (lm_loss(model, x, x) / V).backward()
    cap.end_step()
    cap.close()
    write_manifest(tmp_path, {"run_id": "t", "tensors": cap.tensor_info()})
    for p, q in zip(model.parameters(), ref.parameters()):  # the optimizer sees exactly the usual gradient
        assert torch.equal(p.grad, q.grad)

    params = dict(model.named_parameters())
    reader = TraceReader(tmp_path)
    assert reader.workers() == [0, 1, 2]
    for name in ("model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight"):
        total = torch.zeros_like(params[name])
        for rec in reader.records(tensor=name):
            total += rec.to_dense()
        torch.testing.assert_close(total, params[name].grad, rtol=1e-6, atol=1e-7)
    kinds = set(reader.summary()["kind"])
    assert kinds == {"natural", "topk"}
    emb = next(reader.records(tensor="model.embed_tokens.weight", worker=0))
    rows = set((emb.indices_K.long() // 32).tolist())
    assert rows == set(_batches(V)[0].unique().tolist())  # natural sparsity = the tokens the worker saw


def test_patterns_must_match_a_parameter():
    with pytest.raises(ValueError, match="matches no parameter"):
        match_tensors(_model(), ("*does_not_exist*",))


def test_train_runs_in_process_as_a_single_rank():
    """What a notebook does without the launcher: train(cfg) in the kernel, all workers in one process."""
    from zen_analysis import recipes
    from zen_analysis.capture.traces import TraceReader
    from zen_analysis.train.loop import train

    cfg = recipes.smoke()
    cfg.dist.num_ranks = 1
    cfg.train.num_steps = 2
    summary = train(cfg, log=lambda *a: None)
    assert summary["num_steps"] == 2 and summary["final_loss"] > 0
    reader = TraceReader(cfg.run_id)
    assert reader.manifest["finished"] and reader.workers() == [0, 1]
