"""Multi-rank training on gloo, launched like a notebook cell does, and the launcher's failure handling."""

import json
import os
import sysconfig
import time
from pathlib import Path

import datasets
import pytest
import torch
import torch.distributed as dist
from transformers import AutoTokenizer

from zen_analysis import recipes
from zen_analysis.ranks.procs import RankFailedError
from zen_analysis.runs.launch import launch
from zen_analysis.workload.export import load_exported


def _smoke(**fields):
    cfg = recipes.smoke()
    for key, value in fields.items():
        section, name = key.split("__")
        setattr(getattr(cfg, section), name, value)
    cfg.validate()
    return cfg


def _no_orphans(pids):
    time.sleep(0.2)
    alive = [p for p in pids if Path(f"/proc/{p}").exists()]
    assert not alive, f"processes {alive} survived the launch"


@pytest.mark.parametrize("num_ranks", [pytest.param(2, marks=pytest.mark.smoke), 4])
def test_replicas_stay_identical_and_traces_cover_every_worker(num_ranks):
    cfg = _smoke(dist__num_ranks=num_ranks, train__num_steps=5)
    result = launch(cfg, progress=False, echo=False)
    digests = {r: s["param_sha256"] for r, s in result.results.items()}
    assert len(digests) == num_ranks and len(set(digests.values())) == 1, digests
    reader = result.traces()
    assert reader.manifest["finished"] and reader.manifest["num_workers"] == num_ranks * 2
    assert reader.workers() == list(range(num_ranks * 2))
    assert reader.steps() == [0, 2, 4]
    kinds = reader.summary().groupby("kind")["tensor"].nunique().to_dict()
    buckets = [t for t, info in reader.manifest["tensors"].items() if "params" in info]
    assert kinds == {"natural": 1, "topk": len(buckets)} and len(buckets) == 5  # DDP-style buckets of 0.1 MiB
    for rec in reader.records(step=2):
        assert rec.rank == rec.worker // 2
    _no_orphans(result.pids)


def test_a_global_top_k_threshold_pools_every_ranks_samples():
    """capture.topk_threshold=global gathers the samples of every rank's workers: 2 ranks x 2 workers select
    exactly what 1 rank x 4 workers does at step 0 (same weights, same micro-batches), and differently from local
    thresholds."""

    def records(ranks, threshold):
        cfg = _smoke(
            dist__num_ranks=ranks,
            train__workers_per_rank=4 // ranks,
            train__num_steps=1,
            capture__topk_threshold=threshold,
        )
        reader = launch(cfg, progress=False, echo=False).traces()
        return {(r.worker, r.tensor): r.indices_K for r in reader.records(step=0, kind="topk")}

    two, one, local = records(2, "global"), records(1, "global"), records(2, "local")
    assert two.keys() == one.keys() and len(two) == 4 * 5
    assert all(torch.equal(two[k], one[k]) for k in two)
    assert any(not torch.equal(two[k], local[k]) for k in two)


def test_two_ranks_train_like_one_rank_on_the_same_global_batch():
    from zen_analysis.plots.training_curves import LiveLoss
    from zen_analysis.runs.observe import forward

    one = launch(
        _smoke(dist__num_ranks=1, train__workers_per_rank=4, capture__enabled=False), progress=False, echo=False
    )
    live, sent = LiveLoss(every_s=1e9), []  # draws the first step, then only at the end
    two = launch(
        _smoke(dist__num_ranks=2, train__workers_per_rank=2, capture__enabled=False),
        progress=False,
        echo=False,
        on_metrics=[live, forward(lambda name, value, step: sent.append((name, step)))],
    )
    l1, l2 = one.metrics()["loss"].to_numpy(), two.metrics()["loss"].to_numpy()
    assert len(l1) == len(l2) == 6
    # the launcher's finish: the live view's last redraw has every step and the final validation loss
    assert live.draws == 2 and len(live.rows) == 6 and live.title.startswith("finished: 6 steps")
    assert [s for n, s in sent if n == "train/loss"] == list(range(6)) and ("final/val_loss", 5) in sent
    assert [s for n, s in sent if n == "train/tokens_per_s"] == list(range(6))
    assert abs(l1[-1] - l1[0]) > 1e-3  # it actually trained
    torch.testing.assert_close(torch.tensor(l2), torch.tensor(l1), rtol=1e-4, atol=1e-5)


