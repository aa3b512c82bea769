"""The DDP sweep's judgement of lossy variants (issue 42): time to fp32 stock DDP's loss at a fixed step and the
loss gap at stock's time, and which baseline a lossless variant is held to."""

import math

import pytest

from zen_experiments.ddp_sweep import DDP_DEFAULT_VARIANTS, DDP_VARIANTS, LOSSLESS_BASELINE
from zen_experiments.loss_targets import time_to_quality


def test_time_to_quality_reaches_stocks_loss_later_and_reports_the_gap_at_stocks_time():
    stock, stock_s = [5.0, 4.0, 3.0, 2.0], [1.0, 1.0, 1.0, 1.0]
    # twice as fast per step, worse per step: reaches stock's target (mean of steps 1-2 = 3.5) at its step 4
    lossy, lossy_s = [5.0, 4.5, 4.0, 3.5, 3.0, 2.5], [0.5] * 6
    q = time_to_quality(lossy, lossy_s, stock, stock_s, 2, window=2)
    assert q["target_loss"] == 3.5
    assert (q["time_to_stock_loss_s"], q["steps_to_stock_loss"]) == (2.5, 5)  # mean(3.5, 3.0) <= 3.5 at step 4
    # stock took 3 s to its step 2; by then the lossy run ended step 5: mean(3.0, 2.5) - 3.5
    assert q["loss_gap_at_equal_time"] == pytest.approx(-0.75)


def test_time_to_quality_never_reached_and_too_slow_for_a_window():
    q = time_to_quality([9.0, 9.0, 9.0], [10.0] * 3, [5.0, 4.0, 3.0], [1.0] * 3, 2, window=2)
    assert math.isnan(q["time_to_stock_loss_s"]) and q["steps_to_stock_loss"] == -1
    assert math.isnan(q["loss_gap_at_equal_time"])  # not one window of steps within stock's 3 s
    with pytest.raises(ValueError, match="target_step 0 is outside"):
        time_to_quality([1.0], [1.0], [1.0], [1.0], 0, window=2)


def test_the_variants_users_already_have_and_their_baselines():
    for name in ("stock-sparse", "natural-sparse", "fp16", "bf16", "powersgd-1", "powersgd-2", "powersgd-4"):
        assert name in DDP_VARIANTS
    assert DDP_VARIANTS["powersgd-4"][-2:] == ["--powersgd-rank", "4"]
    assert set(DDP_DEFAULT_VARIANTS) <= set(DDP_VARIANTS) and "stock" in DDP_DEFAULT_VARIANTS
    assert LOSSLESS_BASELINE == {"natural": "stock", "natural-sparse": "stock-sparse", "stock-sparse": "natural-sparse"}
