"""Fault injection, as a hostile but fair user would do it (issue 11): bad run ids, copied and corrupted runs,
page-level corruption, bad options, a rank killed by SIGKILL, the same run id twice, the socket table of a run.

Every fault runs against a private ``ZEN_ANALYSIS_DATA`` holding one finished, characterized and evaluated run
("victim"), and every test checks the clear error *and* that every file that existed before is byte-identical
afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import torch.distributed as dist

from zen_analysis import paths, recipes
from zen_analysis.capture.reader import TraceReader
from zen_analysis.capture.traces import TraceError
from zen_analysis.evaluation.evaluate import evaluate
from zen_analysis.ranks.procs import RankFailedError
from zen_analysis.runs.launch import RunInUseError, launch, prepare_run
from zen_analysis.sparsity.characterize import characterize

VICTIM = "victim"


def _smoke(run_id: str, **sets) -> object:
    cfg = recipes.smoke()
    cfg.run_id = run_id
    cfg.train.num_steps = 3
    for key, value in sets.items():
        section, name = key.split("__")
        setattr(getattr(cfg, section), name, value)
    cfg.validate()
    return cfg


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def assert_preserved(before: dict[str, str], root: Path) -> None:
    after = snapshot(root)
    changed = sorted(k for k, v in before.items() if after.get(k) != v)
    assert not changed, f"pre-existing files changed or removed: {changed[:10]}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A private data root with one finished run, its characterization and its scheme table."""
    base = tmp_path_factory.mktemp("faults")
    root = base / "data"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ZEN_ANALYSIS_DATA", str(root))
        launch(_smoke(VICTIM), progress=False, echo=False)
        characterize(VICTIM, progress=False)
        evaluate(VICTIM, progress=False)
        yield root


@pytest.fixture
def copy_of_victim(lab):
    """``traces/<name>`` as a ``cp -r`` of the victim's traces; removed (with its derived tables) afterwards."""
    made = []

    def make(name: str) -> Path:
        dst = paths.trace_dir(name)
        shutil.copytree(paths.trace_dir(VICTIM), dst)
        made.append(name)
        return dst

    yield make
    for name in made:
        shutil.rmtree(paths.traces_dir() / name, ignore_errors=True)
        shutil.rmtree(paths.derived_dir() / name, ignore_errors=True)


# ---- 1. run ids are names, not paths


@pytest.mark.parametrize("bad", [".", "..", "a/b", "../escaped-run", "-x", "x y", "run\n"])
def test_a_run_id_that_is_not_a_name_is_refused_before_anything_is_touched(lab, bad):
    before = snapshot(lab)
    with pytest.raises(ValueError, match="run id"):
        launch(_smoke(bad), progress=False, echo=False)
    assert_preserved(before, lab)


def test_an_absolute_run_id_is_refused_and_that_directory_survives(lab, tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    before = snapshot(lab)
    with pytest.raises(ValueError, match="run id"):
        prepare_run(_smoke(str(outside)))
    assert (outside / "keep.txt").read_text() == "mine"
    assert_preserved(before, lab)


def test_the_cli_refuses_dot_dot_with_one_line(lab):
    before = snapshot(lab)
    out = subprocess.run(
        [sys.executable, "-m", "zen_analysis", "train", "smoke", "--run-id", ".."],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ZEN_ANALYSIS_DATA": str(lab)},
    )
    assert out.returncode != 0 and "run id" in out.stderr and "Traceback" not in out.stderr
    assert_preserved(before, lab)


def test_a_manifest_run_id_that_escapes_is_a_trace_error(lab, copy_of_victim):
    d = copy_of_victim("escape")
    m = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**m, "run_id": "../escaped-run"}))
    before = snapshot(lab)
    with pytest.raises(TraceError, match=r"manifest\.json.*run_id"):
        characterize("escape", progress=False)
    assert_preserved(before, lab)
    assert not (lab / "escaped-run").exists() and not (lab.parent / "escaped-run").exists()


