"""Local SGD engine with a fake collective (worker threads, no processes): cadence, the pseudo-gradient's sign,
DiLoCo = averaging at outer lr 1, the EDiT penalty (anomaly elimination, weights, clipping, all-anomalous skip),
EDiT without penalty = DiLoCo, layer-wise = all-at-once."""

import threading

import pytest
import torch
from torch import nn

from zen_analysis.local_sgd import LocalSGD, LocalSGDConfig, method_config
from zen_analysis.local_sgd.collective import ThreadGroup
from zen_analysis.local_sgd.penalty import EWMADetector, clip_coefficient, softmax_weights


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.head = nn.Linear(4, 2)
        gen = torch.Generator().manual_seed(0)  # threads share the global RNG: a private one per model
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))

    def forward(self, x):
        h = self.embed(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


X = torch.tensor([1, 2, 3])


def run_workers(world, fn):
    group, out, errors = ThreadGroup(world), [None] * world, []

    def body(r):
        try:
            out[r] = fn(r, group.member(r))
        except Exception as exc:  # surface thread failures in the test
            errors.append(exc)
            group._barrier.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def shift(model, amount):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(amount)


def sync_rounds(cfg, offsets_per_round, world=3):
    """Each worker: attach, first sync (anchor), then per round shift its parameters by offsets[round][rank]
    and run a sync step's forward. Returns each worker's final parameters and log."""

    def fn(rank, coll):
        model = Tiny()
        eng = LocalSGD(cfg, collective=coll)
        eng.attach(model)
        eng.step = cfg.warmup_steps
        model(X)  # first sync: sets the anchor
        for offsets in offsets_per_round:
            shift(model, offsets[rank])
            eng.step += cfg.interval
            model(X)
        return flat(model), eng.log

    return run_workers(world, fn)


def test_cadence_and_first_sync_only_sets_the_anchor():
    eng = LocalSGD(LocalSGDConfig(warmup_steps=2, interval=3))
    assert [t for t in range(12) if eng.due(t)] == [2, 5, 8, 11]
    (p0, log0), *_ = sync_rounds(method_config("diloco"), [])
    assert torch.equal(p0, flat(Tiny())) and all(r.get("init") for r in log0)


def test_outer_lr_1_momentum_0_is_parameter_averaging_and_the_anchor_moves_toward_the_workers():
    base = flat(Tiny())
    avg_cfg = method_config("diloco", outer_lr=1.0, outer_momentum=0.0, nesterov=False)
    results = sync_rounds(avg_cfg, [[0.3, -0.1, 0.4]])
    for p, _ in results:
        torch.testing.assert_close(p, base + (0.3 - 0.1 + 0.4) / 3)
    # outer lr 0.5: halfway from the anchor towards the workers' average (anchor - local is the pseudo-gradient)
    half = sync_rounds(method_config("diloco", outer_lr=0.5, outer_momentum=0.0, nesterov=False), [[0.3, 0.3, 0.3]])
    torch.testing.assert_close(half[0][0], base + 0.15)


def test_nesterov_momentum_matches_torch_sgd():
    cfg = method_config("diloco", outer_lr=0.7, outer_momentum=0.9)
    results = sync_rounds(cfg, [[0.2, 0.2, 0.2], [0.1, 0.1, 0.1]])
    anchor = nn.Parameter(flat(Tiny()).clone())
    opt = torch.optim.SGD([anchor], lr=0.7, momentum=0.9, nesterov=True)
    local = anchor.detach().clone()
    for shift_by in (0.2, 0.1):
        local = anchor.detach() + shift_by
        anchor.grad = anchor.detach() - local
        opt.step()
    torch.testing.assert_close(results[0][0], anchor.detach())


def test_edit_without_penalty_equals_diloco_and_layerwise_equals_all_at_once():
    offsets = [[0.1, -0.2, 0.05], [0.3, 0.0, -0.1], [0.02, 0.02, 0.5]]
    diloco = sync_rounds(method_config("diloco", warmup_steps=0), offsets)
    no_penalty = method_config("edit", warmup_steps=0, anomaly=False, weighting=False, clip=0.0)
    torch.testing.assert_close(sync_rounds(no_penalty, offsets)[1][0], diloco[1][0])
    full = method_config("edit", warmup_steps=0, ewma_warmup=1, clip=0.5)
    layerwise = sync_rounds(full, offsets)
    at_once = sync_rounds(method_config("edit", warmup_steps=0, ewma_warmup=1, clip=0.5, layerwise=False), offsets)
    no_prefetch = sync_rounds(method_config("edit", warmup_steps=0, ewma_warmup=1, clip=0.5, prefetch=False), offsets)
    for (a, _), (b, _), (c, _) in zip(layerwise, at_once, no_prefetch):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, c)


