"""``data.source=hf``: any ``datasets`` dataset as the training corpus, offline, on datasets the tests write: a
packaged builder over local files, a ``save_to_disk`` folder, a stream; a missing file, split or column refused
naming it; the caches keyed by the bytes read, not a path or mtime; the earlier ``hub`` keys mapped with a notice."""

import json
import os

import datasets
import pytest

from zen_analysis.config import DataConfig, ExperimentConfig
from zen_analysis.config.legacy import upgrade_overrides
from zen_analysis.config.overrides import from_dict
from zen_analysis.workload.batches import prepare
from zen_analysis.workload.corpus import load_corpus
from zen_analysis.workload.hf_corpus import content_sha256

LINES = [f"def f{i}(x):\n    return x * {i}  # line {i}" for i in range(40)]


def _hf(**kw) -> DataConfig:
    return DataConfig(source="hf", vocab_size=300, **kw)


def _write_text(tmp_path):
    (tmp_path / "a.txt").write_text("\n".join(LINES[:20]) + "\n")
    (tmp_path / "b.txt").write_text("\n".join(LINES[20:]) + "\n")
    return (str(tmp_path / "a.txt"), str(tmp_path / "b.txt"))


def test_a_text_builder_over_local_files_reads_every_line_in_order(tmp_path):
    files = _write_text(tmp_path)
    corpus = load_corpus(_hf(hf_builder="text", hf_files=files))
    assert list(corpus.texts) == [line for text in LINES for line in text.split("\n")]
    assert corpus.name == "hf:text" and corpus.doc_ids[0] == "hf:text:train:0"
    inferred = load_corpus(_hf(hf_files=files))  # the builder from the files' extension
    assert inferred.texts == corpus.texts and inferred.sha256 == corpus.sha256  # the same dataset, the same key
    (tmp_path / "b.txt").write_text("\n".join(LINES[20:30]) + "\n")
    assert load_corpus(_hf(hf_files=files)).sha256 != corpus.sha256  # another dataset, another cache


def test_a_json_column_and_a_save_to_disk_folder(tmp_path):
    rows = [{"id": i, "content": text} for i, text in enumerate(LINES)]
    (tmp_path / "code.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus = load_corpus(_hf(hf_files=(str(tmp_path / "code.jsonl"),), hf_column="content"))
    assert list(corpus.texts) == LINES
    with pytest.raises(ValueError, match=r"data.hf_column='text': the dataset's columns are \['id', 'content'\]"):
        load_corpus(_hf(hf_files=(str(tmp_path / "code.jsonl"),)))
    splits = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"text": LINES}), "test": datasets.Dataset.from_dict({"text": LINES[:2]})}
    )
    splits.save_to_disk(str(tmp_path / "saved"))
    assert list(load_corpus(_hf(hf_disk=str(tmp_path / "saved"))).texts) == LINES
    assert list(load_corpus(_hf(hf_disk=str(tmp_path / "saved"), hf_split="test")).texts) == LINES[:2]
    with pytest.raises(ValueError, match=r"data.hf_split='validation': .* has the splits \['test', 'train'\]"):
        load_corpus(_hf(hf_disk=str(tmp_path / "saved"), hf_split="validation"))


def test_a_stream_reads_up_to_max_bytes_and_hashes_what_it_read(tmp_path):
    files = _write_text(tmp_path)
    whole = load_corpus(_hf(hf_builder="text", hf_files=files, max_bytes=300))
    stream = load_corpus(_hf(hf_builder="text", hf_files=files, max_bytes=300, hf_streaming=True))
    assert stream.texts == whole.texts and 300 <= stream.num_bytes < 300 + max(map(len, LINES))
    assert stream.sha256 == whole.sha256  # the same documents read, the same key (the caches key on content)


