"""Local SGD methods in real training on 4 gloo ranks: every worker holds the same parameters after the final
sync; DiLoCo at outer lr 1 / momentum 0 is Post-Local SGD's averaging; EDiT without its penalty is DiLoCo;
layer-wise sync equals all-at-once; EDiT's per-sync log is written."""

import copy
import json

import pytest

from zen_analysis import paths, recipes
from zen_analysis.runs.launch import launch


def _run(method: str, tag: str, sync: dict | None = None, train: dict | None = None, **local):
    cfg = recipes.smoke()
    cfg.name = cfg.run_id = f"localsgd-{method}-{tag}"
    cfg.dist.num_ranks = 4
    cfg.train.workers_per_rank = 1
    cfg.train.num_steps = 12
    cfg.capture.enabled = False
    cfg.sync.method = method
    cfg.sync.scheme = local.pop("scheme", "allreduce")  # what sums a sparse pseudo-gradient
    for key, value in {"warmup_steps": 2, "interval": 3, **local}.items():
        setattr(cfg.local_sgd, key, value)
    for key, value in (sync or {}).items():
        setattr(cfg.sync, key, value)
    for key, value in (train or {}).items():
        setattr(cfg.train, key, value)
    result = launch(copy.deepcopy(cfg), echo=False, progress=False)
    digests = {r["param_sha256"] for r in result.results.values()}
    assert len(digests) == 1, f"{method}/{tag}: ranks differ after the final sync"
    return result.metrics()["loss"].tolist(), digests.pop(), cfg.run_id, result.summary


def test_local_sgd_identities_on_gloo():
    plsgd = _run("post_local_sgd", "avg")
    diloco_avg = _run("diloco", "avg", outer_lr=1.0, outer_momentum=0.0, granularity="global")
    assert diloco_avg[1] == plsgd[1] and diloco_avg[0] == plsgd[0]
    diloco = _run("diloco", "ref", ewma_warmup=1)
    edit_plain = _run("edit", "nopenalty", penalty="none", granularity="module")
    assert edit_plain[0] == pytest.approx(diloco[0], rel=1e-6, abs=1e-6)
    layerwise = _run("edit", "layerwise", ewma_warmup=1)
    at_once = _run("edit", "atonce", ewma_warmup=1, layerwise=False)
    no_prefetch = _run("edit", "noprefetch", ewma_warmup=1, prefetch=False)  # layerwise runs prefetch async all-reduces
    assert layerwise[1] == at_once[1] == no_prefetch[1]
    rows = [
        json.loads(line)
        for line in (paths.run_dir(layerwise[2]) / "local_sgd" / "rank1.jsonl").read_text().splitlines()
    ]
    synced = [r for r in rows if not r.get("init")]
    assert synced and {"norm", "z", "weight", "clip_coef", "skipped", "anomalous"} <= set(synced[0])
    assert {r["step"] for r in rows} >= {2, 5, 8, 11}  # warm-up 2, every 3 steps (+ the final forced sync)


def test_a_edit_lets_fast_workers_run_ahead_of_a_consistent_straggler():
    cfg = recipes.smoke()
    cfg.name = cfg.run_id = "localsgd-a_edit-straggler"
    cfg.dist.num_ranks = 4
    cfg.train.workers_per_rank = 1
    cfg.train.num_steps = 16
    cfg.train.eval_every = 0
    cfg.capture.enabled = False
    cfg.sync.method = "a_edit"
    cfg.local_sgd.warmup_steps = 2
    cfg.local_sgd.sync_time_s = 0.5
    cfg.local_sgd.min_total_steps = 1
    cfg.perturb.straggler = "consistent"
    cfg.perturb.straggler_rank = 3
    cfg.perturb.straggler_factor = 4.0
    result = launch(copy.deepcopy(cfg), echo=False, progress=False)
    assert len({r["param_sha256"] for r in result.results.values()}) == 1  # one global model at the end
    assert result.summary["total_steps_all_ranks"] >= 16 * 4  # the budget, reached at a sync
    done = {r: s["steps_done"] for r, s in result.results.items()}
    assert done[0] > 1.5 * done[3], done  # fast workers kept training while the 4x straggler was slow
    assert sum(done.values()) == result.summary["total_steps_all_ranks"]