def test_prefetch_starts_the_next_units_sync_before_finishing_this_one():
    events = []

    def fn(rank, coll):
        model = Tiny()
        eng = LocalSGD(method_config("edit", warmup_steps=0), collective=coll)
        eng.attach(model)
        begin, end = eng._begin_group, eng._end_group
        if rank == 0:
            eng._begin_group = lambda key, params: events.append(("begin", key)) or begin(key, params)
            eng._end_group = lambda state: events.append(("end", state["key"])) or end(state)
        model(X)  # the anchor sync, layer-wise with prefetch
        return eng

    run_workers(2, fn)
    # root (embed, head) at the model's hook; blocks.0 starts before root ends, blocks.1 before blocks.0 ends
    assert events == [
        ("begin", "root"),
        ("begin", "blocks.0"),
        ("end", "root"),
        ("begin", "blocks.1"),
        ("end", "blocks.0"),
        ("end", "blocks.1"),
    ]


def test_every_worker_holds_the_same_parameters_after_a_sync():
    results = sync_rounds(method_config("edit", warmup_steps=0), [[0.1, -0.4, 0.2]])
    assert all(torch.equal(results[0][0], p) for p, _ in results)


def test_anomalous_worker_is_zeroed_and_kept_out_of_the_ema():
    det = EWMADetector(alpha=0.1, warmup=5, threshold=3.0)
    for g in [1.0, 1.1, 0.9, 1.05, 0.95, 1.0]:
        assert not det.is_outlier(g)
        det.update(g)
    before = det.state()
    assert det.is_outlier(50.0) and det.z_score(50.0) > 3
    assert det.state() == before  # the engine calls update only for normal norms
    # in the engine: after 5 normal syncs, worker 0's huge pseudo-gradient is dropped
    cfg = method_config(
        "edit",
        warmup_steps=0,
        ewma_warmup=5,
        weighting=True,
        clip=0.0,
        outer_lr=1.0,
        outer_momentum=0.0,
        nesterov=False,
    )
    normal = [[0.01 * (r + 1) * (1 + 0.1 * k) for r in range(3)] for k in range(6)]
    results = sync_rounds(cfg, normal + [[5.0, 0.01, 0.01]])
    last = [r for r in results[0][1] if r["step"] == results[0][1][-1]["step"]]
    assert all(r["anomalous"] for r in last) and all(r["weight"] < 1e-6 for r in last)
    before = {r["group"]: r["ema_mean"] for r in results[0][1] if r["step"] == last[0]["step"] - cfg.interval}
    assert all(r["ema_mean"] == before[r["group"]] for r in last)  # the outlier did not enter the EMA
    others = [r for r in results[1][1] if r["step"] == last[0]["step"]]
    assert not any(r["anomalous"] for r in others)
    # the average excludes worker 0: everyone moved by ~0.01 (workers 1 and 2), not by ~1.7
    moved = results[0][0] - sync_rounds(cfg, normal)[0][0]
    assert float(moved.abs().max()) < 0.05


