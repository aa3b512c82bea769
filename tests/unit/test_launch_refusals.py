"""What ``zen-analysis train`` refuses before any rank starts, as a user meets it: one ``zen-analysis: error`` line
naming the file or setting at fault and the fix, no rank started, and the run directory as it was, so a rerun of
the same id with good data trains (issue 56: tied embeddings under FSDP2, a tokenizer larger than the model's
table, an empty or unreadable corpus file, a missing column, a glob matching nothing)."""

import re
import shutil

import pytest
import transformers

from zen_analysis import paths
from zen_analysis.interface.cli import main
from zen_analysis.runs import launch as launch_module
from zen_analysis.workload import batches as data_module
from zen_analysis.workload.hf_corpus import _invalid_utf8

GOOD = "".join(f"def f{i}(x):\n    return x * {i}  # line {i}\n" for i in range(200))
TINY = ["--set", "train.num_steps=1", "--set", "dist.num_ranks=1", "--set", "capture.enabled=false"]
TINY += ["--set", "data.vocab_size=300"]


@pytest.fixture
def lab(monkeypatch, tmp_path):
    """A private data root, offline, and a good corpus file; returns the folder the corpus files go in."""
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    (tmp_path / "good.txt").write_text(GOOD)
    return tmp_path


def _train(run_id: str, *sets: str, overwrite: bool = False) -> None:
    argv = ["train", "smoke", "--run-id", run_id, *TINY, *(a for s in sets for a in ("--set", s))]
    main(argv + (["--overwrite"] if overwrite else []))


def _refused(monkeypatch, run_id: str, *sets: str, overwrite: bool = False) -> str:
    """The one-line error ``train`` exits with; fails the test if a rank was started."""

    def no_rank(*args, **kwargs):
        raise AssertionError("a rank was started")

    with monkeypatch.context() as m:
        m.setattr(launch_module, "_start_forked", no_rank)
        m.setattr(launch_module, "_start_torchrun", no_rank)
        with pytest.raises(SystemExit) as exit_:
            _train(run_id, *sets, overwrite=overwrite)
    message = str(exit_.value.code)
    assert message.startswith("zen-analysis: error: ") and "\n" not in message, message
    return message