def _smoke(tag, **settings):
    from zen_analysis.config import apply_overrides

    cfg = recipes.smoke()
    cfg.name = cfg.run_id = f"perturb-{tag}"
    cfg.dist.num_ranks = 2
    cfg.train.num_steps = 8
    cfg.capture.enabled = False
    cfg = apply_overrides(cfg, [f"{k}={v}" for k, v in settings.items()])
    result = launch(cfg, echo=False, progress=False)
    return result.metrics(), result.summary


def test_spikes_corrupt_only_their_steps_and_a_slow_link_slows_every_sync():
    clean, summary = _smoke("clean")
    spiky, _ = _smoke("spiky", **{"perturb.spikes": "random", "perturb.spike_every": 4})
    assert spiky["loss"][:4].tolist() == clean["loss"][:4].tolist()  # identical until the first corrupted batch
    assert spiky["loss"][4] > clean["loss"][4] + 0.05  # random tokens on rank 0: higher loss (small this early)
    slow, _ = _smoke("slow", **{"perturb.bandwidth_gbps": 0.02, "perturb.latency_s": 0.01})
    # every step all-reduces all float32 gradients over 2 ranks: at least latency + bytes / bandwidth more
    delay = 0.01 + 4 * summary["num_params"] / (0.02e9 / 8)
    # a lower bound holds under any load (a median comparison between two runs does not, on shared cores)
    assert slow["step_s"].min() >= delay > 2 * clean["step_s"].min()


def test_sparse_pseudo_gradients_sum_alike_through_every_scheme():
    """``local_sgd.compress=topk``: EDiT's top-k pseudo-gradients with error feedback, summed by Zen (or whatever
    ``auto`` picks per sync group), equal those summed by a dense all-reduce of the same selections (to summation
    order), every rank holds the same parameters, and Zen sends fewer bytes per outer sync than the dense all-reduce
    of the whole model."""
    runs = {}
    for s in ("zen", "allreduce", "auto"):
        sync = {"planner_topology": "paper-tcp25"} if s == "auto" else None  # a preset: nothing to calibrate
        runs[s] = _run("edit", f"topk-{s}", sync, ewma_warmup=1, compress="topk", topk_ratio=0.05, scheme=s)
    summaries = {s: run[3] for s, run in runs.items()}
    assert runs["zen"][0] == pytest.approx(runs["allreduce"][0], rel=1e-5, abs=1e-6)
    assert runs["auto"][0] == pytest.approx(runs["allreduce"][0], rel=1e-5, abs=1e-6)
    decisions = summaries["auto"]["planner"]
    assert decisions and all(d["scheme"] in d["modelled_s"] for d in decisions.values())
    assert summaries["zen"]["sync"]["bytes_per_sync"] > 0 and "planner" not in summaries["zen"]
    sent = {}
    for s, (_, _, run_id, _) in runs.items():
        if s == "auto":
            continue
        rows = [
            json.loads(line) for line in (paths.run_dir(run_id) / "local_sgd" / "rank0.jsonl").read_text().splitlines()
        ]
        synced = [r for r in rows if not r.get("init")]
        assert synced and all(r["kept"] > 0 for r in synced if not r["anomalous"])
        sent[s] = sum(r["bytes_sent"] for r in synced)
    assert 0 < sent["zen"] < sent["allreduce"]


