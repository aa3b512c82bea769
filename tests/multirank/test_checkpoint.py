"""A run killed mid-way and resumed from its newest checkpoint ends as the uninterrupted run does, bit for bit."""

import copy
import os
import signal

import pyarrow.parquet as pq
import pytest

from zen_analysis import paths, recipes
from zen_analysis.capture.reader import TraceReader
from zen_analysis.ranks.procs import RankFailedError
from zen_analysis.runs.launch import launch
from zen_analysis.runs.rundir import list_runs

LOCAL = {"warmup_steps": 1, "interval": 2}  # local SGD: a sync every 2 steps after one synchronous step


def _cfg(run_id: str, capture: bool = False, **sync):
    sync = dict(sync)
    cfg = recipes.smoke()
    cfg.name = cfg.run_id = run_id
    cfg.dist.num_ranks = 2
    cfg.train.num_steps = 6
    cfg.capture.enabled = capture
    if capture:  # every step captured, natural and top-k with error feedback; 2 steps a shard: shards span checkpoints
        cfg.capture.every, cfg.capture.steps_per_shard = 1, 2
    cfg.train.checkpoint_every = 2
    cfg.dist.sharding = sync.pop("sharding", "none")
    if cfg.dist.sharding == "fsdp":  # its capture: the natural records
        cfg.capture.topk_scope = "none"
    for key, value in sync.items():
        setattr(cfg.sync, key, value)
    if cfg.sync.method in ("diloco", "edit", "a_edit"):
        for key, value in LOCAL.items():
            setattr(cfg.local_sgd, key, value)
    return cfg


def _killed_at(step_to_die: int):
    """Train, but rank 1 dies by SIGKILL as it starts ``step_to_die`` (a crash, an OOM kill)."""

    def target(cfg, *, info, log, resume=False):
        from zen_analysis.train import loop

        real = loop._step

        def step(run, sync, step, **kw):
            if step == step_to_die and info.rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(run, sync, step, **kw)

        loop._step = step  # this forked rank's copy of the module only
        return loop.train(cfg, info=info, log=log, resume=resume)

    return target


def _listed(run_id: str) -> tuple[int | None, bool]:
    (row,) = [r for r in list_runs() if r["run_id"] == run_id]
    return row["checkpoint"], row["resumable"]


def _run(cfg, **kw):
    return launch(copy.deepcopy(cfg), progress=False, echo=False, **kw)


_TIMINGS = ("seconds", "stats_seconds")
"""What a decision took on this machine: the only part of the planner's summary a resumed run may change."""


def _schedule(summary: dict):
    """The run summary's ``planner`` entry without its timings: when each decision came and what it chose."""

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in _TIMINGS}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return strip(summary.get("planner"))