# ---- 2. derived tables: keyed by the directory read, written whole or not at all


def test_characterizing_a_copied_run_leaves_the_original_tables_alone(lab, copy_of_victim):
    copy_of_victim("copied")
    before = snapshot(lab)
    out = characterize("copied", progress=False)
    assert out.is_relative_to(paths.derived_run_dir("copied"))
    evaluate("copied", progress=False)
    assert_preserved(before, lab)


def test_a_failed_characterize_keeps_the_previous_tables(lab, copy_of_victim):
    d = copy_of_victim("breaks")
    out = characterize("breaks", progress=False)
    evaluate("breaks", progress=False)
    before = snapshot(lab)
    shard = max(d.glob("*.parquet"))
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # truncated: unreadable
    before.pop(str(shard.relative_to(lab)))
    with pytest.raises(TraceError, match=shard.name):
        characterize("breaks", force=True, progress=False)
    with pytest.raises(TraceError, match=shard.name):
        evaluate("breaks", force=True, progress=False)
    assert_preserved(before, lab)
    assert sorted(p.name for p in out.iterdir())  # still the complete previous directory


@pytest.mark.parametrize("bad", [0, -1, 1])
def test_evaluate_with_too_few_workers_is_refused_and_the_table_survives(lab, bad):
    before = snapshot(lab)
    with pytest.raises(ValueError, match="max_workers"):
        evaluate(VICTIM, max_workers=bad, progress=False)
    assert_preserved(before, lab)


def test_evaluate_with_other_options_writes_its_own_table(lab):
    default = evaluate(VICTIM, progress=False)
    before = snapshot(lab)
    small = evaluate(VICTIM, max_workers=2, topologies=["paper-tcp25"], progress=False)
    assert set(small["n"]) == {2} and set(small["topology"]) == {"paper-tcp25"}
    assert_preserved(before, lab)
    again = evaluate(VICTIM, progress=False)
    assert again.equals(default) and set(again["n"]) == {2, 4}


# ---- 4. corruption is detected


def _data_page_span(path: Path, column: str) -> tuple[int, int]:
    """(offset, length) of the first row group's pages of ``column`` in the file."""
    md = pq.ParquetFile(path).metadata
    rg = md.row_group(0)
    col = next(rg.column(j) for j in range(rg.num_columns) if rg.column(j).path_in_schema == column)
    start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
    return start, col.total_compressed_size


@pytest.mark.parametrize("column", ["indices.list.element", "values.list.element"])
def test_random_bytes_inside_a_data_page_are_detected(lab, copy_of_victim, column):
    """64 random bytes at 12 places inside a column's pages, the footer intact. Without page checksums zstd
    notices some of these and decodes the rest into plausible wrong numbers (all of them, for the values)."""
    d = copy_of_victim("garbled")
    shard = min(d.glob("*.parquet"))
    start, length = _data_page_span(shard, column)
    assert length > 200, "the pages are too small to corrupt inside"
    clean = shard.read_bytes()
    for k in range(12):
        raw = bytearray(clean)
        pos = start + int((k + 0.5) / 12 * (length - 64))
        raw[pos : pos + 64] = (
            torch.randint(0, 256, (64,), generator=torch.Generator().manual_seed(pos)).to(torch.uint8).numpy().tobytes()
        )
        shard.write_bytes(bytes(raw))
        before = snapshot(lab)
        with pytest.raises(TraceError, match=shard.name):
            list(TraceReader("garbled").records())
        if column.startswith("indices") and k % 4 == 0:  # evaluate reads the indices only
            with pytest.raises(TraceError, match=shard.name):
                evaluate("garbled", progress=False)
        assert_preserved(before, lab)