@pytest.mark.smoke
def test_natural_pseudo_gradients_sum_losslessly_and_skip_untouched_rows():
    """``local_sgd.compress=natural``: the whole pseudo-gradient through Zen gives dense EDiT's losses (to summation
    order). Under ``train.embedding_update=lazy`` the rows no worker's batches touched keep their weights, so the
    embedding's pseudo-gradient has exact zeros (logged ``density`` < 1) and Zen sends fewer bytes for its group than
    the dense all-reduce would; the dense blocks' density is 1."""
    lazy = {"embedding_update": "lazy"}
    dense = _run("edit", "natural-dense", None, lazy, ewma_warmup=1)
    natural = _run("edit", "natural-zen", None, lazy, ewma_warmup=1, compress="natural", scheme="zen")
    assert natural[0] == pytest.approx(dense[0], rel=1e-5, abs=1e-6)
    rows = [
        json.loads(line) for line in (paths.run_dir(natural[2]) / "local_sgd" / "rank0.jsonl").read_text().splitlines()
    ]
    synced = [r for r in rows if not r.get("init") and not r["anomalous"]]
    embedding = [r for r in synced if r["embedding"]]
    blocks = [r for r in synced if "layers" in r["group"]]
    assert embedding and blocks
    # the smoke model's embedding shares its group (the root module's own parameters) with the final norm
    assert all(0 < r["density"] < 0.8 for r in embedding) and all(r["density"] > 0.9 for r in blocks)
    assert all(r["bytes_sent"] < 2 * 3 / 4 * r["numel"] * 4 for r in embedding)  # under the ring all-reduce's


def test_the_density_experiment_reads_the_embeddings_own_share():
    """``pseudo_gradient_density``: AdamW with weight decay moves every embedding row (density 1); the lazy update
    leaves the untouched rows exactly (density < 1), read from the embedding's own slice of its sync group."""
    from zen_experiments.pseudo_gradients import pseudo_gradient_density

    base = recipes.smoke()
    base.name = "density-smoke"
    base.dist.num_ranks = 2
    base.train.workers_per_rank = 1
    base.train.num_steps = 8
    table = pseudo_gradient_density(
        [base],
        updates=["adamw", "lazy embedding"],
        **{"local_sgd.warmup_steps": 2, "local_sgd.interval": 3, "local_sgd.ewma_warmup": 1},
    ).set_index("update")
    assert table.loc["adamw", "embedding_density"] == 1.0
    assert 0 < table.loc["lazy embedding", "embedding_density"] < table.loc["lazy embedding", "group_density"] <= 1
    assert (table["other_density_median"] == 1.0).all() and (table["syncs"] >= 2).all()
    assert 0 < table.loc["adamw", "embedding_share"] < 1