def test_all_anomalous_sync_is_skipped_and_leaves_the_anchor():
    cfg = method_config("edit", warmup_steps=0, ewma_warmup=3, clip=0.0)
    normal = [[0.01, 0.011, 0.012]] * 4
    results = sync_rounds(cfg, normal + [[9.0, 9.0, 9.0]])
    last = results[0][1][-1]
    assert last["skipped"] and last["anomalous"]
    # skipped: every worker is reset to the unchanged anchor, i.e. the state after the normal rounds
    torch.testing.assert_close(results[0][0], sync_rounds(cfg, normal)[0][0])


def test_softmax_weights_and_clip_coefficient():
    w = softmax_weights(torch.tensor([1.0, 2.0, 1e6 + 1.0]))
    assert float(w.sum()) == pytest.approx(1.0) and w[0] > w[1] and float(w[2]) == 0.0
    assert float(w[0] / w[1]) == pytest.approx(torch.e)
    assert clip_coefficient(20.0, 10.0) == pytest.approx(0.5, rel=1e-6) and clip_coefficient(5.0, 10.0) == 1.0
    assert clip_coefficient(1e9, 0.0) == 1.0
    # in the engine: an averaged pseudo-gradient of norm > clip is scaled down to the clip
    cfg = method_config(
        "edit",
        warmup_steps=0,
        anomaly=False,
        weighting=False,
        clip=0.01,
        granularity="global",
        outer_lr=1.0,
        outer_momentum=0.0,
        nesterov=False,
    )
    results = sync_rounds(cfg, [[1.0, 1.0, 1.0]])
    assert float((results[0][0] - flat(Tiny())).norm()) == pytest.approx(0.01, rel=1e-3)
    assert results[0][1][-1]["clip_coef"] < 1


def test_a_edit_time_rule_minimum_steps_rule_and_budget():
    cfg = method_config("a_edit", warmup_steps=1, sync_time_s=10.0, min_total_steps=5)
    schedule = [
        (0, 0.0, False),
        (1, 0.0, True),
        (3, 5.0, False),
        (4, 11.0, True),
        (5, 22.0, False),
        (6, 25.0, False),
        (9, 33.0, True),
    ]

    def fn(rank, coll):
        eng = LocalSGD(cfg, collective=coll)
        eng.step_budget = 18  # 2 workers x 9 steps
        out = []
        for step, now, _ in schedule:
            eng.step = step
            out.append(eng._decide(now))
        return out, eng.should_stop()

    for decisions, stop in run_workers(2, fn):
        # warm-up; first local step (anchor); 5 s < 10 s; 11 s and 8 - 2 = 6 >= 5 steps; 11 s later but only
        # 10 - 8 = 2 steps (skipped, timer reset at 22 s); 3 s after the reset; 11 s and 18 - 8 = 10 steps
        assert decisions == [want for _, _, want in schedule]
        assert stop  # 18 total steps reached the budget at the last sync


def test_config_section_overrides_and_time_based_guard():
    from zen_analysis import recipes
    from zen_analysis.config import LocalSGDSection, apply_overrides

    assert LocalSGDSection(penalty="clip").overrides()["clip"] == 10.0  # clipping on even where the method has none
    assert LocalSGDSection(penalty="anomaly").overrides() == {
        "layerwise": True,
        "prefetch": True,
        "compress": "none",  # the engine's word for local_sgd.compress=dense
        "scheme": "allreduce",  # sync.scheme's default
        "anomaly": True,
        "weighting": False,
        "clip": 0.0,
    }
    cfg = recipes.smoke()
    with pytest.raises(ValueError, match="time-based"):
        apply_overrides(cfg, ["sync.method=edit", "local_sgd.sync_time_s=2", "train.eval_every=5"])