def test_what_is_missing_is_named_before_anything_loads(tmp_path):
    with pytest.raises(ValueError, match=r"data.hf_files: '.*nowhere.txt' does not exist"):
        load_corpus(_hf(hf_builder="text", hf_files=(str(tmp_path / "nowhere.txt"),)))
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    with pytest.raises(ValueError, match=r"data.hf_split='validation': .*train"):
        load_corpus(_hf(hf_builder="text", hf_files=(str(tmp_path / "a.txt"),), hf_split="validation"))
    with pytest.raises(ValueError, match=r"no file matches '.*\*.parquet'"):
        load_corpus(_hf(hf_files=(str(tmp_path / "*.parquet"),)))
    with pytest.raises(ValueError, match="is not a folder written by save_to_disk"):
        load_corpus(_hf(hf_disk=str(tmp_path / "nowhere")))
    (tmp_path / "a.bin").write_bytes(b"\0")
    with pytest.raises(ValueError, match="set data.hf_builder to the builder that reads them"):
        load_corpus(_hf(hf_files=(str(tmp_path / "a.bin"),)))
    with pytest.raises(ValueError, match="set data.hf_builder .* or data.hf_disk"):
        _hf(hf_builder="text", hf_disk=str(tmp_path))
    with pytest.raises(ValueError, match="reads the stream until data.max_bytes"):
        _hf(hf_builder="text", hf_streaming=True)
    with pytest.raises(ValueError, match="data.hf_builder apply to data.source=hf only"):
        DataConfig(hf_builder="text")


def test_the_earlier_hub_keys_load_with_a_notice(capsys):
    earlier = {"data": {"source": "hub", "hub_dataset": "wikitext", "hub_config": "wikitext-2-raw-v1"}}
    cfg = from_dict(ExperimentConfig, earlier, source="config.json")
    assert (cfg.data.source, cfg.data.hf_builder, cfg.data.hf_config) == ("hf", "wikitext", "wikitext-2-raw-v1")
    assert "config.json: earlier config keys data.source=hub" in capsys.readouterr().err
    items = upgrade_overrides(["data.source=hub", "data.text_field=body", "train.seed=1"], "dense")
    assert items == ["data.source=hf", "data.hf_column=body", "train.seed=1"]


def test_a_changed_file_is_read_again_whatever_its_mtime(tmp_path, monkeypatch):
    """``datasets`` keys its Arrow cache of local files on their path and mtime alone: a file replaced by other text
    of another size, its mtime set back, was served from the old cache, and so were the tokenizer and token cache
    (issue 56). The caches key on the files' bytes."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path / "data"))
    path, stamp = tmp_path / "corpus.txt", (1_700_000_000, 1_700_000_000)
    cfg = _hf(hf_builder="text", hf_files=(str(path),))
    path.write_text("\n".join(LINES) + "\n")
    os.utime(path, stamp)
    first, first_data = load_corpus(cfg), prepare(cfg, progress=False)
    assert first_data.num_documents == len(first.texts) == 2 * len(LINES)
    shorter = [f"word{i} " * (i % 5 + 1) for i in range(12)]
    path.write_text("\n".join(shorter) + "\n")
    os.utime(path, stamp)  # the same path and mtime, other bytes of another size
    second, second_data = load_corpus(cfg), prepare(cfg, progress=False)
    assert list(second.texts) == [s.rstrip("\n") for s in shorter] and second.sha256 != first.sha256
    assert second_data.num_documents == 12 and second_data.corpus_sha256 == second.sha256
    assert second_data.tokens_dir != first_data.tokens_dir and second_data.tokenizer_file != first_data.tokenizer_file
    path.write_text("\n".join(LINES) + "\n")  # the first bytes again, a new mtime: the first key, the first caches
    assert load_corpus(cfg).sha256 == first.sha256 and prepare(cfg, progress=False) == first_data


def test_the_token_cache_keys_on_the_documents_not_on_datasets_fingerprint(tmp_path, monkeypatch):
    """Each content read through a fresh ``datasets`` cache: its fingerprint (a hash of the path and mtime) is the
    same for both, the documents are not, and neither are the caches built from them."""
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path / "data"))
    path, stamp = tmp_path / "corpus.txt", (1_700_000_000, 1_700_000_000)
    cfg = _hf(hf_builder="text", hf_files=(str(path),))
    got = []
    for i, lines in enumerate((LINES, LINES[:7])):
        monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / f"hf{i}"))
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, stamp)
        got.append(prepare(cfg, progress=False))
    assert [g.num_documents for g in got] == [80, 14] and got[0].corpus_sha256 != got[1].corpus_sha256


def test_the_content_hash_covers_every_file_a_glob_matches(tmp_path):
    files = _write_text(tmp_path)
    whole = content_sha256([str(tmp_path / "*.txt")])
    assert whole == content_sha256(list(files)) != content_sha256(files[:1])  # what datasets reads, in its order
    stamp = os.stat(files[1]).st_mtime_ns
    (tmp_path / "b.txt").write_text("\n".join(LINES[20:30]) + "\n")
    os.utime(files[1], ns=(stamp, stamp))
    assert content_sha256([str(tmp_path / "*.txt")]) != whole  # the bytes changed, the path and mtime did not
