"""GradientCapture in one process: per-worker records are exact and training sees the same gradient."""

import pytest
import torch

from zen_analysis.capture.hooks import GradientCapture, match_tensors
from zen_analysis.capture.reader import TraceReader
from zen_analysis.capture.traces import TraceWriter, write_manifest
from zen_analysis.config import CaptureConfig, ModelConfig
from zen_analysis.workload.models import build_model, lm_loss


def _model():
    torch.manual_seed(0)
    return build_model(ModelConfig(hidden_size=32, num_heads=2), vocab_size=300, max_seq_len=16)


def _batches(V):
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(0, 300, (2, 16), generator=gen) for _ in range(V)]


def _capture_step(cfg, tmp_path, V=3, build=None):
    model = (build or _model)()
    writer = TraceWriter(tmp_path, rank=0, run_id="t", world_size=1, steps_per_shard=1)
    cap = GradientCapture(cfg, model, writer, rank=0, seed=0)
    for v, x in enumerate(_batches(V)):
        with cap.worker(step=0, worker=v):
            (lm_loss(model, x, x) / V).backward()
    cap.end_step()
    cap.close()
    write_manifest(tmp_path, {"run_id": "t", "tensors": cap.tensor_info()})
    return model, cap, TraceReader(tmp_path)


def test_records_sum_to_the_accumulated_gradient_and_training_is_unchanged(tmp_path):
    V = 3
    cfg = CaptureConfig(
        every=1,
        topk_scope="tensor",
        topk_tensors=("*layers.0.mlp.down_proj.weight",),
        topk_ratio=1.0,
        error_feedback=False,
    )
    ref = _model()
    for x in _batches(V):
        (lm_loss(ref, x, x) / V).backward()

    model, _, reader = _capture_step(cfg, tmp_path, V)
    for p, q in zip(model.parameters(), ref.parameters()):  # the optimizer sees exactly the usual gradient
        assert torch.equal(p.grad, q.grad)

    params = dict(model.named_parameters())
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