def _files(run_id: str) -> dict[str, bytes]:
    """Every file of a run (its directory and traces) but the lock."""
    roots = (paths.run_dir(run_id), paths.trace_dir(run_id))
    return {
        str(p): p.read_bytes()
        for root in roots
        if root.exists()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


CORPORA = {
    "empty": ({"a.txt": b""}, ["data.hf_files={d}/a.txt"], r"data.hf_files: '\S+/a.txt' is empty: .*remove it"),
    "not-utf8": (
        {"b.txt": GOOD.encode() + b"caf\xe9\n"},
        ["data.hf_files={d}/good.txt,{d}/b.txt"],
        rf"data.hf_files: \S+/b.txt is not UTF-8 text \(byte {len(GOOD) + 3}, line {GOOD.count(chr(10)) + 1}: "
        r"invalid continuation byte\); re-encode it .*or remove it from data.hf_files",
    ),
    "json-on-txt": (
        {},
        ["data.hf_builder=json", "data.hf_files={d}/good.txt"],
        r"the json builder cannot read \S+/good.txt \(ArrowInvalid: JSON parse error.*\); its extension says text: "
        r"set data.hf_builder=text",
    ),
    "not-utf8-in-a-stream": (
        {"b.txt": GOOD.encode() + b"caf\xe9\n"},
        ["data.hf_streaming=true", "data.hf_files={d}/good.txt,{d}/b.txt"],
        r"data.hf_files: \S+/b.txt is not UTF-8 text \(byte \d+, line \d+: invalid continuation byte\)",
    ),
    "one-bad-file-of-several": (
        {"rows.jsonl": b'{"text": "a b c"}\n', "torn.jsonl": b'{"text": "a b c"}\n{"text": "d e\n'},
        ["data.hf_files={d}/rows.jsonl,{d}/torn.jsonl"],
        r"the json builder cannot read \S+/torn.jsonl \(ArrowInvalid: .*\); correct the file, or set data.hf_builder",
    ),
    "missing-column": (
        {},
        ["data.hf_column=content", "data.hf_files={d}/good.txt"],
        r"data.hf_column='content': the dataset's columns are \['text'\]",
    ),
    "glob-matches-nothing": ({}, ["data.hf_files={d}/*.parquet"], r"data.hf_files: no file matches '\S+\*.parquet'"),
}


@pytest.mark.parametrize("case", list(CORPORA))
def test_a_refused_corpus_is_named_before_any_rank_starts_and_leaves_no_run_behind(lab, monkeypatch, case):
    files, sets, message = CORPORA[case]
    for name, data in files.items():
        (lab / name).write_bytes(data)
    run_id = f"refused-{case}"
    got = _refused(monkeypatch, run_id, "data.source=hf", *(s.format(d=lab) for s in sets))
    assert re.search(message, got), got
    assert not paths.run_dir(run_id).exists() and not paths.trace_dir(run_id).exists()
    _train(run_id, "data.source=hf", f"data.hf_files={lab}/good.txt")  # the same id, good data: no "already exists"
    assert (paths.run_dir(run_id) / "results" / "rank0.json").exists()


def test_overwrite_with_a_refused_corpus_keeps_the_earlier_run(lab, monkeypatch):
    _train("kept", "data.source=hf", f"data.hf_files={lab}/good.txt")
    before = _files("kept")
    assert any(name.endswith("results/rank0.json") for name in before)
    got = _refused(monkeypatch, "kept", "data.source=hf", f"data.hf_files={lab}/*.parquet", overwrite=True)
    assert "no file matches" in got
    assert _files("kept") == before


def test_an_existing_run_is_refused_before_its_data_is_prepared(lab, monkeypatch):
    """The data is prepared before the run is claimed now; an id in use must still fail at once."""
    _train("exists", "data.source=hf", f"data.hf_files={lab}/good.txt")

    def no_data(*args, **kwargs):
        raise AssertionError("the data was prepared")

    monkeypatch.setattr(launch_module, "prepare", no_data, raising=False)
    monkeypatch.setattr(data_module, "prepare", no_data)
    got = _refused(monkeypatch, "exists", "data.source=hf", f"data.hf_files={lab}/good.txt")
    assert "run exists already exists" in got and "--overwrite" in got


def test_tied_embeddings_under_fsdp2_are_refused_with_the_fix_as_set_or_as_a_checkpoint_ties_them(
    lab, monkeypatch, tiny_checkpoint
):
    fsdp = ("data.source=hf", f"data.hf_files={lab}/good.txt", "dist.sharding=fsdp")
    expected = "dist.sharding=fsdp cannot go with model.tie_embeddings=true, or a checkpoint that ties them"
    got = _refused(monkeypatch, "tied", *fsdp, "model.tie_embeddings=true")
    assert expected in got and "set model.tie_embeddings=false" in got
    tied = tiny_checkpoint("gpt2")
    assert transformers.AutoConfig.from_pretrained(tied).tie_word_embeddings  # auto: the checkpoint's tie
    got = _refused(monkeypatch, "tied-checkpoint", *fsdp, f"model.pretrained={tied}")
    assert expected in got
    assert not paths.run_dir("tied").exists() and not paths.run_dir("tied-checkpoint").exists()


def test_a_tokenizer_with_more_ids_than_the_model_has_rows_is_refused(lab, monkeypatch, tiny_checkpoint):
    folder = lab / "small-table"
    shutil.copytree(tiny_checkpoint("gpt2"), folder)
    config = transformers.AutoConfig.from_pretrained(folder)
    num_ids = len(transformers.AutoTokenizer.from_pretrained(folder))
    config.vocab_size = num_ids // 2
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    got = _refused(
        monkeypatch,
        "small-table",
        "data.source=hf",
        f"data.hf_files={lab}/good.txt",
        f"model.pretrained={folder}",
        "model.tie_embeddings=false",
    )
    rows = num_ids // 2
    assert f"its tokenizer has {num_ids} ids but its embedding table has {rows} rows" in got
    assert f"ids {rows}..{num_ids - 1} have no row" in got and "resize_token_embeddings" in got
    assert not paths.run_dir("small-table").exists()


def test_the_first_byte_that_is_not_utf8_is_found_across_read_chunks(tmp_path):
    path, chunk = tmp_path / "c.txt", 1 << 20  # what _invalid_utf8 reads at a time
    path.write_bytes(b"ok\n" * 400_000 + "\u00e9".encode()[:1])  # the file ends inside a character
    assert _invalid_utf8(str(path)) == (1_200_000, 400_001)
    path.write_bytes(b"x" * (chunk - 1) + b"\xe9\nmore")  # a character cut by the chunk, then not continued
    assert _invalid_utf8(str(path)) == (chunk - 1, 1)
    path.write_bytes(b"x" * (chunk - 1) + "\u00e9\n".encode() + b"\n\xff")  # a character across chunks is fine
    assert _invalid_utf8(str(path)) == (chunk + 3, 3)
    path.write_bytes(b"ok\n" * 400_000 + "\u00e9\n".encode())
    assert _invalid_utf8(str(path)) is None
