"""The communication-dominated lab's arithmetic, without ranks: the stand-in's sets, the scaling to the lab (a
consistent sample that keeps density, overlap, gamma and skew), the dilation, the compute slept and the verdict."""

import pandas as pd
import pytest

from zen_analysis.experiments import lab_check
from zen_analysis.experiments.paper_scale import DEVICES
from zen_analysis.experiments.paper_stand_in import STAND_INS, StandInWorkload, stand_in


def _tiny(**changes) -> StandInWorkload:
    fields = dict(
        name="tiny",
        kind="natural",
        num_rows=40_000,
        width=64,
        scale=1.0,
        dense_params=1e6,
        samples_per_gpu=8,
        tokens_per_gpu=512,
        density=0.02,
        synthetic="test sets",
        skew=2.0,
        overlap=0.4,
    )
    return StandInWorkload(**(fields | changes))


def test_the_stand_in_draws_the_papers_density_and_refuses_what_it_lacks():
    wl = stand_in("lstm")
    assert (wl.num_rows, wl.width, wl.density, wl.dense_params) == (793_471, 512, 0.0113, 20e6)
    sets = _tiny().row_sets(4, step=1, seed=3)
    assert [s.numel() for s in sets] == [800] * 4 and all(bool((s[1:] > s[:-1]).all()) for s in sets)
    assert not all(bool((a == b).all()) for a, b in zip(sets, _tiny().row_sets(4, step=2, seed=3)))
    with pytest.raises(ValueError, match="stand-in generator has"):
        stand_in("llama")
    assert set(STAND_INS) == {"lstm", "deepfm"}


def test_the_lab_sample_keeps_the_sets_statistics_and_says_its_factor():
    got = lab_check.lab_sets(_tiny(), 8, steps=2, rows=10_000, width=16)
    assert got.num_rows == 10_000 and got.width == 16 and len(got.sets_by_step) == 2
    assert got.scale == pytest.approx(40_000 * 64 / (10_000 * 16))
    s = got.stats
    assert s["lab_density"] == pytest.approx(s["paper_density"], rel=0.1)
    assert s["lab_overlap_ratio"] == pytest.approx(s["paper_overlap_ratio"], rel=0.15)
    assert s["lab_gamma"] == pytest.approx(s["paper_gamma"], rel=0.1)
    assert s["lab_skewness_ratio"] == pytest.approx(s["paper_skewness_ratio"], rel=0.15)
    assert all(int(x.max()) < 10_000 for x in got.sets_by_step[0])
    flat = lab_check.lab_sets(_tiny(kind="topk", width=1, scale=5.0), 4, rows=10_000)
    assert flat.width == 0 and flat.scale == pytest.approx(40_000 * 5 / 10_000)


def test_compute_is_the_paper_scale_models_and_dilates_with_the_links():
    seconds, source = lab_check.paper_compute(_tiny(), "v100")
    assert seconds == pytest.approx(6 * 1e6 * 512 / DEVICES["v100"].flops) and source.startswith("assumed")
    top, _ = lab_check.paper_compute(_tiny(kind="topk", width=1, scale=10.0), "v100")  # every parameter
    assert top == pytest.approx(6 * 40_000 * 10 * 512 / DEVICES["v100"].flops)
    assert lab_check.dilation(64.0, 1.0) == pytest.approx(25 / 64) and lab_check.dilation(25.0, 0.5) == 2.0


def _table(measured, modelled, equal=True):
    names = ["allreduce", "agsparse", "zen"]
    df = pd.DataFrame({"scheme": names, "measured_s": measured, "modelled_s": modelled, "equal": equal})
    df["compute_s"] = 0.1
    df["comm_measured_s"] = df["measured_s"] - 0.1
    df["comm_modelled_s"] = df["modelled_s"] - 0.1
    return lab_check._ranked(df.assign(ranks=8))


def test_the_verdict_sees_each_way_the_acceptance_can_fail():
    ok = lab_check.verdict(_table([1.0, 0.5, 0.3], [1.1, 0.55, 0.28]))
    assert "every scheme: True" in ok and "ranking equal: True" in ok and "zen ok True" in ok
    assert "compute 10% of the slowest step" in ok
    off = lab_check.verdict(_table([1.0, 0.5, 0.3], [1.1, 0.9, 0.28]))
    assert "every scheme: False (worst agsparse 1.80)" in off
    swapped = lab_check.verdict(_table([1.0, 0.5, 0.3], [1.1, 0.25, 0.28]))
    assert "ranking equal: False (measured zen where the model has agsparse)" in swapped
    assert "fastest measured zen, modelled agsparse: zen ok True" in swapped
    zen_not = lab_check.verdict(_table([1.0, 0.25, 0.3], [1.1, 0.5, 0.28]))
    assert "zen ok False" in zen_not
    assert "sums equal False" in lab_check.verdict(_table([1.0, 0.5, 0.3], [1.1, 0.55, 0.28], [True, True, False]))