def test_buckets_hold_every_parameter_once_in_ddp_order_and_sum_to_the_gradient(tmp_path):
    """Bucket scope: the buckets are consecutive runs of the parameters in reverse registration order, each closed
    at the cap; with nothing dropped, the workers' bucket records sum to the concatenated accumulated gradient."""
    cfg = CaptureConfig(every=1, topk_scope="bucket", bucket_mb=0.02, topk_ratio=1.0, error_feedback=False)
    model, cap, reader = _capture_step(cfg, tmp_path)
    names = [n for n, _ in model.named_parameters()]
    buckets = {t: i for t, i in reader.manifest["tensors"].items() if "params" in i}
    assert len(buckets) > 2 and list(buckets) == sorted(buckets)
    flat_order = [p[0] for b in buckets.values() for p in b["params"]]
    assert flat_order == names[::-1]  # every parameter once, last-registered first
    params = dict(model.named_parameters())
    for bname, info in buckets.items():
        parts = info["params"]
        assert (
            parts[0][1] == 0 and all(a[2] == b[1] for a, b in zip(parts, parts[1:])) and parts[-1][2] == info["numel"]
        )
        size = sum(params[n].numel() for n, _, _ in parts) * 4
        without_last = size - params[parts[-1][0]].numel() * 4
        assert without_last < cfg.bucket_mb * 2**20 and (size >= cfg.bucket_mb * 2**20 or bname == list(buckets)[-1])
        total = torch.zeros(info["numel"])
        for rec in reader.records(tensor=bname):
            assert rec.kind == "topk" and rec.shape == (info["numel"],)
            total += rec.to_dense()
        expect = torch.cat([params[n].grad.reshape(-1) for n, _, _ in parts])
        torch.testing.assert_close(total, expect, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("threshold", ["local", "global"])
def test_a_global_threshold_is_one_cut_across_workers(tmp_path, threshold):
    """Global: every value a worker sends is at least as large as anything any worker keeps back (one threshold per
    bucket from the pooled samples); local thresholds differ per worker, so that fails somewhere."""
    cfg = CaptureConfig(every=1, topk_scope="bucket", bucket_mb=0.05, topk_ratio=0.05, topk_threshold=threshold)
    _, cap, reader = _capture_step(cfg, tmp_path, V=4)
    crossings = []
    for b in cap.buckets:
        recs = list(reader.records(tensor=b.name))
        assert len(recs) == 4
        sent_min = min(float(r.values_K.abs().min()) for r in recs if r.nnz)
        kept_back_max = max(float(cap.compressor._residuals[(r.worker, b.name)].abs().max()) for r in recs)
        crossings.append(sent_min < kept_back_max)
        total = sum(r.nnz for r in recs)
        assert 0.5 * 0.05 * 4 * b.numel < total < 2.0 * 0.05 * 4 * b.numel
    assert not any(crossings) if threshold == "global" else any(crossings)


def test_bucket_scope_needs_no_patterns_and_global_needs_buckets():
    with pytest.raises(ValueError, match="topk_scope=bucket"):
        CaptureConfig(topk_scope="tensor", topk_threshold="global")
    with pytest.raises(ValueError, match="topk_scope"):
        CaptureConfig(topk_scope="layer")


def test_patterns_must_match_a_parameter():
    with pytest.raises(ValueError, match="matches no parameter"):
        match_tensors(_model(), ("*does_not_exist*",))


def test_train_runs_in_process_as_a_single_rank():
    """What a notebook does without the launcher: train(cfg) in the kernel, all workers in one process."""
    from zen_analysis import recipes
    from zen_analysis.capture.reader import TraceReader
    from zen_analysis.train.loop import train

    cfg = recipes.smoke()
    cfg.dist.num_ranks = 1
    cfg.train.num_steps = 2
    summary = train(cfg, log=lambda *a: None)
    assert summary["num_steps"] == 2 and summary["final_loss"] > 0
    reader = TraceReader(cfg.run_id)
    assert reader.manifest["finished"] and reader.workers() == [0, 1]


@pytest.mark.parametrize(
    ("mode", "compress", "kinds"),
    [
        ("sent", "topk", {"pseudo_topk"}),  # what a worker sends: its selection
        ("sent", "natural", {"pseudo"}),  # the whole pseudo-gradient is what is summed
        ("sent", "none", {"pseudo"}),
        ("all", "topk", {"pseudo", "pseudo_topk"}),
    ],
)
def test_pseudo_gradient_capture_records_the_kinds_its_mode_names_one_store_step_per_sync(
    tmp_path, mode, compress, kinds
):
    from zen_analysis.capture.pseudo import PseudoGradientCapture

    writer = TraceWriter(tmp_path, rank=1, run_id="pseudo", world_size=2, steps_per_shard=10)
    layout = [("root", [("embed.weight", 6), ("norm.weight", 2)], True), ("blocks.0", [("blocks.0.w", 4)], False)]
    cap = PseudoGradientCapture(writer, rank=1, mode=mode, compress=compress, topk_ratio=0.25, layout=layout)
    info = cap.tensor_info()
    assert {i["kind"] for i in info.values()} == kinds
    assert {t.split("/", 1)[1] for t in info} == {"root", "blocks.0"}
    root = next(i for t, i in info.items() if t.endswith("/root"))
    assert (
        root["numel"] == 8 and root["params"] == [["embed.weight", 0, 6], ["norm.weight", 6, 8]] and root["embedding"]
    )
    flat = torch.tensor([0.0, 1.5, 0.0, -2.0, 0.0, 0.0, 3.0, 0.0])
    for step in (5, 9):
        for kind in ("pseudo", "pseudo_topk"):  # the engine offers both; the mode keeps what it names
            cap.record(kind, step=step, group="root", flat_N=flat)
        cap.end_sync()
        cap.end_sync()  # a step without records closes nothing
    writer.close()
    write_manifest(tmp_path, {"run_id": "pseudo", "tensors": info})
    reader = TraceReader(tmp_path)
    recs = list(reader.records())
    assert {r.kind for r in recs} == kinds and {r.step for r in recs} == {5, 9} and {r.worker for r in recs} == {1}
    assert all(r.indices_K.tolist() == [1, 3, 6] and r.values_K.tolist() == [1.5, -2.0, 3.0] for r in recs)
    with pytest.raises(ValueError, match="sent or all"):
        PseudoGradientCapture(writer, rank=1, mode="off", compress=compress, topk_ratio=0.25, layout=layout)


def _sparse_model():
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_heads=2, sparse_embedding=True)
    return build_model(cfg, vocab_size=300, max_seq_len=16)


@pytest.mark.parametrize("scope", ["tensor", "bucket"])
def test_a_sparse_embedding_gradient_is_captured_as_the_dense_one(tmp_path, scope):
    """``model.sparse_embedding``: the natural records of the sparse COO gradient (coalesced) hold the dense run's
    indices, and its values up to the order backward summed a row's repeated ids in; the gradient training sees is
    the dense one's, still sparse; the top-k buckets read it placed densely."""
    V = 3
    cfg = CaptureConfig(every=1, topk_scope=scope, topk_tensors=("*layers.0.mlp.down_proj.weight",), bucket_mb=0.05)
    runs = {}
    for label, build in (("dense", _model), ("sparse", _sparse_model)):
        model, _, reader = _capture_step(cfg, tmp_path / label, V, build)
        runs[label] = (model, {(r.worker, r.tensor): r for r in reader.records()})
    (dense, dense_recs), (sparse, sparse_recs) = runs["dense"], runs["sparse"]
    emb = "model.embed_tokens.weight"
    assert sparse.model.embed_tokens.weight.grad.is_sparse
    assert dense_recs.keys() == sparse_recs.keys() and (0, emb) in dense_recs
    for key, rec in dense_recs.items():
        other = sparse_recs[key]
        assert torch.equal(rec.indices_K, other.indices_K), key
        torch.testing.assert_close(other.values_K, rec.values_K, rtol=1e-6, atol=1e-9, msg=str(key))
    for (name, p), q in zip(dense.named_parameters(), sparse.parameters()):
        torch.testing.assert_close(q.grad.to_dense(), p.grad, rtol=1e-6, atol=1e-9, msg=name)
