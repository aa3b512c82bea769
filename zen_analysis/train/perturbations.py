"""``cfg.perturb``: what a training run does to itself to emulate a worse cluster — stragglers (a rank sleeps
for a share of its compute), loss spikes (a rank gets corrupted batches) and a slow link (every all-reduce also
waits as long as it would take at ``perturb.bandwidth_gbps``). They come in from outside the loop:
:func:`perturbed_batches` wraps a step's micro-batches (the spikes, then the straggler's sleep once the last is
consumed), and :func:`slow_link` hands the sync the link's price
(:meth:`~zen_analysis.sync.grad_sync.GradSync.set_link`); the algorithms know nothing else of them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator

import torch

from zen_analysis.config import ExperimentConfig
from zen_analysis.ranks.env import RankInfo
from zen_analysis.sync.grad_sync import GradSync
from zen_analysis.wire.exchange import ring_volume


def spike_step(p, step: int) -> bool:
    """Whether ``step`` is a corrupted one under :class:`~zen_analysis.config.PerturbConfig` ``p``."""
    start = p.spike_start or p.spike_every
    return step >= start and (step - start) % p.spike_every < p.spike_len


def spiked(
    cfg: ExperimentConfig, info: RankInfo, step: int, x: torch.Tensor, y: torch.Tensor, vocab: int, micro: int = 0
):
    """``cfg.perturb.spikes``: rank ``spike_rank`` gets corrupted batches for ``spike_len`` steps every
    ``spike_every`` steps from ``spike_start``."""
    p = cfg.perturb
    if p.spikes == "none" or info.rank != p.spike_rank or not spike_step(p, step):
        return x, y
    gen = torch.Generator().manual_seed(cfg.train.seed + step + 1_000_003 * micro)  # each micro-batch its own
    seq = torch.cat([x, y[:, -1:]], dim=1)
    if p.spikes == "shuffle":
        seq = seq[:, torch.randperm(seq.shape[1], generator=gen)]
    elif p.spikes == "repeat":
        seq = torch.randint(0, vocab, (seq.shape[0], 1), generator=gen, dtype=seq.dtype).expand_as(seq)
    else:
        seq = torch.randint(0, vocab, seq.shape, generator=gen, dtype=seq.dtype)
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def perturbed_batches(
    cfg: ExperimentConfig,
    info: RankInfo,
    batches: Iterator[tuple[int, torch.Tensor, torch.Tensor]],
    *,
    step: int,
    vocab: int,
    compute_s: Callable[[], float],
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """One step's micro-batches, (worker, inputs, targets), as ``cfg.perturb`` makes them: the spiking rank's
    corrupted (:func:`spiked`, micro-batch by micro-batch); once the last is consumed, and whatever ``batches`` does
    after its last, the straggler's sleep, a share of ``compute_s()`` (the step's compute time so far, syncs made
    during it left out)."""
    straggle = straggler(cfg, info)
    for micro, (worker, x, y) in enumerate(batches):
        yield worker, *spiked(cfg, info, step, x, y, vocab, micro=micro)
    straggle(step, compute_s())


def slow_link(sync: GradSync, cfg: ExperimentConfig, world: int) -> None:
    """``perturb.bandwidth_gbps``: every cross-worker all-reduce of ``sync`` also pays the slow link (before
    :meth:`~zen_analysis.sync.grad_sync.GradSync.attach`); nothing when off."""
    if cfg.perturb.bandwidth_gbps > 0:
        sync.set_link(
            lambda nbytes: network_delay(cfg, nbytes, world),
            lambda nbytes: network_seconds(cfg, nbytes, world),
        )


def network_seconds(cfg: ExperimentConfig, nbytes: int, world: int) -> float:
    """``cfg.perturb.bandwidth_gbps``: how long a ring all-reduce of ``nbytes`` takes on that link (0 when off)."""
    p = cfg.perturb
    if p.bandwidth_gbps > 0 and world > 1:
        return p.latency_s + ring_volume(nbytes, world) / (p.bandwidth_gbps * 1e9 / 8)
    return 0.0


def network_delay(cfg: ExperimentConfig, nbytes: int, world: int) -> None:
    """Sleep :func:`network_seconds` (a blocking all-reduce on the slow link, on top of the real one)."""
    seconds = network_seconds(cfg, nbytes, world)
    if seconds > 0:
        time.sleep(seconds)


def straggler(cfg: ExperimentConfig, info: RankInfo):
    """A function (step, compute seconds) -> None that sleeps as ``cfg.perturb`` says (a real slowdown)."""
    p = cfg.perturb
    if p.straggler == "consistent":
        extra = p.straggler_factor - 1.0

        def consistent(step: int, seconds: float) -> None:
            if info.rank == p.straggler_rank and extra > 0:
                time.sleep(extra * seconds)

        return consistent
    if p.straggler == "random":

        def rand(step: int, seconds: float) -> None:
            rng = random.Random(cfg.train.seed * 1_000_003 + step)  # the same draw on every rank
            if rng.random() < p.straggler_prob and rng.randrange(info.world_size) == info.rank:
                time.sleep(p.straggler_kappa * seconds)

        return rand
    return lambda step, seconds: None
