"""One input check per kind of input (issue 11, items 6 and 9): index sets, configs and config files, the native
kernel's cache directory."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
import torch

from zen_analysis import recipes
from zen_analysis.comm.schemes import SCHEMES, build_scheme
from zen_analysis.config import SYNC_METHODS, SYNC_SCHEMES, ExperimentConfig, apply_overrides
from zen_analysis.indices import check_indices
from zen_analysis.sparsity import metrics
from zen_analysis.zen import build, hashing, hierarchical, native

# ---- index sets


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.tensor([-1, 2]), "negative"),
        (torch.tensor([1.0, 2.0]), "integer"),
        (torch.tensor([True, False]), "integer"),
        (torch.tensor([[1, 2], [3, 4]]), "1-D"),
        (torch.tensor([0, 10]), r"\[0, 10\)"),
        (torch.tensor([2**63 - 1], dtype=torch.uint64), r"\[0, 10\)"),
    ],
)
def test_check_indices_names_what_is_wrong(bad, message):
    with pytest.raises(ValueError, match=message):
        check_indices(bad, numel=10)


def test_check_indices_accepts_lists_arrays_and_narrow_ints():
    import numpy as np

    for ok in ([3, 1, 2], np.array([3, 1, 2], dtype=np.int32), torch.tensor([3, 1, 2], dtype=torch.int16)):
        assert check_indices(ok, numel=4).dtype == torch.int64
    assert check_indices(torch.zeros(0, 3, dtype=torch.long)).shape == (0,)  # empty in any shape is an empty set
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        check_indices(torch.tensor([2**63], dtype=torch.uint64))


@pytest.mark.parametrize(
    "call",
    [
        lambda s: metrics.densification_ratio([s, [2, 3]]),
        lambda s: metrics.overlap_ratio(s, [2, 3]),
        lambda s: metrics.jaccard(s, [2, 3]),
        lambda s: metrics.density(s, 10),
        lambda s: metrics.union_of([s], 10),
        lambda s: metrics.rows_of(s, 2),
        lambda s: metrics.partition_shares(s, 10, 2),
        lambda s: metrics.imbalance_ratios([s], 10, metrics.contiguous_owner(10, 2), 2),
        lambda s: hashing.h0(s),
        lambda s: hashing.owner(s, 4),
        lambda s: hashing.hash_owner(4, numel=10)(s),
        lambda s: hierarchical.hierarchical_hash(s, 4, seed=0, backend="torch"),
        lambda s: (
            hierarchical.hierarchical_hash(s, 4, seed=0, backend="native")
            if native.available()
            else hashing.owner(s, 4)
        ),
    ],
)
@pytest.mark.parametrize("bad", [torch.tensor([-1, 2]), torch.tensor([1.5, 2.0])])
def test_every_public_entry_point_rejects_negative_and_float_indices(call, bad):
    with pytest.raises(ValueError, match="negative|integer"):
        call(bad)


def test_densification_ratio_of_negative_indices_is_an_error_not_a_wrong_number():
    # before: -1 wrapped around to the last element and gamma came out 1.0 (true value with -1 kept: 1.5)
    with pytest.raises(ValueError, match="negative"):
        metrics.densification_ratio([[-1, 2], [2, 3]])
    assert metrics.densification_ratio([[1, 2], [2, 3]]) == 1.5


@pytest.mark.parametrize("name", sorted(SCHEMES))
@pytest.mark.parametrize("bad", [[0, 16], [-1, 3], [1.0, 2.0]])
def test_every_scheme_model_rejects_indices_outside_the_tensor(name, bad):
    sets = [torch.tensor([1, 2, 3]), torch.as_tensor(bad)]
    with pytest.raises(ValueError, match=r"negative|integer|\[0, 16\)"):
        build_scheme(name).traffic(sets, 16)


def test_the_c_and_torch_hash_paths_agree_on_every_valid_index_and_refuse_the_rest():
    if not native.available():
        pytest.skip(native.unavailable_reason())
    idx = torch.tensor([0, 1, 2**31, 2**32 + 5, 2**62, 2**63 - 1])
    assert torch.equal(native.kernel_h0(idx, 7), hashing.h0(idx, 7))
    for bad in (torch.tensor([-5]), torch.tensor([2**63], dtype=torch.uint64)):
        with pytest.raises(ValueError):
            native.kernel_h0(bad, 7)
        with pytest.raises(ValueError):
            hashing.h0(bad, 7)


# ---- configs


def test_unknown_sync_scheme_is_rejected_by_the_config_before_any_rank_starts():
    with pytest.raises(ValueError, match=r"sync.scheme='nope'.*zen"):
        apply_overrides(recipes.smoke(), ["sync.scheme=nope"])


def test_the_config_list_of_schemes_is_the_registries():
    from zen_analysis.local_sgd import METHODS
    from zen_analysis.train.registry import SPARSE_SCHEMES, SYNCS

    assert set(SYNC_SCHEMES) == {*SYNCS, *SPARSE_SCHEMES, "auto"}
    assert SYNC_METHODS == ("dense", "natural", "topk", *METHODS)
    assert set(SPARSE_SCHEMES) | {"allreduce"} == set(SCHEMES)
    # the enums every list derives from are the registries: the scheme classes' names, the local SGD methods
    from zen_analysis.config import MethodName, PlannerName, SchemeName
    from zen_analysis.local_sgd import method_config

    assert {s.value for s in SchemeName} == set(SCHEMES)
    assert tuple(m.value for m in MethodName) == METHODS
    assert SYNC_SCHEMES == (*SchemeName, *PlannerName)
    assert all(method_config(m).interval >= 1 for m in METHODS)  # a preset for every method


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["train"].update(num_steps="ten"), r"train\.num_steps.*int.*'ten'"),
        (lambda d: d["train"].update(lr="fast"), r"train\.lr.*float"),
        (lambda d: d["capture"].update(natural="yes"), r"capture\.natural.*bool"),
        (lambda d: d.update(train=[1, 2]), r"train.*object"),
        (lambda d: d["capture"].update(topk_tensors="*q_proj*"), r"capture\.topk_tensors.*list"),
    ],
)
def test_mistyped_config_values_are_named(edit, message):
    d = recipes.smoke().to_dict()
    edit(d)
    with pytest.raises(ValueError, match=message):
        ExperimentConfig.from_dict(d)


def test_ints_are_accepted_where_floats_are_expected():
    d = recipes.smoke().to_dict()
    d["train"]["lr"] = 1
    assert ExperimentConfig.from_dict(d).train.lr == 1.0


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "zen_analysis", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "does not exist"),
        ("{not json", "not valid JSON"),
        (json.dumps({"train": {"num_steps": "x"}}), "train.num_steps"),
    ],
)
def test_a_bad_config_file_is_named_in_one_line(tmp_path, content, message):
    path = tmp_path / "my-config.json"
    if content is not None:
        path.write_text(content)
    out = _cli("config", str(path))
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert str(path) in out.stderr and message in out.stderr, out.stderr


# ---- the native kernel's cache


def test_the_kernel_cache_is_private(tmp_path, monkeypatch):
    if build.compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("ZEN_ANALYSIS_CACHE", str(tmp_path / "cache"))
    lib = build.build()
    folder = lib.parent
    st = folder.stat()
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert build.build() == lib  # reused


def test_a_kernel_not_owned_by_the_user_is_never_loaded(tmp_path, monkeypatch):
    if build.compiler() is None or os.getuid() != 0:
        pytest.skip("needs a compiler and root (to plant a file owned by someone else)")
    monkeypatch.setenv("ZEN_ANALYSIS_CACHE", str(tmp_path / "cache"))
    lib = build.build()
    planted = lib.read_bytes()
    lib.unlink()
    lib.write_bytes(planted)
    os.chown(lib, 65534, 65534)
    again = build.build()
    assert again.stat().st_uid == os.getuid()
    # a cache directory someone else owns is not used at all
    monkeypatch.setenv("ZEN_ANALYSIS_CACHE", str(tmp_path / "theirs"))
    (tmp_path / "theirs" / "native").mkdir(parents=True)
    os.chown(tmp_path / "theirs" / "native", 65534, 65534)
    assert not build.build().is_relative_to(tmp_path / "theirs")


def test_an_unwritable_cache_falls_back_to_a_fresh_private_directory(tmp_path, monkeypatch):
    if build.compiler() is None:
        pytest.skip("no C compiler")
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    monkeypatch.setenv("ZEN_ANALYSIS_CACHE", str(blocker))  # cache_dir() cannot be created below a file
    a = build.build()
    folder = a.parent
    assert folder.stat().st_uid == os.getuid() and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert folder.name != "zen_analysis-native" and not folder.is_relative_to(blocker)
    b = build.build()
    assert b.parent != folder  # a new unpredictable directory every time, never a fixed shared name


# ---- a run's own files, read back by --resume (issue 41, findings 4-6)


def _stored_run(run_id: str, *, checkpoint_step: int | None = 2) -> tuple:
    """A run directory as an interrupted launch leaves it: its config, metrics rows of steps 0-3, and a complete
    checkpoint of ``checkpoint_step`` (no model files: the resume check reads only its meta.json)."""
    from zen_analysis import paths

    cfg = recipes.smoke()
    cfg.run_id = run_id
    run = paths.run_dir(run_id)
    run.mkdir(parents=True)
    (run / "config.json").write_text(cfg.to_json())
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 5.0 - s}) + "\n" for s in range(4)))
    if checkpoint_step is not None:
        ckpt = run / "checkpoints" / f"step-{checkpoint_step:08d}"
        ckpt.mkdir(parents=True)
        (ckpt / "meta.json").write_text(json.dumps({"step": checkpoint_step, "world": 2, "files": {}}))
    return cfg, run


def _files(run) -> dict[str, bytes]:
    """Every file of the run but its lock (which every launch of the id, refused or not, may create)."""
    return {
        str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"
    }


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda f: f.write_text(f.read_text()[:500]), r"config file \S+/config.json is not valid JSON \(Expecting"),
        (
            lambda f: f.write_text(f.read_text().replace('"num_steps": 6', '"num_steps": "many"')),
            r"config file \S+/config.json: train.num_steps: expected int, got 'many'; correct that field",
        ),
        (lambda f: f.unlink(), r"has checkpoints \(\S+, the newest of step 2\) but its config file \S+ is missing"),
    ],
    ids=["truncated", "wrong-type", "deleted"],
)
def test_a_damaged_run_config_is_named_with_its_fix_and_nothing_is_touched(damage, message):
    from zen_analysis.runs.rundir import claim_run

    cfg, run = _stored_run(f"damaged-{len(message)}")
    damage(run / "config.json")
    before = _files(run)
    with pytest.raises(ValueError, match=message) as err:
        claim_run(cfg, overwrite=False, resume=True)
    assert "--overwrite" in str(err.value) and "does not exist" not in str(err.value)
    assert _files(run) == before


def test_resuming_an_unknown_run_leaves_nothing_behind():
    from zen_analysis import paths
    from zen_analysis.runs.rundir import claim_run, list_runs

    cfg = recipes.smoke()
    cfg.run_id = "never-started"
    with pytest.raises(ValueError, match="run never-started does not exist .*leave out --resume"):
        claim_run(cfg, overwrite=False, resume=True)
    assert not paths.run_dir("never-started").exists()
    paths.run_dir("never-started").mkdir(parents=True)
    (paths.run_dir("never-started") / ".lock").write_text("")  # what an earlier refused resume left
    with pytest.raises(ValueError, match="does not exist"):
        claim_run(cfg, overwrite=False, resume=True)
    assert not paths.run_dir("never-started").exists()
    assert "never-started" not in {r["run_id"] for r in list_runs()}


def test_a_torn_last_metrics_row_is_dropped_saying_so_and_a_torn_middle_row_is_named(capsys):
    from zen_analysis.runs.rundir import claim_run

    cfg, run = _stored_run("torn-metrics")
    metrics = run / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 4, "loss"')  # a crash in the middle of an append
    with claim_run(cfg, overwrite=False, resume=True) as lock:
        assert lock.resume_from[0] == 2
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [0, 1]
    assert f"{metrics}: dropped its last line, a row torn by the crash" in capsys.readouterr().out
    metrics.write_text('{"step": 0, "loss": 5.0}\n{"step": 1, "lo\n{"step": 2, "loss": 3.0}\n')
    before = _files(run)
    with pytest.raises(ValueError, match=rf"{metrics} line 2 is not a metrics row .*delete that line"):
        claim_run(cfg, overwrite=False, resume=True)
    assert _files(run) == before


def test_a_run_without_a_complete_checkpoint_is_refused_before_anything_changes():
    from zen_analysis.runs.rundir import claim_run

    cfg, run = _stored_run("no-checkpoint", checkpoint_step=None)
    (run / "errors").mkdir()
    (run / "errors" / "rank1.txt").write_text("the interrupted attempt's error")
    before = _files(run)
    with pytest.raises(ValueError, match="has no complete checkpoint to resume from .*--overwrite"):
        claim_run(cfg, overwrite=False, resume=True)
    assert _files(run) == before


def test_a_damaged_manifest_or_checkpoint_meta_is_named_not_a_crash():
    from zen_analysis import paths
    from zen_analysis.runs.rundir import claim_run, list_runs

    cfg, run = _stored_run("damaged-meta")
    (run / "checkpoints" / "step-00000002" / "meta.json").write_text(json.dumps({"step": 2, "world": 2}))
    with pytest.raises(ValueError, match=r"no complete checkpoint .*\(checkpoint step-00000002 is incomplete \(no "):
        claim_run(cfg, overwrite=False, resume=True)
    paths.trace_dir("damaged-meta").mkdir(parents=True)
    (paths.trace_dir("damaged-meta") / "manifest.json").write_text('{"finished": tr')  # torn
    (row,) = [r for r in list_runs() if r["run_id"] == "damaged-meta"]
    assert row["finished"] is False and row["recipe"] == "smoke"
