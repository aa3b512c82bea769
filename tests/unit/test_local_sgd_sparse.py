"""Sparse pseudo-gradients (``local_sgd.compress=topk``): error feedback conserves mass, an anomalous worker sends
nothing and keeps its residual, ratio 1 is the dense method, and the outer step runs on the average of what the
workers selected (thread workers; the schemes themselves on gloo ranks are in tests/multirank)."""

import pytest
import torch

from tests.unit.test_local_sgd import Tiny, X, run_workers, shift, sync_rounds
from zen_analysis.local_sgd import LocalSGD, method_config
from zen_analysis.local_sgd.sparse_pseudo import PseudoGradientTopK


def test_error_feedback_conserves_mass_per_group_over_rounds():
    """Per worker and group: what it sent over the rounds plus its residual equals the sum of its pseudo-gradients,
    exactly on integer values (bit for bit) and to float rounding on real ones; a skipped round sends nothing."""
    gen = torch.Generator().manual_seed(3)
    for integer in (True, False):
        topk = PseudoGradientTopK(0.05, seed=1)
        shapes = {"root": 70_000, "blocks.0": 300}  # one above the sampled-threshold size, one exact
        sent_total = {k: torch.zeros(n, dtype=torch.float64) for k, n in shapes.items()}
        delta_total = {k: torch.zeros(n, dtype=torch.float64) for k, n in shapes.items()}
        for rnd in range(6):
            for key, n in shapes.items():
                delta = torch.randn(n, generator=gen) * 8
                delta = delta.round() if integer else delta
                skip = rnd == 3 and key == "root"
                before = topk.residuals.get(key, torch.zeros(n)).clone()
                sent, kept = topk.select(key, delta, worker=0, round=rnd, skip=skip)
                assert kept == int((sent != 0).sum())
                if skip:
                    assert kept == 0 and torch.equal(topk.residuals[key], before)
                    continue
                assert 0 < kept <= int(0.05 * n * 1.3) + 1
                delta_total[key] += delta.double()
                sent_total[key] += sent.double()
        for key in shapes:
            conserved = sent_total[key] + topk.residuals[key].double()
            if integer:
                assert torch.equal(conserved, delta_total[key])
            else:
                torch.testing.assert_close(conserved, delta_total[key], rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match="topk_ratio"):
        PseudoGradientTopK(0.0)
    with pytest.raises(ValueError, match="elements"):
        topk.select("root", torch.zeros(5), worker=0, round=9)


def test_ratio_one_equals_the_dense_method_and_a_small_ratio_moves_the_anchor_by_the_selection():
    offsets = [[0.1, -0.2, 0.05], [0.3, 0.0, -0.1], [0.02, 0.02, 0.5]]
    for method in ("diloco", "edit"):
        dense = sync_rounds(method_config(method, warmup_steps=0, ewma_warmup=1), offsets)
        full = sync_rounds(
            method_config(method, warmup_steps=0, ewma_warmup=1, compress="topk", topk_ratio=1.0), offsets
        )
        assert all(torch.equal(a, b) for (a, _), (b, _) in zip(dense, full))
        log = full[0][1]
        assert all(r["kept"] > 0 for r in log if not r.get("init") and not r["anomalous"])
        # natural: the whole pseudo-gradient, summed losslessly: the dense method's numbers, its density logged
        natural = sync_rounds(method_config(method, warmup_steps=0, ewma_warmup=1, compress="natural"), offsets)
        assert all(torch.equal(a, b) for (a, _), (b, _) in zip(dense, natural))
        densities = [r["density"] for r in natural[0][1] if not r.get("init")]
        assert all(0 <= d <= 1 for d in densities) and max(densities) > 0

    # outer lr 1, no momentum: the anchor moves by minus the average of the workers' selections, and what a worker
    # left out is in its residual
    cfg = method_config("diloco", outer_lr=1.0, outer_momentum=0.0, nesterov=False, compress="topk", topk_ratio=0.25)

    def fn(rank, coll):
        model = Tiny()
        eng = LocalSGD(cfg, collective=coll)
        eng.attach(model)
        ((_, params),) = eng._groups("root")  # the one global group, in the engine's order of parameters

        def in_order():
            return torch.cat([p.detach().reshape(-1) for p in params])

        model(X)  # the anchor
        start = in_order()
        gen = torch.Generator().manual_seed(10 + rank)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen))
        local = in_order()
        eng.step += cfg.interval
        model(X)
        return start, local, in_order(), eng.topk.residuals["global"].clone()

    out = run_workers(3, fn)
    start = out[0][0]
    sent = [(start - local) - residual for _, local, _, residual in out]  # delta = anchor - local
    for s in sent:
        assert 0 < int((s != 0).sum()) <= int(0.25 * s.numel()) + 1
    torch.testing.assert_close(out[0][2], start - sum(sent) / 3)
    assert all(torch.equal(out[0][2], o[2]) for o in out)


def test_anomalous_worker_keeps_its_residual_and_a_checkpoint_carries_the_residuals():
    cfg = method_config(
        "edit",
        warmup_steps=0,
        ewma_warmup=5,
        outer_lr=1.0,
        outer_momentum=0.0,
        nesterov=False,
        compress="topk",
        topk_ratio=0.1,
    )
    rounds = [[0.01 * (r + 1) * (1 + 0.1 * k) for r in range(3)] for k in range(6)] + [[0.01, 5.0, 0.01]]

    def fn(rank, coll):
        model = Tiny()
        eng = LocalSGD(cfg, collective=coll)
        eng.attach(model)
        model(X)
        for offsets in rounds:
            shift(model, offsets[rank])
            before = {k: v.clone() for k, v in eng.topk.residuals.items()}
            eng.step += cfg.interval
            model(X)
        anomalous = [r for r in eng.log if r.get("anomalous")]
        state = eng.state_dict()
        again = LocalSGD(cfg, collective=coll)
        again.load_state_dict(state)
        return anomalous, before, eng.topk.residuals, again.topk.residuals

    out = run_workers(3, fn)
    anomalous, before, after, restored = out[1]
    assert anomalous and all(r["kept"] == 0 for r in anomalous)
    for key in {r["group"] for r in anomalous}:
        assert torch.equal(before[key], after[key])
    assert not out[0][0]
    assert restored.keys() == after.keys() and all(torch.equal(restored[k], after[k]) for k in after)
    with pytest.raises(ValueError, match="compress"):
        LocalSGD(method_config("edit")).load_state_dict(
            {"step": 0, "sync_bytes": 0, "anchor": {}, "momentum": {}, "detectors": {}, "log": [], "topk": {}}
        )


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="compress"):
        method_config("edit", compress="lz4")
    with pytest.raises(ValueError, match="scheme"):
        method_config("edit", compress="topk", scheme="ring")
    with pytest.raises(ValueError, match="topk_ratio"):
        method_config("diloco", compress="topk", topk_ratio=1.5)
