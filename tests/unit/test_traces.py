import json

import pyarrow.parquet as pq
import pytest
import torch

from zen_analysis.capture.reader import TraceReader
from zen_analysis.capture.traces import SparseGrad, TraceError, TraceWriter, write_manifest


def _records(num_steps=3, num_workers=2, shape=(50, 4), seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for step in range(num_steps):
        for w in range(num_workers):
            g = torch.zeros(shape)
            rows = torch.randint(0, shape[0], (7,), generator=gen)
            g[rows] = torch.randint(-5, 6, (7, shape[1]), generator=gen).float()
            out.append(SparseGrad.from_dense(g, step=step, worker=w, rank=w % 2, tensor="emb", kind="natural"))
            idx = torch.tensor([0, 3, 11])
            out.append(SparseGrad(step, w, w % 2, "dense.w", "topk", (4, 5), idx, torch.tensor([1.5, -2.0, 3.25])))
    return out


def _manifest(recs):
    tensors = {r.tensor: {"kind": r.kind, "shape": list(r.shape), "numel": r.numel} for r in recs}
    return {"run_id": "t", "tensors": tensors}


def _write(tmp_path, recs, *, steps_per_shard=2, manifest=True):
    by_rank = {}
    for r in recs:
        by_rank.setdefault(r.rank, []).append(r)
    for rank, rs in by_rank.items():
        w = TraceWriter(tmp_path, rank=rank, run_id="t", world_size=len(by_rank), steps_per_shard=steps_per_shard)
        step = rs[0].step
        for r in rs:
            if r.step != step:
                w.end_step()
                step = r.step
            w.add(r)
        w.close()
    if not manifest:
        return None
    write_manifest(tmp_path, _manifest(recs))
    return TraceReader(tmp_path)


def _key(r):
    return (r.step, r.worker, r.tensor)


def test_round_trip_is_exact_and_filters_stream(tmp_path):
    recs = _records()
    reader = _write(tmp_path, recs)
    assert len(reader.files) == 4  # 2 ranks x ceil(3 steps / 2 per shard)
    got = {_key(r): r for r in reader.records()}
    assert len(got) == len(recs)
    for r in recs:
        g = got[_key(r)]
        assert g.shape == r.shape and g.kind == r.kind and g.rank == r.rank
        assert torch.equal(g.indices_K.long(), r.indices_K.long()) and torch.equal(g.values_K, r.values_K)
        assert g.indices_K.dtype == torch.int32
    sel = list(reader.records(tensor="emb", step=1, worker=0))
    assert len(sel) == 1 and torch.equal(
        sel[0].to_dense(), recs[[_key(r) for r in recs].index((1, 0, "emb"))].to_dense()
    )
    lean = list(reader.records(tensor="emb", step=1, worker=0, with_values=False))
    assert torch.equal(lean[0].indices_K, sel[0].indices_K) and lean[0].values_K.numel() == 0
    assert reader.steps() == [0, 1, 2] and reader.workers() == [0, 1] and reader.tensors() == ["dense.w", "emb"]
    df = reader.summary()
    assert len(df) == len(recs) and (df["density"] == df["nnz"] / df["numel"]).all()


def test_indices_widen_to_int64_for_tensors_of_2_31_elements_or_more(tmp_path):
    big = SparseGrad(0, 0, 0, "huge", "natural", (2**31 + 10,), torch.tensor([1, 2**31 + 5]), torch.tensor([1.0, 2.0]))
    w = TraceWriter(tmp_path, rank=0, run_id="t", world_size=1, steps_per_shard=1)
    w.add(big)
    w.close()
    write_manifest(tmp_path, _manifest([big]))
    (rec,) = TraceReader(tmp_path).records()
    assert rec.indices_K.dtype == torch.int64 and rec.indices_K.tolist() == [1, 2**31 + 5]


def test_missing_manifest_is_a_clear_error(tmp_path):
    _write(tmp_path, _records(), manifest=False)
    with pytest.raises(TraceError, match="manifest.json: missing"):
        TraceReader(tmp_path)


def test_unknown_run_lists_known_ones():
    with pytest.raises(TraceError, match="no trace directory for run 'no-such-run'"):
        TraceReader("no-such-run")


def test_truncated_file_is_a_clear_error_naming_it(tmp_path):
    reader = _write(tmp_path, _records())
    victim = reader.files[1]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match=f"{victim.name}.*truncated or corrupt"):
        list(TraceReader(tmp_path).records())


def test_garbage_file_is_a_clear_error(tmp_path):
    reader = _write(tmp_path, _records())
    reader.files[0].write_bytes(b"PAR1" + b"\x00" * 100)
    with pytest.raises(TraceError, match=reader.files[0].name):
        TraceReader(tmp_path).summary()


def test_unknown_schema_version_is_refused(tmp_path):
    reader = _write(tmp_path, _records())
    path = reader.files[0]
    table = pq.read_table(path)
    table = table.replace_schema_metadata({**table.schema.metadata, b"schema_version": b"99"})
    pq.write_table(table, path)
    with pytest.raises(TraceError, match="schema_version 99 is not supported"):
        list(TraceReader(tmp_path).records())
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({**manifest, "schema_version": 7}))
    with pytest.raises(TraceError, match="schema_version 7"):
        TraceReader(tmp_path)


def test_a_crash_while_writing_a_shard_leaves_completed_shards_readable(tmp_path, monkeypatch):
    recs = _records(num_steps=4, num_workers=1)
    w = TraceWriter(tmp_path, rank=0, run_id="t", world_size=1, steps_per_shard=2)
    for step in range(2):
        for r in recs:
            if r.step == step:
                w.add(r)
        w.end_step()  # shard 0 is written here
    for r in recs:
        if r.step == 2:
            w.add(r)
    w.end_step()

    def crash(*a, **k):
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", crash)
    with pytest.raises(KeyboardInterrupt):
        w.flush()
    write_manifest(tmp_path, _manifest(recs))
    assert not list(tmp_path.glob(".*tmp"))  # no temporary left behind to confuse readers
    reader = TraceReader(tmp_path)
    assert reader.steps() == [0, 1] and len(list(reader.records())) == 4


def test_bad_kind_is_refused(tmp_path):
    w = TraceWriter(tmp_path, rank=0, run_id="t", world_size=1, steps_per_shard=1)
    with pytest.raises(ValueError, match="kind"):
        w.add(SparseGrad(0, 0, 0, "x", "dense", (2,), torch.tensor([0]), torch.tensor([1.0])))
