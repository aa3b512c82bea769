import os
import subprocess
import sys
import time

import numpy as np
import pytest

from zen_analysis.config import DataConfig
from zen_analysis.workload.batches import TokenData, prepare
from zen_analysis.workload.corpus import _stdlib_documents, load_corpus, stdlib_root

SMALL = DataConfig(source="stdlib", max_bytes=300_000, vocab_size=512)


def test_stdlib_corpus_is_real_code_deterministic_and_excludes_site_packages():
    a, b = load_corpus(SMALL), load_corpus(SMALL)
    assert a.sha256 == b.sha256 and a.doc_ids == b.doc_ids
    assert all(not d.startswith(("site-packages/", "dist-packages/")) for d in a.doc_ids)
    assert 300_000 <= a.num_bytes < 300_000 + max(len(t.encode()) for t in a.texts) + 1
    assert any("def " in t for t in a.texts)
    bigger = load_corpus(DataConfig(source="stdlib", max_bytes=600_000, vocab_size=512))
    assert bigger.sha256 != a.sha256
    root = stdlib_root()  # the walk that skips site-packages lists what rglob does, in its order (it keys the caches)
    every = [p.relative_to(root).as_posix() for p in sorted(root.rglob("*.py")) if p.is_file()]
    assert [d for d, _ in _stdlib_documents()] == [
        d for d in every if not d.startswith(("site-packages/", "dist-packages/"))
    ]


def test_split_is_by_document_and_covers_both_sides():
    c = load_corpus(SMALL)
    train, val = c.split(0.1)
    assert train and val and len(train) + len(val) == len(c.texts)


def test_local_files_source(tmp_path):
    (tmp_path / "a.txt").write_text("hello world\n" * 2000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("the quick brown fox\n" * 2000)
    c = load_corpus(DataConfig(source="files", files=(str(tmp_path),), vocab_size=300))
    assert len(c.texts) == 2
    with pytest.raises(ValueError, match="neither a file nor a directory"):
        load_corpus(DataConfig(source="files", files=(str(tmp_path / "missing"),), vocab_size=300))


def test_hub_dataset_offline_fails_fast_with_advice():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    code = (
        "from zen_analysis.config import DataConfig\n"
        "from zen_analysis.workload.corpus import load_corpus\n"
        "try:\n"
        "    load_corpus(DataConfig(source='hf', hf_builder='wikitext', hf_config='wikitext-2-raw-v1'))\n"
        "except ValueError as e:\n"
        "    print('ERR', e)\n"
    )
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "ERR could not load dataset 'wikitext'" in out.stdout, out.stderr
    assert "data.hf_files" in out.stdout and "data.hf_disk" in out.stdout
    assert time.monotonic() - t0 < 60


def test_prepare_is_cached_and_batches_depend_only_on_seed_step_worker():
    p1 = prepare(SMALL, progress=False)
    mtime = (p1.tokens_dir / "train.bin").stat().st_mtime_ns
    p2 = prepare(SMALL, progress=False)
    assert p2 == p1 and (p2.tokens_dir / "train.bin").stat().st_mtime_ns == mtime
    assert p1.vocab_size == 512 and p1.num_train_tokens > 10_000
    d = TokenData(p1, seq_len=32, seed=7)
    x1, y1 = d.batch("train", step=3, worker=5, batch_size=4)
    x2, y2 = TokenData(p1, seq_len=32, seed=7).batch("train", step=3, worker=5, batch_size=4)
    assert x1.shape == (4, 32) and np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert np.array_equal(x1[:, 1:], y1[:, :-1])  # targets are inputs shifted by one
    x3, _ = d.batch("train", step=3, worker=6, batch_size=4)
    assert not np.array_equal(x1, x3)
    assert int(x1.max()) < p1.vocab_size


def test_too_long_sequences_are_refused():
    p = prepare(SMALL, progress=False)
    with pytest.raises(ValueError, match="seq_len"):
        TokenData(p, seq_len=10**8, seed=0)