def test_same_recipe_and_seed_give_the_same_traces():
    a = launch(_smoke(train__num_steps=3), progress=False, echo=False).traces()
    b = launch(_smoke(train__num_steps=3), progress=False, echo=False).traces()
    ra = sorted(a.records(), key=lambda r: (r.step, r.worker, r.tensor))
    rb = sorted(b.records(), key=lambda r: (r.step, r.worker, r.tensor))
    assert len(ra) == len(rb) > 0
    for x, y in zip(ra, rb):
        assert torch.equal(x.indices_K, y.indices_K) and torch.equal(x.values_K, y.values_K)


def test_128_virtual_workers():
    cfg = _smoke(dist__num_ranks=2, train__workers_per_rank=64, train__batch_per_worker=1, train__num_steps=1)
    reader = launch(cfg, progress=False, echo=False).traces()
    assert reader.workers() == list(range(128))
    assert reader.manifest["num_workers"] == 128


# ---- failure handling: targets are plain functions, as a notebook would define them


def _raise_on_rank_1(cfg, *, info, log):
    if info.rank == 1:
        raise ValueError("boom from rank one")
    dist.barrier()
    return {}


def _hang_on_rank_1(cfg, *, info, log):
    if info.rank == 1:
        time.sleep(3600)
    t = torch.ones(4)
    dist.all_reduce(t)  # rank 1 never joins: times out after dist.timeout_s
    return {}


def _ok(cfg, *, info, log):
    t = torch.full((3,), float(info.rank))
    dist.all_reduce(t)
    return {"sum": t.tolist(), "pid": os.getpid()}


def test_a_raising_rank_fails_the_launch_fast_naming_it():
    t0 = time.monotonic()
    ended = []

    class Watcher:
        def __call__(self, rows):
            pass

        def finish(self, summary, error):
            ended.append((summary, error))

    with pytest.raises(RankFailedError) as err:
        launch(_smoke(dist__num_ranks=3), target=_raise_on_rank_1, progress=False, echo=False, on_metrics=Watcher())
    assert time.monotonic() - t0 < 60
    assert len(ended) == 1 and ended[0][0] is None and ended[0][1] is err.value  # told once, with the error
    e = err.value
    assert e.rank == 1
    assert "rank 1 of run" in str(e) and "ValueError: boom from rank one" in str(e)
    assert "Traceback" in str(e)
    _no_orphans(e.pids)
    # the calling process (a notebook kernel) is still usable for the next launch
    ok = launch(_smoke(dist__num_ranks=2), target=_ok, progress=False, echo=False)
    assert ok.results[0]["sum"] == [1.0, 1.0, 1.0] == ok.results[1]["sum"]


def test_a_hung_rank_times_out_with_a_clear_message():
    t0 = time.monotonic()
    with pytest.raises(RankFailedError) as err:
        launch(_smoke(dist__num_ranks=2, dist__timeout_s=3.0), target=_hang_on_rank_1, progress=False, echo=False)
    assert time.monotonic() - t0 < 60
    msg = str(err.value)
    assert err.value.rank == 0
    assert "collective timed out" in msg and "ranks [1] were still running" in msg
    _no_orphans(err.value.pids)


def test_a_rank_killed_by_a_signal_is_reported():
    def _die(cfg, *, info, log):
        if info.rank == 1:
            os.kill(os.getpid(), 9)
        time.sleep(30)
        return {}

    with pytest.raises(RankFailedError, match="rank 1 .*was killed by SIGKILL"):
        launch(_smoke(dist__num_ranks=2), target=_die, progress=False, echo=False)


# ---- the torchrun path (what GPUs and several machines use), exercised on CPU with gloo


def test_torchrun_launcher_trains_and_captures_on_cpu():
    cfg = _smoke(dist__launcher="torchrun", dist__backend="gloo", train__num_steps=3)
    result = launch(cfg, progress=False, echo=False)
    assert len({s["param_sha256"] for s in result.results.values()}) == 1
    assert result.traces().workers() == [0, 1, 2, 3]
    _no_orphans(result.pids)