def test_indices_that_break_the_invariants_are_a_trace_error(lab, copy_of_victim):
    """A shard whose checksums are fine but whose indices are unsorted or out of range (a buggy writer)."""
    d = copy_of_victim("badidx")
    shard = min(d.glob("*.parquet"))
    table = pq.read_table(shard)
    idx = table.column("indices").to_pylist()
    for how in ("unsorted", "range"):
        bad = [list(reversed(x)) if how == "unsorted" else [*x[:-1], 10**9] for x in idx]
        import pyarrow as pa

        t = table.set_column(
            table.schema.get_field_index("indices"),
            table.schema.field("indices"),
            pa.array(bad, type=table.schema.field("indices").type),
        )
        pq.write_table(t.replace_schema_metadata(table.schema.metadata), shard)
        m = json.loads((d / "manifest.json").read_text())  # the writer's own list says so too: past the size check
        digest = hashlib.sha256(shard.read_bytes()).hexdigest()
        m["shards"][shard.name].update(bytes=shard.stat().st_size, sha256=digest)
        (d / "manifest.json").write_text(json.dumps(m))
        with pytest.raises(TraceError, match=rf"{shard.name}.*(sorted|range)"):
            list(TraceReader("badidx").records())


@pytest.mark.parametrize(
    "edit", [lambda m: m.pop("tensors"), lambda m: m.update(tensors=["emb"]), lambda m: m.update(world_size="two")]
)
def test_a_malformed_manifest_is_a_trace_error_naming_it(lab, copy_of_victim, edit):
    d = copy_of_victim("badmanifest")
    m = json.loads((d / "manifest.json").read_text())
    edit(m)
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(TraceError, match=r"manifest\.json"):
        TraceReader("badmanifest")


# ---- 5. loopback only


def _listening_addresses() -> list[str]:
    """Local addresses of this process's listening TCP sockets (from /proc/net/tcp and tcp6)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                addr = f[1].split(":")[0]
                if table == "tcp":
                    out.append(".".join(str(b) for b in reversed(bytes.fromhex(addr))))
                else:
                    words = [bytes.fromhex(addr[i : i + 8])[::-1] for i in range(0, 32, 8)]
                    out.append(b"".join(words).hex())
    return out


def _report_sockets(cfg, *, info, log):
    t = torch.ones(1)
    dist.all_reduce(t)  # every connection made
    found = _listening_addresses()
    dist.barrier()
    return {"listening": found}


def _is_loopback(addr: str) -> bool:
    return addr.startswith(("127.", "0" * 20 + "ffff" + "7f")) or addr == "0" * 31 + "1"


def test_a_forked_run_listens_on_loopback_only(lab):
    result = launch(_smoke("sockets", dist__num_ranks=3), target=_report_sockets, progress=False, echo=False)
    found = [a for r in result.results.values() for a in r["listening"]]
    assert found, "no listening socket seen: the check would pass vacuously"
    assert all(_is_loopback(a) for a in found), found


def _ok(cfg, *, info, log):
    t = torch.full((2,), float(info.rank))
    dist.all_reduce(t)
    return {"sum": t.tolist()}


def test_a_data_root_with_url_characters_still_rendezvouses_in_its_own_run_directory(lab, tmp_path, monkeypatch):
    root = tmp_path / "odd#name?x=1" / "data"
    root.mkdir(parents=True)
    for cache in ("tokenizers", "tokens"):  # share the lab's caches: no retraining
        (root / cache).symlink_to(lab / cache)
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(root))
    result = launch(_smoke("odd"), target=_ok, progress=False, echo=False)
    assert result.results[0]["sum"] == [1.0, 1.0]
    assert not (tmp_path / "odd").exists()  # a store cut at '#' would have landed here


@pytest.mark.smoke
def test_fork_launch_listens_on_loopback_only():
    from zen_analysis.ranks.procs import fork_launch

    def fn(rank, world):
        t = torch.ones(1)
        dist.all_reduce(t)
        return _listening_addresses()

    found = [a for r in fork_launch(fn, 2) for a in r]
    assert found and all(_is_loopback(a) for a in found), found


# ---- 7. failures name the cause


def _sigkill_rank_2(cfg, *, info, log):
    t = torch.ones(1)
    dist.all_reduce(t)
    if info.rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    for _ in range(100):  # the others keep talking to rank 2 and fail on the closed connection
        dist.all_reduce(t)
        time.sleep(0.05)
    return {}


def test_a_rank_killed_by_sigkill_is_named_first(lab):
    with pytest.raises(RankFailedError) as err:
        launch(_smoke("killed", dist__num_ranks=4), target=_sigkill_rank_2, progress=False, echo=False)
    assert err.value.rank == 2
    assert str(err.value).startswith("rank 2 of run killed was killed by SIGKILL"), str(err.value)[:300]


def _ctrl_c_reaches_python() -> None:
    """In the child before exec: SIGINT back to its default, so Python turns it into KeyboardInterrupt even when
    this suite was started in the background by a shell without job control (which makes children ignore it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_ends_with_one_line(lab):
    env = {**os.environ, "ZEN_ANALYSIS_DATA": str(lab)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zen_analysis",
            "train",
            "smoke",
            "--run-id",
            "interrupted",
            "--set",
            "train.num_steps=500",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_ctrl_c_reaches_python,
    )
    deadline = time.monotonic() + 120
    while not (lab / "runs" / "interrupted" / "logs" / "rank0.log").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip() and "%|" not in ln and "step/s" not in ln]
    assert "Traceback" not in err and lines[-1].startswith("zen-analysis: interrupted"), err[-2000:]