def test_the_config_section_and_the_engine_config_name_a_setting_alike():
    """The ``local_sgd`` section holds overrides (sentinels: the method's default), ``LocalSGDConfig`` the resolved
    values; every setting of the section but ``penalty`` (anomaly, weighting, clip) is the engine field of that name."""
    from dataclasses import fields

    from zen_analysis.config import LocalSGDSection
    from zen_analysis.local_sgd import LocalSGDConfig

    section = {f.name for f in fields(LocalSGDSection)}
    engine = {f.name for f in fields(LocalSGDConfig)}
    assert section - {"penalty"} <= engine
    full = LocalSGDSection(
        warmup_steps=1,
        interval=2,
        outer_lr=0.5,
        outer_momentum=0.5,
        clip=1.0,
        penalty="anomaly,clip",
        granularity="tensor",
        ewma_warmup=2,
        sync_time_s=3.0,
        min_total_steps=4,
        step_weight=0.5,
        compress="topk",
        topk_ratio=0.05,
    )
    assert set(full.overrides("agsparse")) <= engine  # the scheme is sync.scheme's, passed in
    assert method_config("a_edit", **full.overrides("agsparse")).sync_time_s == 3.0
    assert (
        method_config("edit").clip
        == method_config("a_edit").clip
        == LocalSGDSection(penalty="clip").overrides()["clip"]
    )


def test_spike_schedule_and_ideal_straggler_speedup():
    from zen_analysis.config import PerturbConfig
    from zen_analysis.train.perturbations import spike_step
    from zen_experiments.local_sgd_runs import ideal_straggler_speedup

    every = PerturbConfig(spikes="random", spike_every=10)
    assert [s for s in range(35) if spike_step(every, s)] == [10, 20, 30]  # never step 0
    burst = PerturbConfig(spikes="random", spike_every=20, spike_len=4, spike_start=30)
    assert [s for s in range(80) if spike_step(burst, s)] == [30, 31, 32, 33, 50, 51, 52, 53, 70, 71, 72, 73]
    with pytest.raises(ValueError, match="spike_len"):
        PerturbConfig(spikes="random", spike_every=4, spike_len=5)
    # one 2x straggler: EDiT runs at its pace, A-EDiT adds the others' full speed
    assert ideal_straggler_speedup(2, 2.0) == pytest.approx(1.5)
    assert ideal_straggler_speedup(4, 2.0) == pytest.approx(1.75)
    assert ideal_straggler_speedup(4, 1.0) == pytest.approx(1.0)


def test_the_ablation_marks_the_steps_its_spike_knobs_corrupt():
    from zen_analysis import recipes
    from zen_experiments.local_sgd_runs import ABLATION_SPIKES, corrupted_steps

    base = recipes.default()
    base.train.num_steps = 160
    steps = corrupted_steps(base, ABLATION_SPIKES)
    start, every, length = (ABLATION_SPIKES[f"perturb.spike_{k}"] for k in ("start", "every", "len"))
    assert steps[:length] == list(range(start, start + length)) and steps[length] == start + every
    assert all(0 <= s < 160 for s in steps) and corrupted_steps(base, {}) == []


@pytest.mark.parametrize("prefetch", [True, False])
def test_slow_link_serialises_prefetched_all_reduces(prefetch):
    import time

    link = 0.05  # seconds per all-reduce on the emulated link; Tiny has 3 units (root, blocks.0, blocks.1)

    def fn(rank, coll):
        model = Tiny()
        eng = LocalSGD(method_config("edit", warmup_steps=0, interval=1, prefetch=prefetch), collective=coll)
        eng.attach(model)
        eng.link_seconds = lambda nbytes: link
        model(X)  # the anchor: no all-reduce
        eng.step += 1
        shift(model, 0.1 * (rank + 1))
        t0 = time.perf_counter()
        model(X)  # a sync of 3 units: in flight together or not, the link carries them one after another
        return time.perf_counter() - t0

    assert min(run_workers(2, fn)) >= 3 * link * 0.95
