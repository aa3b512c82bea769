import json

import pyarrow.parquet as pq
import pytest
import torch

from zen_analysis.atomic import file_sha256
from zen_analysis.capture.reader import TraceReader
from zen_analysis.capture.schema import check_manifest
from zen_analysis.capture.traces import SparseGrad, TraceError, TraceWriter, collect_shards, write_manifest


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


def _write(tmp_path, recs, *, steps_per_shard=2, manifest=True, listed=True):
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
    shards = {"shards": collect_shards(tmp_path, len(by_rank))} if listed else {}
    write_manifest(tmp_path, {**_manifest(recs), **shards})
    if not listed:
        with pytest.warns(UserWarning, match="lists no trace shards"):
            return TraceReader(tmp_path)
    return TraceReader(tmp_path)


def _relist(d):
    """The manifest's shard entries brought in line with the files (a writer that wrote them as they are)."""
    m = json.loads((d / "manifest.json").read_text())
    for name, entry in m["shards"].items():
        entry.update(bytes=(d / name).stat().st_size, sha256=file_sha256(d / name))
    (d / "manifest.json").write_text(json.dumps(m))


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
    write_manifest(tmp_path, {**_manifest([big]), "shards": collect_shards(tmp_path, 1)})
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
    with pytest.raises(TraceError, match=f"{victim.name}: {len(data) // 2} bytes where the manifest says") as err:
        TraceReader(tmp_path)  # before anything is read
    assert "Re-capture" in str(err.value) and "allow_missing=True" in str(err.value)
    assert "delete" not in str(err.value)  # deleting it would only turn the error into silently partial results


def test_a_truncated_shard_of_an_old_store_is_an_error_that_advises_no_deletion(tmp_path):
    reader = _write(tmp_path, _records(), listed=False)
    victim = reader.files[1]
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.warns(UserWarning), pytest.raises(TraceError, match=f"{victim.name}.*truncated or corrupt") as err:
        list(TraceReader(tmp_path).records())
    assert "re-run the capture" in str(err.value) and "delete" not in str(err.value)


def test_the_manifest_lists_every_shard_with_its_size_checksum_steps_and_workers(tmp_path):
    reader = _write(tmp_path, _records(num_steps=3, num_workers=2))
    shards = reader.manifest["shards"]
    assert sorted(shards) == [p.name for p in reader.files] and reader.checked and reader.missing == []
    first = shards["rank001-shard00000.parquet"]
    assert first["rank"] == 1 and first["steps"] == [0, 1] and first["workers"] == [1]
    assert first["records"] == {"dense.w": 2, "emb": 2}
    path = tmp_path / "rank001-shard00000.parquet"
    assert first["bytes"] == path.stat().st_size and first["sha256"] == file_sha256(path)
    assert reader.missing_note() == ""


def test_a_deleted_shard_is_an_error_naming_it_and_its_workers_and_steps(tmp_path):
    reader = _write(tmp_path, _records(num_steps=3, num_workers=2))
    (tmp_path / "rank001-shard00000.parquet").unlink()
    with pytest.raises(TraceError) as err:
        TraceReader(tmp_path)
    msg = str(err.value)
    assert "1 of the 4 trace shards" in msg and "rank001-shard00000.parquet: missing" in msg
    assert "workers 1 at steps 0-1" in msg and "Re-capture the run" in msg and "--allow-missing" in msg
    assert len(reader.files) == 4  # the reader made before the deletion saw all four


def test_a_shard_whose_checksum_differs_is_an_error_naming_it(tmp_path):
    reader = _write(tmp_path, _records())
    victim = reader.files[2]
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # same size, one byte flipped
    victim.write_bytes(bytes(raw))
    with pytest.raises(TraceError, match=f"{victim.name}: its sha256 differs from the manifest's"):
        TraceReader(tmp_path)


def test_a_shard_the_manifest_does_not_list_is_refused(tmp_path):
    _write(tmp_path, _records())
    stray = tmp_path / "rank007-shard00000.parquet"
    stray.write_bytes((tmp_path / "rank000-shard00000.parquet").read_bytes())
    with pytest.raises(TraceError, match=f"{stray.name}: not among the 4 shards"):
        TraceReader(tmp_path)