def test_pseudo_gradient_capture_records_what_each_worker_syncs_and_characterizes_like_gradients():
    """``capture.pseudo=all`` with top-k pseudo-gradients: at every outer sync each rank records, per sync group, its
    pseudo-gradient before selection (``pseudo``: the logged density) and its weighted selection (``pseudo_topk``:
    the logged count kept); the selections of all ranks sum to what the scheme summed (the logged norm of the
    average), and the gradient capture of the same run goes on beside them. ``characterize``, ``evaluate``, the
    explorer and the claims table read them as they read gradients."""
    import numpy as np

    from zen_analysis.capture.reader import TraceReader
    from zen_analysis.evaluation.evaluate import evaluate, step_index_sets
    from zen_analysis.interface.explore import explore_stats
    from zen_analysis.sparsity.characterize import load_tables
    from zen_experiments.pseudo_gradients import pseudo_gradient_claims

    base = recipes.smoke()
    base.name = "localsgd-pseudo"  # (a run name with "pseudo" in it: the signal column reads the kinds, not names)
    base.dist.num_ranks = 4
    base.train.workers_per_rank = 1
    base.train.num_steps = 12
    settings = {"warmup_steps": 2, "interval": 3, "ewma_warmup": 1, "topk_ratio": 0.05}
    claims = pseudo_gradient_claims(base, mode="all", **{f"local_sgd.{k}": v for k, v in settings.items()})
    run_id = claims.attrs["run_id"]
    signals = claims.groupby("workload")["signal"].first()
    assert signals["localsgd-pseudo: llama embedding"] == "gradient"
    assert signals["localsgd-pseudo: llama top-5% pseudo-gradient"] == "pseudo-gradient"
    assert signals["localsgd-pseudo: llama pseudo-gradient, embedding's group"] == "pseudo-gradient"
    assert set(signals) == {"gradient", "pseudo-gradient"}

    reader = TraceReader(run_id)
    tensors = reader.manifest["tensors"]
    assert reader.manifest["finished"]
    groups = [t.split("/", 1)[1] for t, i in tensors.items() if i["kind"] == "pseudo"]
    assert "root" in groups and len(groups) == 3  # the root module and the smoke Llama's two blocks
    for g in groups:
        info = tensors[f"pseudo_topk/{g}"]
        assert info["params"][-1][2] == info["numel"] == tensors[f"pseudo/{g}"]["numel"]
    assert tensors["pseudo/root"]["embedding"] and any(i["kind"] == "natural" for i in tensors.values())

    logs = {
        r: [json.loads(line) for line in (paths.run_dir(run_id) / "local_sgd" / f"rank{r}.jsonl").open()]
        for r in range(4)
    }
    synced = {(row["step"], row["group"], r): row for r, rows in logs.items() for row in rows if not row.get("init")}
    sync_steps = sorted({s for s, _, _ in synced})
    assert len(sync_steps) >= 3  # steps 5, 8, 11 and the final sync
    summary = reader.summary()
    assert set(summary[summary["kind"] == "pseudo"]["step"]) == set(sync_steps)
    assert reader.steps("pseudo_topk/root") == sync_steps and reader.steps() == sorted({0, 3, 6, 9, *sync_steps})
    sets, numel = step_index_sets(run_id, tensor="pseudo_topk/root")  # at the tensor's first step, not the run's
    assert len(sets) == 4 and numel == tensors["pseudo_topk/root"]["numel"] and all(len(s) for s in sets)
    for step in sync_steps:
        for g in groups:
            recs = {
                (rec.kind, rec.worker): rec
                for rec in reader.records(step=step)
                if rec.tensor in (f"pseudo/{g}", f"pseudo_topk/{g}")
            }
            assert len(recs) == 8
            for r in range(4):
                row = synced[(step, g, r)]
                if not row["anomalous"]:  # the log's density is of what enters selection: 0 for an anomalous one
                    assert recs[("pseudo", r)].density == pytest.approx(row["density"], abs=1e-9)
                assert recs[("pseudo_topk", r)].nnz == (0 if row["anomalous"] else row["kept"])
            total = sum(recs[("pseudo_topk", r)].to_dense().double() for r in range(4))
            assert float(total.norm()) == pytest.approx(synced[(step, g, 0)]["avg_norm"], rel=1e-4)
    natural = summary[summary["kind"] == "natural"]
    assert sorted(natural["step"].unique()) == [0, 3, 6, 9] and natural["worker"].nunique() == 4

    tables = load_tables(run_id)
    dens = tables["density"].set_index(["tensor", "step", "worker"])["density"]
    for g in groups:
        topk = dens.xs(f"pseudo_topk/{g}", level="tensor")
        assert 0 < topk.median() <= 0.05 * 1.3
        assert dens.xs(f"pseudo/{g}", level="tensor").median() > 0.5
    overlap = tables["overlap"]
    sel_overlap = overlap[overlap["tensor"].str.startswith("pseudo_topk/")]["overlap"].dropna()  # NaN: an empty set
    assert len(sel_overlap) >= 3 * 6 and sel_overlap.between(0, 1).all() and sel_overlap.max() < 1
    assert set(claims["claim"].str[:2]) == {"C1", "C2", "C3"}
    assert signals["localsgd-pseudo: llama pseudo-gradient, other groups"] == "pseudo-gradient"
    modelled = evaluate(run_id, topologies=["paper-tcp25"], schemes=["allreduce", "zen", "agsparse"], progress=False)
    sel = modelled[(modelled["tensor"] == "pseudo_topk/root") & (modelled["n"] == 4)]
    assert set(sel["scheme"]) == {"allreduce", "zen", "agsparse"}
    zen, dense = (sel[sel["scheme"] == s]["bytes_sent_total"].mean() for s in ("zen", "allreduce"))
    assert zen < dense
    stats = explore_stats(run_id, "pseudo_topk/root", sync_steps[0], 4, 8, "element")
    assert len(stats["workers"]) == 4 and np.isfinite(stats["gamma"]).all()
