"""Sparse pseudo-gradients: each worker's top-k of its pseudo-gradient plus an error-feedback residual, per sync
group, summed by a sparse scheme (``local_sgd.compress=topk``).

The low-bandwidth local-SGD work (SparseLoCo, DeMo) sends 1-3% of the pseudo-gradient per outer sync and keeps the
rest for later. Every worker picks different coordinates, so the sum of the selections is a sparse sum with skewed,
partly overlapping sets: the regime of Zen's Balanced Parallelism. This module holds the selection and the
residuals, and :class:`SparseSum`, the sum of the selections by a scheme (or the planner's choice per group);
:class:`~zen_analysis.local_sgd.engine.LocalSGD` calls them where the dense path all-reduces.

Per group g (a unit, tensor or the whole model, as ``granularity`` says) and worker m, at outer round t:

    acc = Delta_m,t + e_m,t-1;   S = top-k(|acc|);   sent = acc on S, 0 elsewhere;   e_m,t = acc - sent

so over any number of rounds sum_t sent_m,t + e_m,T = sum_t Delta_m,t exactly (error feedback conserves mass;
tested). A worker the anomaly test rejects this round sends nothing and keeps its residual as it was: EDiT discards
its pseudo-gradient, and its residual (earlier rounds' accepted mass) waits for a round whose weight is not ~0.

Where EDiT's penalty applies (:mod:`zen_analysis.local_sgd.penalty`): the norms behind the anomaly test and the
softmax weights are the pseudo-gradient's own, before selection: they judge this round of the worker's local
training, which the residual (earlier rounds' unsent mass) and the selection (a cut by magnitude that keeps most of
the norm) would blur. The weight then scales the selected values, and clipping acts on the averaged sparse
pseudo-gradient after the sum, where the dense path clips the averaged dense one.

Shape suffixes: N elements of a group's flat pseudo-gradient, K entries kept by top-k."""

from __future__ import annotations

import torch

from zen_analysis.capture.topk import TopKCompressor
from zen_analysis.comm import build_scheme
from zen_analysis.local_sgd.collective import Collective, TorchCollective
from zen_analysis.wire.exchange import ring_volume

COMPRESSIONS = ("none", "topk", "natural")


class PseudoGradientTopK:
    """Top-k selection with error feedback, one residual per sync group (float32, or float64 for a float64 model).

    ``ratio``: the share of each group's elements a worker keeps per round; above 65,536 elements the threshold
    comes from a 1% sample (DGC's sampled top-k, exact re-selection when the sample lets too many through)."""

    def __init__(self, ratio: float, *, seed: int = 0) -> None:
        if not 0 < ratio <= 1:
            raise ValueError(f"local_sgd.topk_ratio must be in (0, 1], got {ratio}")
        self.ratio = ratio
        self.seed = seed
        self.compressor = TopKCompressor(
            ratio=ratio, exact_below=65_536, sample_ratio=0.01, error_feedback=True, seed=seed
        )
        self.residuals: dict[str, torch.Tensor] = {}

    def select(
        self, key: str, delta_N: torch.Tensor, *, worker: int, round: int, skip: bool = False
    ) -> tuple[torch.Tensor, int]:
        """This round's sparse pseudo-gradient of group ``key`` (a dense tensor, zero off the kept coordinates) and
        the count kept. ``delta_N``: the worker's flat pseudo-gradient (not modified). ``skip``: send nothing this
        round, residual unchanged (an anomalous worker)."""
        acc_N = delta_N.detach().to(torch.promote_types(delta_N.dtype, torch.float32), copy=True).reshape(-1)
        residual = self.residuals.get(key)
        if residual is not None and residual.numel() != acc_N.numel():
            raise ValueError(f"group {key!r} has {acc_N.numel()} elements, its residual {residual.numel()}")
        if skip:
            if residual is None:
                self.residuals[key] = torch.zeros_like(acc_N)
            return torch.zeros_like(acc_N), 0
        if residual is not None:
            acc_N += residual
        gen = self.compressor.generator(worker=worker, tensor=key, step=round, device=acc_N.device)
        idx_K = self.compressor.select(acc_N, generator=gen)
        sent_N = torch.zeros_like(acc_N)
        sent_N[idx_K] = acc_N[idx_K]
        acc_N[idx_K] = 0
        self.residuals[key] = acc_N
        return sent_N, int(idx_K.numel())

    def residual_norm(self) -> float:
        """The L2 norm of every group's residual together."""
        return float(sum(r.double().pow(2).sum() for r in self.residuals.values()) ** 0.5)

    def state_dict(self) -> dict:
        return {"ratio": self.ratio, "seed": self.seed, "residuals": {k: v.clone() for k, v in self.residuals.items()}}

    def load_state_dict(self, state: dict) -> None:
        if state["ratio"] != self.ratio or state["seed"] != self.seed:
            raise ValueError(
                f"the checkpoint's top-k ratio / seed ({state['ratio']}, {state['seed']}) differ from this run's "
                f"({self.ratio}, {self.seed}): resume with the settings it was trained with"
            )
        self.residuals = {k: v.clone() for k, v in state["residuals"].items()}


class SparseSum:
    """The sum over workers of each sync group's sparse pseudo-gradient by scheme ``scheme`` (any of
    ``zen_analysis.comm.SCHEMES``), or with ``planner`` (``scheme=auto``: a :class:`zen_analysis.comm.planner.Planner`)
    the planner's choice for the group, priced from a sketch of the ranks' selections at its first sync and every
    ``planner.every`` steps after. One scheme object per name, reused across groups and syncs."""

    def __init__(self, scheme: str, *, seed: int, planner=None) -> None:
        self.scheme = scheme
        self.seed = seed
        self.planner = planner
        self._schemes: dict = {}

    def __call__(self, key: str, sent: torch.Tensor, *, collective: Collective, step: int) -> tuple[torch.Tensor, int]:
        """The sum over workers of ``sent`` (this worker's flat selection for group ``key``; summed in place where
        the scheme allows) and the bytes this rank sent, the planner's sketch gather included. On in-process thread
        workers (tests) the collective's dense sum stands in: the same numbers up to summation order."""
        if not (isinstance(collective, TorchCollective) and collective.world > 1):
            collective.all_reduce_sum(sent)
            return sent, int(ring_volume(sent.numel() * sent.element_size(), collective.world))
        name, extra = self.scheme, 0
        if self.planner is not None:
            before = self.planner.bytes_sent
            name = self.planner.choose(key, step, dense=sent, dtype=sent.dtype, group=collective.group)
            extra = self.planner.bytes_sent - before
        if name not in self._schemes:
            self._schemes[name] = build_scheme(name, seed=self.seed)
        scheme = self._schemes[name]
        out = scheme.run(sent, group=collective.group)
        return out, extra + int(scheme.last_measured()["bytes_sent"].sum())