# ---- 8. the same run id twice

_FIRST = textwrap.dedent(
    """
    import json, sys, time
    from zen_analysis import recipes
    from zen_analysis.runs.launch import launch

    def slow(cfg, *, info, log):
        time.sleep(float(sys.argv[1]))
        return {"who": "first", "steps": cfg.train.num_steps}

    cfg = recipes.smoke(); cfg.run_id = "twice"; cfg.train.num_steps = 4
    print(json.dumps(launch(cfg, target=slow, progress=False, echo=False, overwrite=True).summary))
    """
)


def test_the_same_run_id_cannot_be_launched_twice_at_once(lab):
    env = {**os.environ, "ZEN_ANALYSIS_DATA": str(lab)}
    first = subprocess.Popen(
        [sys.executable, "-c", _FIRST, "12"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    results = lab / "runs" / "twice" / "launch.json"
    deadline = time.monotonic() + 120
    while not results.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert results.exists(), first.stderr.read() if first.poll() is not None else "first launch did not start"
    before = snapshot(lab)
    with pytest.raises(RunInUseError, match="twice"):
        launch(_smoke("twice", train__num_steps=2), progress=False, echo=False, overwrite=True)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"who": "first", "steps": 4}
    assert json.loads((lab / "runs" / "twice" / "config.json").read_text())["train"]["num_steps"] == 4
    before = {k: v for k, v in before.items() if not k.startswith(("runs/twice", "traces/twice"))}
    assert_preserved(before, lab)
    # finished, it is still not replaced without asking
    before = snapshot(lab)
    with pytest.raises(ValueError, match="overwrite"):
        launch(_smoke("twice", train__num_steps=2), progress=False, echo=False)
    assert_preserved(before, lab)


def test_the_root_cause_is_a_fatal_signal_then_a_real_error_then_an_abort(tmp_path):
    from zen_analysis.ranks.procs import blame

    (tmp_path / "errors").mkdir()
    (tmp_path / "errors" / "rank0.txt").write_text("Traceback...\nValueError: the real error\n")
    (tmp_path / "errors" / "rank3.txt").write_text("RuntimeError: Connection closed by peer: timed out\n")
    # rank 1 aborted (gloo's SIGABRT after a peer died): the ValueError on rank 0 is the cause
    e = blame(tmp_path, "r", [0, 1, 3], {0: 1, 1: -int(signal.SIGABRT), 3: 1}, [], [])
    assert e.rank == 0 and "the real error" in str(e)
    # a rank killed by SIGKILL (OOM killer, kill -9) comes before everything else
    e = blame(tmp_path, "r", [0, 1, 2], {0: 1, 1: -int(signal.SIGABRT), 2: -int(signal.SIGKILL)}, [], [])
    assert e.rank == 2 and str(e).startswith("rank 2 of run r was killed by SIGKILL")
    # only timeouts and an abort: the abort
    e = blame(tmp_path, "r", [1, 3], {1: -int(signal.SIGABRT), 3: 1}, [], [])
    assert e.rank == 1 and "SIGABRT" in str(e)


def _zero_inside_pages(path: Path, column: str) -> None:
    start, length = _data_page_span(path, column)
    raw = bytearray(path.read_bytes())
    mid = start + length // 2
    raw[mid - 8 : mid + 8] = bytes(16) if any(raw[mid - 8 : mid + 8]) else b"\xff" * 16
    path.write_bytes(bytes(raw))


def test_a_damaged_cached_table_is_recomputed_not_a_crash(lab, copy_of_victim):
    copy_of_victim("healing")
    df = evaluate("healing", progress=False)
    path = df.attrs["path"]
    _zero_inside_pages(path, "seconds")  # the footer, and so the stamp, intact
    from zen_analysis.derived import read_table

    with pytest.raises(OSError):  # really damaged (page checksum)
        read_table(path)
    again = evaluate("healing", progress=False)
    assert again.equals(df)
    out = characterize("healing", progress=False)
    table = out / "overlap.parquet"
    _zero_inside_pages(table, "overlap")
    with pytest.raises(OSError):
        read_table(table)
    from zen_analysis.sparsity.characterize import load_tables

    assert len(load_tables("healing")["overlap"]) > 0


def test_concurrent_writers_of_one_directory_never_share_a_temporary(tmp_path):
    import threading

    from zen_analysis.atomic import atomic_dir

    errors = []

    def write(i):
        try:
            with atomic_dir(tmp_path / "tables") as tmp:
                (tmp / "t.txt").write_text(str(i))
                time.sleep(0.01)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [p.name for p in tmp_path.iterdir()] == ["tables"] and (tmp_path / "tables" / "t.txt").read_text().isdigit()


# ---- 9. a loss that turns NaN (issue 41, finding 7)


def _nan_weights_on_rank_1_at(step_of_nan: int):
    """Train, but rank 1's first parameter turns NaN as it starts ``step_of_nan`` (a diverging run)."""

    def target(cfg, *, info, log, resume=False):
        from zen_analysis.train import loop

        real = loop._step

        def step(run, sync, step, **kw):
            if step == step_of_nan and info.rank == 1:
                with torch.no_grad():
                    next(run.model.parameters()).fill_(float("nan"))
            return real(run, sync, step, **kw)

        loop._step = step  # this forked rank's copy of the module only
        return loop.train(cfg, info=info, log=log, resume=resume)

    return target


def test_a_loss_that_turns_nan_stops_the_run_naming_the_step_unless_allowed():
    cfg = _smoke("nan-loss", train__num_steps=4, capture__enabled=False)
    with pytest.raises(RankFailedError, match=r"the loss became nan at step 2 \(the mean over ranks"):
        launch(cfg, target=_nan_weights_on_rank_1_at(2), progress=False, echo=False)
    run = paths.run_dir("nan-loss")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[-1]["loss"] != rows[-1]["loss"]  # its row, NaN
    assert not (run / "summary.json").exists() and not (run / "results").exists()
    cfg.train.allow_nonfinite_loss = True  # asked for: it trains on to the end
    result = launch(cfg, target=_nan_weights_on_rank_1_at(2), progress=False, echo=False, overwrite=True)
    assert result.summary["steps_done"] == 4 and result.summary["final_loss"] != result.summary["final_loss"]
