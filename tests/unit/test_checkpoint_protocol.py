"""The one checkpoint protocol (:mod:`zen_analysis.atomic`'s checkpoint folders) that the training loop's and
:mod:`zen_analysis.fsdp.dcp`'s checkpoints follow: names, the marker written last with every file's checksum,
the newest found by the step's integer, and the earlier layouts read back. Files only: no ranks, no torch."""

import json
from pathlib import Path

import pytest

from zen_analysis import atomic


def _commit(root, step, files, *, world=2, extra=None, keep=None):
    """A checkpoint of ``step`` as the savers make it: begin, every rank's files, commit."""
    partial = atomic.begin_checkpoint(root, step)
    for name, text in files.items():
        (partial / name).parent.mkdir(parents=True, exist_ok=True)
        (partial / name).write_text(text)
    return atomic.commit_checkpoint(partial, step=step, world=world, extra=extra, keep=keep)


def _legacy_fsdp(root, step, extra):
    """What fsdp.dcp.save left before the protocol: ``step-<k>`` unpadded, ``zen.json`` without checksums."""
    path = root / f"step-{step}"
    path.mkdir(parents=True)
    (path / ".metadata").write_text("dcp")
    (path / "zen.json").write_text(json.dumps({"step": step, "extra": extra}))
    return path


def test_commit_names_the_folder_and_writes_the_marker_last_with_every_files_checksum(tmp_path):
    final = _commit(tmp_path, 12, {"rank0.pt": "a", "sharded/.metadata": "m", "sharded/__0_0.distcp": "s"})
    assert final == tmp_path / "step-00000012" == atomic.checkpoint_dir(tmp_path, 12)
    assert not list(tmp_path.glob("*.partial"))
    meta = json.loads((final / "meta.json").read_text())
    assert meta["step"] == 12 and meta["world"] == 2 and meta["extra"] is None
    assert meta["files"] == {
        n: atomic.file_sha256(final / n) for n in ("rank0.pt", "sharded/.metadata", "sharded/__0_0.distcp")
    }
    assert atomic.newest_checkpoint(tmp_path, world=2) == (12, final)


def test_newest_parses_the_step_and_skips_partial_incomplete_damaged_and_other_world_sizes(tmp_path):
    _legacy_fsdp(tmp_path, 9, None)
    ten = _legacy_fsdp(tmp_path, 10, {"next": 10})  # sorted as text, step-9 would be the newest
    assert atomic.newest_checkpoint(tmp_path) == (10, ten)
    _commit(tmp_path, 11, {"model.pt": "m"})
    twelve = _commit(tmp_path, 12, {"model.pt": "m"}, world=4)
    damaged = _commit(tmp_path, 13, {"model.pt": "m"})
    (damaged / "model.pt").write_text("M")
    (tmp_path / "step-00000014").mkdir()  # no marker
    (atomic.begin_checkpoint(tmp_path, 15) / "model.pt").write_text("m")  # never committed
    lines = []
    assert atomic.newest_checkpoint(tmp_path, world=2, log=lines.append) == (11, tmp_path / "step-00000011")
    assert lines == [
        "checkpoint step-00000014 is incomplete (no readable meta.json with its step and files): skipped",
        "checkpoint step-00000013 is damaged (model.pt do not match their checksums): skipped",
        "checkpoint step-00000012 was written by 4 ranks, not 2: skipped",
    ]
    assert atomic.newest_checkpoint(tmp_path, world=4, log=lines.append) == (12, twelve)
    assert atomic.latest_checkpoint_step(tmp_path) == 13  # a listing's answer: files not hashed
    assert [s for s, _ in atomic.complete_checkpoints(tmp_path)] == [9, 10, 11, 12, 13]


def test_the_current_layout_is_newer_than_the_earlier_one_for_the_same_step(tmp_path):
    _legacy_fsdp(tmp_path, 12, {"old": True})
    current = _commit(tmp_path, 12, {"x": "y"}, extra={"new": True})
    assert atomic.newest_checkpoint(tmp_path) == (12, current)
    assert atomic.read_checkpoint_marker(current).extra == {"new": True}
    legacy = atomic.read_checkpoint_marker(tmp_path / "step-12")
    assert (legacy.step, legacy.world, legacy.files, legacy.extra) == (12, None, None, {"old": True})


def test_keep_prunes_the_oldest_complete_by_step_and_a_step_saved_again_replaces_its_folder(tmp_path):
    _legacy_fsdp(tmp_path, 9, None)
    for step in (10, 11, 12):
        _commit(tmp_path, step, {"f": str(step)}, keep=2)
    assert [p.name for _, p in atomic.complete_checkpoints(tmp_path)] == ["step-00000011", "step-00000012"]
    again = _commit(tmp_path, 12, {"g": "again"}, keep=2)  # a run resumed from an earlier checkpoint
    assert sorted(p.name for p in again.iterdir()) == ["g", "meta.json"]


def test_a_crash_after_the_marker_and_before_the_rename_leaves_the_previous_checkpoint_newest(tmp_path, monkeypatch):
    previous = _commit(tmp_path, 2, {"f": "2"})
    real = atomic.os.replace

    def die_at_the_folders_rename(src, dst):
        if Path(src).is_dir():
            raise RuntimeError("killed before the rename")
        return real(src, dst)  # the marker's own temporary file

    monkeypatch.setattr(atomic.os, "replace", die_at_the_folders_rename)
    with pytest.raises(RuntimeError, match="killed before the rename"):
        _commit(tmp_path, 4, {"f": "4"})
    monkeypatch.undo()
    assert (tmp_path / "step-00000004.partial" / "meta.json").is_file()
    assert atomic.newest_checkpoint(tmp_path) == (2, previous)
    assert _commit(tmp_path, 4, {"f": "4"}) == tmp_path / "step-00000004"  # the leftover is removed and rebuilt