def test_allow_missing_reads_the_rest_and_names_what_is_missing(tmp_path):
    recs = _records(num_steps=3, num_workers=2)
    full = _write(tmp_path, recs)
    (tmp_path / "rank001-shard00000.parquet").unlink()  # worker 1, steps 0-1
    victim = tmp_path / "rank000-shard00001.parquet"  # worker 0, step 2
    victim.write_bytes(victim.read_bytes()[:-10])
    reader = TraceReader(tmp_path, allow_missing=True)
    assert [m["file"] for m in reader.missing] == ["rank000-shard00001.parquet", "rank001-shard00000.parquet"]
    assert len(reader.files) == 2
    got = {(r.worker, r.step) for r in reader.records()}
    assert got == {(0, 0), (0, 1), (1, 2)}
    assert len(reader.summary()) == len(recs) - 6 and len(full.files) == 4
    note = reader.missing_note()
    assert note.startswith("incomplete traces: 2 of 4 shards missing")
    assert "workers 0 at steps 2 (rank000-shard00001.parquet: " in note
    assert "workers 1 at steps 0-1 (rank001-shard00000.parquet: missing)" in note
    assert {t: list(s) for t, s in reader.worker_index_sets(2).items()} == {"dense.w": [1], "emb": [1]}


def test_a_store_without_a_shard_list_is_read_as_before_with_a_warning(tmp_path):
    reader = _write(tmp_path, _records(), listed=False)
    assert not reader.checked and len(reader.files) == 4 and len(list(reader.records())) == 12
    (tmp_path / "rank001-shard00000.parquet").unlink()
    with pytest.warns(UserWarning, match="captured before stores listed them.*cannot be checked for missing"):
        assert len(TraceReader(tmp_path).files) == 3


def test_malformed_shard_entries_are_refused(tmp_path):
    m = {"run_id": "t", "schema_version": 1, "tensors": {}, "shards": {"a.parquet": {"rank": 0, "bytes": "12"}}}
    with pytest.raises(TraceError, match=r"shards\['a.parquet'\] should be"):
        check_manifest(m, tmp_path / "manifest.json")


def test_the_writer_keeps_its_shard_list_across_a_checkpoint(tmp_path):
    recs = [r for r in _records(num_steps=4, num_workers=1) if r.rank == 0]
    w = TraceWriter(tmp_path, rank=0, run_id="t", world_size=1, steps_per_shard=1)
    assert collect_shards(tmp_path, 1) == {}  # a rank that has written nothing says so
    for step in range(2):
        for r in recs:
            if r.step == step:
                w.add(r)
        w.end_step()
    state = w.state_dict()
    for r in recs:
        if r.step == 2:
            w.add(r)
    w.close()  # shard 2: written after the checkpoint
    assert sorted(collect_shards(tmp_path, 1)) == [f"rank000-shard0000{k}.parquet" for k in range(3)]
    again = TraceWriter(tmp_path, rank=0, run_id="t", world_size=1, steps_per_shard=1)
    assert again.load_state_dict(state) == ["rank000-shard00002.parquet"]
    assert collect_shards(tmp_path, 1) == state["listing"]
    old = {k: v for k, v in state.items() if k != "listing"}  # a checkpoint written before shard lists
    TraceWriter(tmp_path, rank=0, run_id="t", world_size=1, steps_per_shard=1).load_state_dict(old)
    assert collect_shards(tmp_path, 1) == state["listing"]  # read back from the shards themselves


def test_a_rank_without_a_shard_list_is_an_error_naming_it(tmp_path):
    _write(tmp_path, _records(), manifest=False)
    (tmp_path / "rank001-shards.json").unlink()
    with pytest.raises(TraceError, match="rank001-shards.json: rank 1's list"):
        collect_shards(tmp_path, 2)


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
    _relist(tmp_path)
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
    write_manifest(tmp_path, {**_manifest(recs), "shards": collect_shards(tmp_path, 1)})
    assert not list(tmp_path.glob(".*tmp"))  # no temporary left behind to confuse readers
    reader = TraceReader(tmp_path)
    assert reader.steps() == [0, 1] and len(list(reader.records())) == 4


def test_bad_kind_is_refused(tmp_path):
    w = TraceWriter(tmp_path, rank=0, run_id="t", world_size=1, steps_per_shard=1)
    with pytest.raises(ValueError, match="kind"):
        w.add(SparseGrad(0, 0, 0, "x", "dense", (2,), torch.tensor([0]), torch.tensor([1.0])))


