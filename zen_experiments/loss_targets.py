"""When a run reaches a loss, in wall-clock time: :func:`time_to_loss` (seconds and steps to a target loss, on a
trailing mean) and :func:`time_to_quality` (a lossy run judged against stock DDP's loss at a step: the time it takes
to get there, and its loss gap at stock's time). ``bench train``'s top-k runs and the DDP-script sweep use them."""

from __future__ import annotations

from collections.abc import Sequence


def time_to_loss(
    losses: Sequence[float], step_times: Sequence[float], target: float, *, window: int = 5
) -> tuple[float, int]:
    """(wall-clock seconds, steps) a run took until the mean of its last ``window`` per-step losses first reached
    ``target``: the sum of its step times up to that step, the first one (set-up, Zen's static sets) included; (nan,
    -1) if it never did. A trailing mean, as one step's loss moves with its batch by more than the schemes differ."""
    for k in range(window - 1, len(losses)):
        if sum(losses[k - window + 1 : k + 1]) / window <= target:
            return float(sum(step_times[: k + 1])), k + 1
    return float("nan"), -1


def time_to_quality(
    losses: Sequence[float],
    step_times: Sequence[float],
    stock_losses: Sequence[float],
    stock_times: Sequence[float],
    target_step: int,
    *,
    window: int = 5,
) -> dict[str, float]:
    """A lossy run judged against fp32 stock DDP: ``target_loss`` (stock's mean loss over the ``window`` steps ending
    at ``target_step``), ``time_to_stock_loss_s`` / ``steps_to_stock_loss`` (:func:`time_to_loss` of this run to that
    loss: nan / -1 if it never got there) and ``loss_gap_at_equal_time`` (this run's trailing mean at its last step
    ended within the seconds stock took to ``target_step``, less ``target_loss``: positive is worse; nan if it had not
    done ``window`` steps by then). Both, because a variant faster per step but worse per step can win either way."""
    if not window - 1 <= target_step < len(stock_losses):
        raise ValueError(
            f"target_step {target_step} is outside stock's {len(stock_losses)} steps with a window of {window}: "
            f"choose {window - 1} <= target_step < {len(stock_losses)}"
        )
    target = sum(stock_losses[target_step - window + 1 : target_step + 1]) / window
    seconds, steps = time_to_loss(losses, step_times, target, window=window)
    budget, elapsed, gap = sum(stock_times[: target_step + 1]), 0.0, float("nan")
    for k, t in enumerate(step_times):
        elapsed += t
        if elapsed > budget:
            break
        if k >= window - 1:
            gap = sum(losses[k - window + 1 : k + 1]) / window - target
    return {
        "target_loss": target,
        "time_to_stock_loss_s": seconds,
        "steps_to_stock_loss": steps,
        "loss_gap_at_equal_time": gap,
    }
