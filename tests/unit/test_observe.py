"""The launch observers: throughput per step, forwarding to any fn(name, value, step), the live view's data."""

import math

import matplotlib

matplotlib.use("Agg")

from zen_analysis.plots.training_curves import LiveLoss, live_view  # noqa: E402
from zen_analysis.runs.observe import forward, tokens_per_s  # noqa: E402

ROWS = [
    {"step": s, "loss": 6.0 - s / 10, "step_s": 0.5, "tokens": 1000 * (s + 1), "captured": s == 0} for s in range(6)
]
ROWS[3]["val_loss"] = 5.9


def test_tokens_per_s_is_each_steps_tokens_over_its_time():
    assert tokens_per_s(ROWS) == [2000.0] * 6
    assert math.isnan(tokens_per_s([{"step": 0, "loss": 1.0}])[0])


def test_forward_sends_every_number_per_step_and_the_summary_at_the_end():
    calls = []
    f = forward(lambda name, value, step: calls.append((name, value, step)))
    f(ROWS[:2])
    f(ROWS[2:])  # a second batch: throughput continues from the first batch's last row
    f.finish({"val_loss": 5.5, "run_id": "x"}, None)
    assert [(v, s) for n, v, s in calls if n == "train/loss"] == [(r["loss"], r["step"]) for r in ROWS]
    assert [v for n, v, _ in calls if n == "train/tokens_per_s"] == [2000.0] * 6
    assert ("train/val_loss", 5.9, 3) in calls and ("final/val_loss", 5.5, 5) in calls
    assert not any(n.endswith(("captured", "step", "run_id")) for n, _, _ in calls)


def test_forward_flushes_a_summary_writer_like_object():
    class Writer:
        def __init__(self):
            self.scalars, self.flushed = [], False

        def add_scalar(self, tag, value, step):
            self.scalars.append(tag)

        def flush(self):
            self.flushed = True

    w = Writer()
    f = forward(w.add_scalar, keys=["loss"])
    f(ROWS)
    f.finish(None, RuntimeError("stopped"))
    assert w.scalars == ["train/loss"] * 6 and w.flushed


def test_the_live_view_has_every_step_and_the_final_validation_loss():
    fig = live_view(ROWS, title="t", final={"val_loss": 5.4})
    loss_ax, rate_ax = fig.axes
    train, val = loss_ax.lines[:2]
    assert list(train.get_xdata()) == list(range(6))
    assert list(val.get_xdata()) == [3, 5] and list(val.get_ydata()) == [5.9, 5.4]
    assert list(rate_ax.lines[0].get_ydata()) == [2000.0] * 6
    one = live_view(ROWS[:1]).axes[0]
    assert one.get_xlim()[1] - one.get_xlim()[0] >= 2  # a single step still gets a readable axis


def test_live_loss_draws_once_more_at_the_end_with_what_stopped_the_run():
    live = LiveLoss(every_s=1e9)
    live(ROWS[:1])
    live(ROWS[1:])  # throttled
    assert live.draws == 1
    live.finish({"val_loss": 5.4, "final_loss": 5.5, "tokens_per_s": 2000.0}, None)
    assert live.draws == 2 and live.title.startswith("finished: 6 steps") and "validation loss 5.400" in live.title
    live.finish(None, KeyboardInterrupt())
    assert live.title == "interrupted after 6 steps"