def captured_run(run_id, *, workers=4, steps=4):
    """A finished capture under data/traces as training leaves it (manifest with config, corpus and its shard
    list): 2 ranks x ``workers // 2`` workers, an embedding and a top-k tensor, 2 steps a shard."""
    from zen_analysis import paths

    tdir = paths.trace_dir(run_id)
    per_rank = workers // 2
    writers = [TraceWriter(tdir, rank=r, run_id=run_id, world_size=2, steps_per_shard=2) for r in range(2)]
    gen = torch.Generator().manual_seed(3)
    for step in range(steps):
        for w in range(workers):
            rank = w // per_rank
            rows = torch.unique(torch.randint(0, 32, (9,), generator=gen))
            emb = torch.zeros(64, 4)
            emb[rows] = 1.0
            writers[rank].add(SparseGrad.from_dense(emb, step=step, worker=w, rank=rank, tensor="emb", kind="natural"))
            idx = torch.unique(torch.randint(0, 50, (6,), generator=gen))
            writers[rank].add(SparseGrad(step, w, rank, "lin", "topk", (10, 5), idx, torch.ones(idx.numel())))
        for wr in writers:
            wr.end_step()
    for wr in writers:
        wr.close()
    tensors = {
        "emb": {"kind": "natural", "shape": [64, 4], "numel": 256},
        "lin": {"kind": "topk", "shape": [10, 5], "numel": 50},
    }
    corpus = {"corpus_name": "synthetic", "corpus_bytes": 1, "corpus_sha256": "0" * 64, "vocab_size": 64}
    manifest = {
        "run_id": run_id,
        "tensors": tensors,
        "config": {"model": {"arch": "synthetic"}},
        "world_size": 2,
        "workers_per_rank": per_rank,
        "num_workers": workers,
        "corpus": corpus,
        "git_commit": "0" * 40,
        "finished": True,
        "shards": collect_shards(tdir, 2),
    }
    write_manifest(tdir, manifest)
    return tdir


def test_characterize_and_evaluate_of_an_incomplete_store_only_when_asked_and_saying_what_is_missing():
    from zen_analysis.evaluation.evaluate import evaluate
    from zen_analysis.sparsity.characterize import characterize, load_tables
    from zen_analysis.sparsity.report import claims_table, to_markdown

    tdir = captured_run("incomplete-analysis")
    full = load_tables("incomplete-analysis")
    assert all(df.attrs["missing"] == "" for df in full.values())
    (tdir / "rank001-shard00000.parquet").unlink()  # workers 2-3 at steps 0-1
    for analysis in (characterize, evaluate):
        with pytest.raises(TraceError, match="rank001-shard00000.parquet: missing"):
            analysis("incomplete-analysis", progress=False)
    tables = load_tables("incomplete-analysis", allow_missing=True)
    for df in tables.values():
        assert "workers 2-3 at steps 0-1 (rank001-shard00000.parquet: missing)" in df.attrs["missing"]
    density = tables["density"]
    emb = density[density["tensor"] == "emb"]
    assert sorted(emb[emb["step"] == 0]["worker"]) == [0, 1]  # the records' own ids, not positions
    assert sorted(emb[emb["step"] == 2]["worker"]) == [0, 1, 2, 3]
    assert (
        emb[emb["step"] == 2]["nnz"].tolist() == full["density"].query("tensor == 'emb' and step == 2")["nnz"].tolist()
    )
    out = characterize("incomplete-analysis", progress=False, allow_missing=True)
    meta = pq.read_schema(out / "density.parquet").metadata
    assert b"workers 2-3 at steps 0-1" in meta[b"zen_analysis.missing"]
    claims = claims_table({name: df.assign(workload=df["tensor"]) for name, df in tables.items()})
    assert "workers 2-3 at steps 0-1" in claims.attrs["missing"] and "incomplete traces" in to_markdown(claims)
    df = evaluate("incomplete-analysis", topologies=["paper-tcp25"], progress=False, allow_missing=True)
    assert "workers 2-3 at steps 0-1" in df.attrs["missing"]
    assert set(df[df["step"] == 0]["n"]) == {2} and set(df[df["step"] == 2]["n"]) == {2, 4}
    again = evaluate("incomplete-analysis", topologies=["paper-tcp25"], progress=False, allow_missing=True)
    assert again.attrs["missing"] == df.attrs["missing"]  # the cached table says it too