@pytest.mark.parametrize(
    "sync, die_at",
    [
        ({"method": "dense"}, 5),
        pytest.param({"method": "natural", "scheme": "zen"}, 3, marks=pytest.mark.smoke),
        ({"method": "natural", "scheme": "zen", "overlap": True}, 4),
        ({"method": "topk", "scheme": "zen"}, 3),  # error feedback: the residuals travel in the checkpoint
        ({"method": "topk", "scheme": "agsparse", "overlap": True}, 5),
        # auto: its choices travel
        ({"method": "natural", "scheme": "auto", "planner_topology": "paper-tcp25", "planner_every": 3}, 4),
        ({"method": "topk", "scheme": "auto", "planner_topology": "paper-tcp25", "planner_every": 2}, 3),
        ({"method": "diloco"}, 3),  # every rank's own model and inner optimizer, the anchors, the outer momentum
        ({"method": "edit"}, 5),  # and the anomaly detectors
        # FSDP2: every rank's shards through DCP, the hashed table and its moments in the original order
        ({"sharding": "fsdp", "method": "natural", "scheme": "auto", "planner_every": 3}, 3),
    ],
    ids=[
        "dense",
        "zen",
        "zen-overlap",
        "topk-zen",
        "topk-agsparse-overlap",
        "auto",
        "topk-auto",
        "diloco",
        "edit",
        "fsdp-auto",
    ],
)
def test_a_run_killed_and_resumed_equals_the_uninterrupted_run(sync, die_at):
    full = _run(_cfg("ckpt-full", **sync), overwrite=True)
    cfg = _cfg("ckpt-crash", **sync)
    with pytest.raises(RankFailedError, match="SIGKILL"):
        _run(cfg, overwrite=True, target=_killed_at(die_at))
    assert _listed("ckpt-crash") == (die_at // 2 * 2, True)  # `zen-analysis runs`: the newest checkpoint, resumable
    resumed = _run(cfg, resume=True)
    assert _listed("ckpt-crash") == (4, False)
    a, b = full.metrics(), resumed.metrics()
    assert b["step"].tolist() == list(range(6))
    assert b["loss"].tolist() == a["loss"].tolist()  # bit for bit, the rows before the checkpoint kept
    assert resumed.summary["param_sha256"] == full.summary["param_sha256"]
    # auto: the decisions come at the uninterrupted run's steps, and the summary lists every one of them
    assert _schedule(resumed.summary) == _schedule(full.summary)
    checkpoints = sorted(p.name for p in (paths.run_dir("ckpt-crash") / "checkpoints").iterdir())
    assert checkpoints == ["step-00000002", "step-00000004"] and "checkpoint_s" in b.columns


def test_a_damaged_checkpoint_is_skipped_and_a_changed_config_refused(capsys):
    cfg = _cfg("ckpt-damaged")
    full = _run(cfg, overwrite=True)
    newest = paths.run_dir("ckpt-damaged") / "checkpoints" / "step-00000004" / "model.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    newest.write_bytes(bytes(data))
    resumed = _run(cfg, resume=True)  # from step 2: the same losses still
    assert resumed.metrics()["loss"].tolist() == full.metrics()["loss"].tolist()
    log = (paths.run_dir("ckpt-damaged") / "logs" / "rank0.log").read_text()
    assert "checkpoint step-00000004 is damaged (model.pt do not match their checksums): skipped" in log
    assert "resumed from step 2" in log
    changed = _cfg("ckpt-damaged")
    changed.train.lr = 0.5
    changed.dist.num_ranks = 4
    with pytest.raises(ValueError, match="may change train.num_steps only, not dist.num_ranks, train.lr"):
        _run(changed, resume=True)
    aedit = _run(_cfg("ckpt-aedit", method="a_edit"), overwrite=True)  # trains, without checkpoints, saying why
    assert "no checkpoints for this run: A-EDiT" in (aedit.run_dir / "logs" / "rank0.log").read_text()
    assert not (aedit.run_dir / "checkpoints").exists()
    with pytest.raises(ValueError, match="A-EDiT"):
        _run(_cfg("ckpt-aedit", method="a_edit"), resume=True)
    with pytest.raises(ValueError, match="run ckpt-none does not exist"):
        _run(_cfg("ckpt-none"), resume=True)


def _killed_writing(step_of_checkpoint: int):
    """Train, but rank 1 dies by SIGKILL while the checkpoint of ``step_of_checkpoint`` is being written (rank 0 has
    begun it: its ``.partial`` directory exists)."""

    def target(cfg, *, info, log, resume=False):
        from zen_analysis.train import checkpoint, loop

        real = checkpoint.save

        def save(run_dir, step, *, rank, **kw):
            if step == step_of_checkpoint and rank == 1:
                (run_dir / "checkpoints").mkdir(exist_ok=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return real(run_dir, step, rank=rank, **kw)

        checkpoint.save = save
        return loop.train(cfg, info=info, log=log, resume=resume)

    return target


def test_a_rank_killed_while_a_checkpoint_is_written_leaves_the_previous_one():
    full = _run(_cfg("ckpt-full-w"), overwrite=True)
    cfg = _cfg("ckpt-writing")
    with pytest.raises(RankFailedError, match="SIGKILL"):
        _run(cfg, overwrite=True, target=_killed_writing(4))
    names = sorted(p.name for p in (paths.run_dir("ckpt-writing") / "checkpoints").iterdir())
    assert "step-00000004" not in names and "step-00000002" in names
    resumed = _run(cfg, resume=True)
    assert resumed.metrics()["loss"].tolist() == full.metrics()["loss"].tolist()
    assert resumed.summary["param_sha256"] == full.summary["param_sha256"]


def _shards(run_id: str) -> dict[str, tuple]:
    """Every trace shard of the run: its row groups (one per captured step) and its records (the file's metadata
    names the run, so bytes differ between two runs)."""
    out = {}
    for path in sorted(paths.trace_dir(run_id).glob("rank*-shard*.parquet")):
        pf = pq.ParquetFile(path)
        out[path.name] = (pf.num_row_groups, pf.read().to_pydict())
    return out


def test_a_capturing_run_killed_and_resumed_writes_the_uninterrupted_runs_traces():
    """2 captured steps a shard, a checkpoint at step 3 (which flushes step 2's records to a shard of their own), a
    crash at step 5 with steps 3-4's shard on disk: the resumed run drops that shard, runs steps 3-4 again and ends
    with the uninterrupted run's shards, record for record (top-k capture's error-feedback residuals restored)."""

    def cfg_of(run_id):
        cfg = _cfg(run_id, capture=True, method="topk", scheme="zen")
        cfg.train.checkpoint_every = 3
        return cfg

    full = _run(cfg_of("ckpt-cap-full"), overwrite=True)
    cfg = cfg_of("ckpt-cap")
    with pytest.raises(RankFailedError, match="SIGKILL"):
        _run(cfg, overwrite=True, target=_killed_at(5))
    assert "rank000-shard00002.parquet" in _shards("ckpt-cap")  # steps 3-4, written after the checkpoint
    resumed = _run(cfg, resume=True)
    assert resumed.metrics()["loss"].tolist() == full.metrics()["loss"].tolist()
    mine, theirs = _shards("ckpt-cap"), _shards("ckpt-cap-full")
    assert list(mine) == list(theirs) and len(mine) == 2 * 4  # per rank: steps 0-1, 2, 3-4, 5
    assert [n for n in mine if mine[n] != theirs[n]] == []
    listed = TraceReader("ckpt-cap").manifest["shards"]  # every shard checked against it: the kept and the rerun
    full_listed = TraceReader("ckpt-cap-full").manifest["shards"]
    assert list(listed) == list(mine)
    assert [(e["steps"], e["workers"], e["records"]) for e in listed.values()] == [
        (e["steps"], e["workers"], e["records"]) for e in full_listed.values()
    ]
    log = (paths.run_dir("ckpt-cap") / "logs" / "rank0.log").read_text()
    assert "dropped trace shards written after the checkpoint: rank000-shard00002.parquet" in log


def test_a_resumed_run_does_not_echo_the_previous_attempts_errors(capsys):
    cfg = _cfg("ckpt-echo")
    with pytest.raises(RankFailedError, match="SIGKILL"):
        _run(cfg, overwrite=True, target=_killed_at(3))
    log = paths.run_dir("ckpt-echo") / "logs" / "rank0.log"
    with open(log, "a") as f:  # what rank 0 writes when its peer dies under it
        f.write("Traceback (most recent call last):\nRuntimeError: [gloo] Connection reset by peer\n")
    capsys.readouterr()
    launch(copy.deepcopy(cfg), resume=True, progress=False, echo=True)
    echoed = capsys.readouterr().out
    assert "[rank 0] resumed from step 2" in echoed and "Connection reset by peer" not in echoed
    text = log.read_text()  # the log keeps both attempts, the boundary marked
    marker = text.index("resumed from step 2; the lines above are earlier attempts'")
    assert text.index("Connection reset by peer") < marker < text.index("resumed from step 2 (step-00000002)")


def test_a_pretrained_run_killed_and_resumed_equals_the_uninterrupted_run(tiny_checkpoint):
    def cfg_of(run_id):  # an encoder, untied, its fresh masked-LM head in the checkpoint too; Zen sums its embedding
        cfg = _cfg(run_id, method="natural", scheme="zen")
        cfg.model.pretrained, cfg.model.tie_embeddings, cfg.train.num_steps = tiny_checkpoint("bert"), False, 4
        return cfg

    full = _run(cfg_of("ckpt-pt-full"), overwrite=True)
    cfg = cfg_of("ckpt-pt-crash")
    with pytest.raises(RankFailedError, match="SIGKILL"):
        _run(cfg, overwrite=True, target=_killed_at(3))
    resumed = _run(cfg, resume=True)
    assert resumed.metrics()["loss"].tolist() == full.metrics()["loss"].tolist()
    assert resumed.summary["param_sha256"] == full.summary["param_sha256"]
