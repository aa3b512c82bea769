"""Zen's planner (paper section 4.0, Fig. 1): profile the first iterations, then choose per sparse tensor between
Balanced Parallelism (``zen``), Hierarchical Centralization (``sparcml``) and dense all-reduce.

The paper decides BP vs HC with its closed forms, Eq. 1 and Eq. 2, from the profiled density d and the
densification ratios gamma(2^i). Here the decision is :func:`zen_analysis.comm.evaluate.best_scheme` — the same
alpha-beta model the scheme evaluation uses, which equals Eq. 1 / Eq. 2 under their assumptions (tested) and
also prices skew, latency and the dense fallback — summed over the profiled steps; one planner, not two. The
closed forms are still computed from the profile and reported beside the decision.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from zen_analysis.wire.cost import t_allreduce, t_bp, t_hc

CANDIDATES = ("zen", "sparcml", "allreduce")


class Planner:
    def __init__(
        self, *, topology: str = "paper-tcp25", profile_steps: int = 3, candidates: Sequence[str] = CANDIDATES
    ) -> None:
        if profile_steps < 1:
            raise ValueError("the planner needs at least one profiled step")
        self.topology = topology
        self.profile_steps = profile_steps
        self.candidates = tuple(candidates)
        self.profiles: dict[str, list[list[torch.Tensor]]] = {}
        self.numel: dict[str, int] = {}
        self.decisions: dict[str, dict] = {}

    def observe(self, tensor: str, index_sets: Sequence[torch.Tensor], numel: int) -> str | None:
        """Record one step's per-rank index sets of ``tensor``; returns the decision once profiling is done."""
        if tensor in self.decisions:
            return self.decisions[tensor]["scheme"]
        self.profiles.setdefault(tensor, []).append([torch.as_tensor(s).long() for s in index_sets])
        self.numel[tensor] = numel
        if len(self.profiles[tensor]) >= self.profile_steps:
            return self.decide(tensor)["scheme"]
        return None

    def decide(self, tensor: str) -> dict:
        from zen_analysis.comm import build_scheme
        from zen_analysis.comm.calibrate import preset
        from zen_analysis.sparsity.metrics import densification_ratio

        steps, numel = self.profiles.pop(tensor), self.numel[tensor]
        n = len(steps[0])
        topo = preset(self.topology)
        seconds = {}
        for name in self.candidates:
            try:
                seconds[name] = sum(
                    float(build_scheme(name).time(sets, numel, topo)["seconds"].sum()) for sets in steps
                )
            except ValueError:
                continue
        choice = min(seconds, key=seconds.get)
        last = steps[-1]
        d = sum(s.numel() for s in last) / n / numel
        gammas = {k: densification_ratio(last[:k]) for k in (2**i for i in range(n.bit_length())) if k <= n}
        gamma = lambda k: gammas.get(k, float(k))  # noqa: E731
        bw = topo.inter_bandwidth / min(topo.gpus_per_node, n) if n > topo.gpus_per_node else topo.intra_bandwidth
        closed = {"T_bp": t_bp(n, d, gamma, numel, bw), "T_allreduce": t_allreduce(n, numel, bw)}
        if n & (n - 1) == 0:
            closed["T_hc"] = t_hc(n, d, gamma, numel, bw)
        self.decisions[tensor] = {
            "scheme": choice,
            "modelled_s": seconds,
            "density": d,
            "gamma": gammas,
            "closed_forms_s": closed,
            "topology": self.topology,
            "profiled_steps": len(steps),
        }
        return self.decisions[tensor]


def describe_decision(decision: dict) -> str:
    """One line for a person: the scheme chosen, every candidate's modelled seconds per step, the density and the
    densification ratio at the largest n profiled (a run summary's ``planner`` entry, or
    :attr:`Planner.decisions`'s)."""
    ranked = sorted(decision["modelled_s"].items(), key=lambda kv: kv[1])
    times = ", ".join(f"{name} {1e3 * s:.2f} ms" for name, s in ranked)
    gammas = {int(k): v for k, v in decision["gamma"].items()}
    n = max(gammas)
    return (
        f"{decision['scheme']} (modelled per step on {decision['topology']}: {times}); "
        f"density {decision['density']:.2%}, densification ratio {gammas[n]:.2f} at n = {n}, "
        f"{decision['profiled_steps']} profiled steps"
    )