def test_torchrun_launcher_reports_the_failing_rank():
    cfg = _smoke(dist__launcher="torchrun", dist__backend="gloo")
    cfg.capture.topk_scope = "tensor"
    cfg.capture.topk_tensors = ("*no_such_tensor*",)
    # every rank raises the same error here; the report names one of them and shows its traceback
    with pytest.raises(RankFailedError, match=r"(?s)rank [01] of run \S+ failed \(raised\).*matches no parameter"):
        launch(cfg, progress=False, echo=False)


def test_ensure_run_reuses_a_finished_run_with_the_same_config(capsys):
    from zen_analysis import paths
    from zen_analysis.runs.launch import ensure_run

    cfg = _smoke(train__num_steps=2)
    cfg.run_id = "ensure-run-test"
    assert ensure_run(cfg, progress=False, echo=False) == "ensure-run-test"
    manifest = paths.trace_dir("ensure-run-test") / "manifest.json"
    stamp = manifest.stat().st_mtime_ns
    assert ensure_run(cfg, progress=False, echo=False) == "ensure-run-test"
    assert manifest.stat().st_mtime_ns == stamp  # reused, not retrained
    assert "reusing run ensure-run-test: it finished with this config" in capsys.readouterr().out  # and says so
    cfg.train.num_steps = 3
    ensure_run(cfg, progress=False, echo=False)
    assert manifest.stat().st_mtime_ns != stamp  # a different config trains again


@pytest.mark.parametrize("how", ["text files", "save_to_disk"])
def test_the_smoke_recipe_trains_on_a_datasets_corpus(how, tmp_path):
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sources = [stdlib / f"{name}.py" for name in ("argparse", "csv", "textwrap")]
    sources += sorted((stdlib / "json").glob("*.py"))
    lines = [line for path in sources for line in path.read_text().splitlines()]
    if how == "text files":
        (tmp_path / "code.txt").write_text("\n".join(lines) + "\n")
        data = {"data__hf_builder": "text", "data__hf_files": (str(tmp_path / "code.txt"),)}
    else:
        datasets.Dataset.from_dict({"code": lines}).save_to_disk(str(tmp_path / "saved"))
        data = {"data__hf_disk": str(tmp_path / "saved"), "data__hf_column": "code"}
    cfg = _smoke(data__source="hf", data__max_bytes=0, train__num_steps=2, capture__enabled=False, **data)
    result = launch(cfg, progress=False, echo=False)
    prepared = json.loads((result.run_dir / "data.json").read_text())
    assert prepared["corpus_name"].startswith("hf:") and len(result.metrics()) == 2
    bad = _smoke(data__source="hf", **{**data, "data__hf_column": "body"})
    with pytest.raises(ValueError, match="data.hf_column='body'"):  # in the launcher, before any rank starts
        launch(bad, progress=False, echo=False)


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_a_pretrained_checkpoint_trains_and_its_embedding_is_captured(kind, tiny_checkpoint):
    spec = tiny_checkpoint(kind)
    cfg = _smoke(model__pretrained=spec, model__tie_embeddings=False, train__num_steps=2, capture__every=1)
    cfg.train.export = cfg.train.save_params = True
    result = launch(cfg, progress=False, echo=False)
    stored = json.loads((result.run_dir / "config.json").read_text())["model"]
    assert (stored["objective"], stored["tie_embeddings"]) == ("masked" if kind == "bert" else "causal", False)
    losses = result.metrics()["loss"]
    assert len(losses) == 2 and losses.notna().all()
    summary = result.traces().summary()
    natural = sorted(summary[summary["kind"] == "natural"]["tensor"].unique())
    embedding = "bert.embeddings.word_embeddings.weight" if kind == "bert" else "transformer.wte.weight"
    assert natural == [embedding] and (summary["kind"] == "topk").any()
    exported = load_exported(result.run_dir / "export").eval()  # the checkpoint's classes, the trained weights
    assert type(exported).__name__ == ("BertForMaskedLM" if kind == "bert" else "GPT2LMHeadModel")
    trained = torch.load(result.run_dir / "params.pt", weights_only=True)
    assert exported.state_dict().keys() == trained.keys()
    assert all(torch.equal(v, trained[k]) for k, v in exported.state_dict().items())
    assert AutoTokenizer.from_pretrained(result.run_dir / "export").vocab == AutoTokenizer.from_pretrained(spec).vocab
