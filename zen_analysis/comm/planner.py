"""Zen's planner, grown to every scheme: per tensor (the natural path's embedding, a DDP bucket), every ``every``
steps, the scheme of smallest modelled time on the place the run is — from a few KB of live statistics per rank.

The paper's planner (section 4.0, Fig. 1) profiles the first iterations and chooses between Balanced Parallelism
and Hierarchical Centralization by its closed forms (Eq. 1, Eq. 2). This one:

* **Candidates**: every scheme of :data:`zen_analysis.comm.SCHEMES` when the planner is made — the six sparse ones,
  dense all-reduce and any registered from outside the package (``zen_analysis.comm.schemes.register_scheme``).
* **Model**: each scheme's own byte model (the one ``zen-analysis evaluate`` and the replays check against measured
  bytes) priced by :func:`~zen_analysis.pricing.cost.phase_times` and, on a topology calibrated on this machine
  (``local-<n>``, ``netlab-<B>``), the ranks' local work (:func:`~zen_analysis.pricing.cost.local_time`): what the run
  will really pay, not the wire alone.
* **Statistics**: no index sets are gathered. Each rank sketches its non-zero pattern on a sample of the index space
  that is the same on every rank (:mod:`zen_analysis.sparsity.sketch`: 8 KiB by default), the sketches are
  all-gathered in one call, and every scheme's model runs on the sampled index space and is scaled up. Every rank
  computes the same choice from the same bytes; no broadcast.
* **Hysteresis**: a new choice replaces the current one only when it is modelled ``hysteresis`` (default 10%)
  faster; ties and noise keep the scheme in place.

Its own cost (sketch, gather, pricing) is counted per tensor in ``stats_seconds`` and reported with the decisions.
The closed forms are still computed from the sketch's density and densification ratios and reported beside them.

Shape suffixes: K non-zero units on this rank (rows, or flat elements), D values per row (the table's width), N elements
of the flat tensor, W ranks (one packed sketch each).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist

from zen_analysis.comm import SCHEMES, build_scheme
from zen_analysis.comm.schemes import sums_rows
from zen_analysis.comm.schemes.base import CommScheme
from zen_analysis.pricing.cost import t_allreduce, t_bp, t_hc, total_seconds
from zen_analysis.pricing.topology import PRESETS, Topology
from zen_analysis.sparsity import sketch as sk
from zen_analysis.wire.exchange import Exchange

__all__ = ["AutoScheme", "Planner", "describe_decision"]


class Planner:
    """Chooses a scheme per tensor from the ranks' sketches (:meth:`sketch_dense` / :meth:`sketch_indices`,
    all-gathered by the caller, then :meth:`decide`)."""

    def __init__(
        self,
        *,
        topology: Topology | str = "paper-tcp25",
        candidates: Sequence[str] | None = None,
        every: int = 50,
        hysteresis: float = 0.1,
        units: int = sk.SAMPLE_UNITS,
        block_units: int = sk.BLOCK_UNITS,
        options: dict | None = None,
    ) -> None:
        if every < 1:
            raise ValueError(f"the planner decides every >= 1 steps, got {every}")
        if not 0 <= hysteresis < 1:
            raise ValueError(f"hysteresis is a fraction in [0, 1), got {hysteresis}")
        candidates = tuple(SCHEMES) if candidates is None else candidates  # read now: registered schemes too
        unknown = sorted(set(candidates) - set(SCHEMES))
        if unknown or not candidates:
            raise ValueError(f"unknown candidates {unknown or '(none)'}; choose from {sorted(SCHEMES)}")
        if isinstance(topology, str):  # a preset; a calibrated one (local-<n>, netlab-<B>) comes resolved
            if topology not in PRESETS:
                raise ValueError(
                    f"unknown topology preset {topology!r} (available: {sorted(PRESETS)}); pass a calibrated one "
                    "resolved: zen_analysis.evaluation.calibrate.planner_topology(name, num_ranks)"
                )
            topology = PRESETS[topology]
        self.topology = topology
        self.candidates = tuple(candidates)
        self.every = every
        self.hysteresis = hysteresis
        self.units = units
        self.block_units = block_units
        self._models = {name: build_scheme(name, **(options or {}).get(name, {})) for name in self.candidates}
        self.bytes_sent = 0
        """Bytes this rank sent gathering sketches (:meth:`choose`)."""
        self.last_records: list = []
        """The sketch gather's phase records of the last :meth:`choose` (empty when it did not decide)."""
        self.decisions: dict[str, dict] = {}
        """Per tensor: the current choice, every candidate's modelled seconds per step at the last decision, the
        sketch's estimates, and ``history`` (step, scheme, whether it switched) of every decision."""

    # -- the statistics ---------------------------------------------------------------------------------------------

    def due(self, tensor: str, step: int) -> bool:
        """Whether ``tensor`` is sketched and decided at ``step`` (first sight, then every ``every`` steps)."""
        d = self.decisions.get(tensor)
        return d is None or step - d["step"] >= self.every

    def _block(self) -> int:
        omni = self._models.get("omnireduce")
        return int(getattr(omni, "block_size", 0)) if omni is not None else 0

    def layouts(self, numel: int, step: int, *, by_rows: bool) -> tuple[sk.Layout, sk.Layout | None]:
        """The sample of this round: of units (elements or rows) and, by elements with OmniReduce a candidate, of
        its blocks."""
        units = sk.layout(numel, step, units=self.units)
        B = self._block()
        blocks = None if by_rows or not B else sk.layout(-(-numel // B), step, units=self.block_units)
        return units, blocks

    def sketch_dense(self, x: torch.Tensor, step: int) -> torch.Tensor:
        """This rank's sketch (packed bytes) of a dense tensor: flat by elements, 2-D by rows."""
        by_rows = x.dim() == 2
        units, blocks = self.layouts(x.shape[0] if by_rows else x.numel(), step, by_rows=by_rows)
        parts = [sk.pack(sk.sample_dense(x, units))]
        if blocks is not None:
            parts.append(sk.pack(sk.sample_blocks(x, blocks, self._block())))
        return torch.cat(parts)

    def sketch_indices(self, idx_K: torch.Tensor, numel: int, step: int, *, by_rows: bool) -> torch.Tensor:
        """This rank's sketch of a tensor given by its non-zero units ``idx_K`` (rows, or flat elements)."""
        units, blocks = self.layouts(numel, step, by_rows=by_rows)
        parts = [sk.pack(sk.sample_indices(idx_K, units))]
        if blocks is not None:
            block_ids = torch.div(idx_K.long(), self._block(), rounding_mode="floor")
            parts.append(sk.pack(sk.sample_indices(block_ids, blocks)))
        return torch.cat(parts)

    def choose(
        self,
        tensor: str,
        step: int,
        *,
        dense: torch.Tensor | None = None,
        indices: torch.Tensor | None = None,
        numel: int = 0,
        width: int = 0,
        dtype: torch.dtype = torch.float32,
        group: dist.ProcessGroup | None = None,
    ) -> str:
        """The scheme to sum ``tensor`` with at ``step``, on every rank of ``group`` alike. On a due step
        (:meth:`due`) this rank's sketch — of ``dense`` (flat by elements, 2-D by rows) or of its non-zero units
        ``indices`` (rows when ``width`` > 0, of ``numel``) — is all-gathered (one call, phase ``sketch``) and
        :meth:`decide` prices the candidates; otherwise the current choice stands. A collective on due steps:
        every rank of the group must call it at the same steps for the same tensors."""
        if not self.due(tensor, step):
            self.last_records = []
            return self.decisions[tensor]["scheme"]
        t0 = time.perf_counter()
        if indices is not None:
            packed = self.sketch_indices(indices, numel, step, by_rows=width > 0)
        elif dense is not None:
            packed = self.sketch_dense(dense, step)
            numel = dense.shape[0] if dense.dim() == 2 else dense.numel()
        else:
            raise ValueError("choose() needs the tensor (dense=) or its non-zero units (indices=)")
        ex = Exchange(group)
        with ex.phase("sketch"):
            gathered = ex.all_gather_v(packed, torch.full((ex.world,), packed.numel(), dtype=torch.int64))
        self.bytes_sent += sum(r.bytes_sent for r in ex.records.values())
        self.last_records = list(ex.records.values())
        return self.decide(
            tensor,
            step,
            gathered.view(ex.world, -1).cpu(),
            numel,
            dtype=dtype,
            width=width,
            stats_seconds=time.perf_counter() - t0,
        )

    def state_dict(self) -> dict:
        """The choices so far (what a resumed run needs to decide at the same steps as an uninterrupted one)."""
        return {"decisions": copy.deepcopy(self.decisions), "bytes_sent": self.bytes_sent}

    def load_state_dict(self, state: dict) -> None:
        self.decisions = copy.deepcopy(state["decisions"])
        self.bytes_sent = int(state["bytes_sent"])

    # -- the decision -----------------------------------------------------------------------------------------------

    def price(
        self,
        packed_W: torch.Tensor,
        numel: int,
        step: int,
        *,
        dtype: torch.dtype = torch.float32,
        width: int = 0,
    ) -> tuple[dict[str, float], dict]:
        """Every candidate's modelled seconds for one sum, from every rank's sketch (``packed_W``: one row per
        rank, as gathered), and the sketch's estimates (density, densification ratios)."""
        units, blocks = self.layouts(numel, step, by_rows=width > 0)
        nbytes = -(-units.size // 8)
        bits = [sk.unpack(row[:nbytes], units.size) for row in packed_W]
        sets = sk.compact_sets(bits)
        world = len(sets)
        seconds: dict[str, float] = {}
        for name, model in self._models.items():
            if width and not sums_rows(model):  # by rows: only the schemes that sum rows are candidates
                continue
            lay, cs = units, sets
            if name == "omnireduce" and blocks is not None:
                B = self._block()
                block_bits = [sk.unpack(row[nbytes:], blocks.size) for row in packed_W]
                lay, cs = blocks, [s * B for s in sk.compact_sets(block_bits)]
                compact = blocks.size * B
            else:
                compact = lay.size
            try:
                traffic = model.model(cs, compact, dtype=dtype, width=width).scaled(lay.scale)
            except ValueError:  # not supported here (e.g. at this world size)
                continue
            if lay is not units and traffic.work:  # it writes the union's elements, not one per block
                traffic.work["written"][:] = sk.union_count(bits) * units.scale
            seconds[name] = total_seconds(traffic, self.topology, name)
        return seconds, {"world": world, **sk.estimates(bits, units)}

    def decide(
        self,
        tensor: str,
        step: int,
        packed_W: torch.Tensor,
        numel: int,
        *,
        dtype: torch.dtype = torch.float32,
        width: int = 0,
        stats_seconds: float = 0.0,
    ) -> str:
        """The scheme for ``tensor`` from this round's sketches; ``stats_seconds``: what sketching and gathering
        took on this rank (added to the planner's own cost with the pricing's)."""
        t0 = time.perf_counter()
        seconds, est = self.price(packed_W, numel, step, dtype=dtype, width=width)
        best = min(seconds, key=seconds.get)
        prev = self.decisions.get(tensor)
        current = prev["scheme"] if prev else None
        choice = best
        if current in seconds and seconds[best] > (1 - self.hysteresis) * seconds[current]:
            choice = current
        this = stats_seconds + time.perf_counter() - t0  # this decision: sketch, gather (and waiting in it), pricing
        history = (prev["history"] if prev else []) + [
            {"step": step, "scheme": choice, "switched": choice != current, "seconds": this}
        ]
        n = est["world"]
        d, gammas = est["density"], est["gamma"]
        gamma = lambda k: gammas.get(k, float(k))  # noqa: E731
        topo = self.topology.for_ranks(n)
        bw = topo.inter_bandwidth / min(topo.gpus_per_node, n) if n > topo.gpus_per_node else topo.intra_bandwidth
        M = numel * max(width, 1)
        closed = {"T_bp": t_bp(n, d, gamma, M, bw), "T_allreduce": t_allreduce(n, M, bw)}
        if n & (n - 1) == 0:
            closed["T_hc"] = t_hc(n, d, gamma, M, bw)
        spent = (prev["stats_seconds"] if prev else 0.0) + this
        self.decisions[tensor] = {
            "scheme": choice,
            "best": best,
            "modelled_s": seconds,
            "density": d,
            "union_density": est["union_density"],
            "gamma": gammas,
            "closed_forms_s": closed,
            "topology": self.topology.name,
            "step": step,
            "history": history,
            "stats_seconds": spent,
        }
        return choice


def describe_decision(decision: dict) -> str:
    """One line for a person: the scheme chosen, every candidate's modelled seconds per step, the sketch's density
    and densification ratio at the largest n (a run summary's ``planner`` entry, or :attr:`Planner.decisions`'s)."""
    ranked = sorted(decision["modelled_s"].items(), key=lambda kv: kv[1])
    times = ", ".join(f"{name} {1e3 * s:.2f} ms" for name, s in ranked)
    gammas = {int(k): v for k, v in decision["gamma"].items()}
    n = max(gammas)
    switches = sum(h["switched"] for h in decision["history"][1:])
    return (
        f"{decision['scheme']} (modelled per step on {decision['topology']}: {times}); "
        f"density {decision['density']:.2%}, densification ratio {gammas[n]:.2f} at n = {n}; "
        f"{len(decision['history'])} decisions, {switches} switches, "
        f"{1e3 * decision['stats_seconds']:.1f} ms of statistics"
    )


class AutoScheme(CommScheme):
    """The planner as a scheme, under the name ``auto``: each :meth:`run` asks the planner (on its steps: sketch,
    gather, price, :meth:`Planner.choose`) and sums with the scheme it picks. What ``measure`` and the replays run
    for ``auto``; the loop and the DDP hooks ask the planner themselves, per tensor and bucket.

    Measured: ``last_measured`` holds the sketch gather (phase ``sketch``, on a deciding call) beside the chosen
    scheme's phases, and ``last_times`` counts both. Modelled (:meth:`model`, :meth:`time`): the scheme the planner
    picks for these index sets at its first decision, as a call between decisions pays it (the decisions' own cost
    is the planner's ``stats_seconds``, every ``every`` calls)."""

    name = "auto"
    hashed = True

    def __init__(
        self, *, topology: Topology | str = "paper-tcp25", every: int = 50, hysteresis: float = 0.1, seed: int = 0
    ) -> None:
        super().__init__()
        self.planner = Planner(topology=topology, every=every, hysteresis=hysteresis)
        self.seed = seed
        self.calls = 0
        self.last_choice: str | None = None
        self._schemes: dict[str, CommScheme] = {}

    def chosen(self, name: str) -> CommScheme:
        if name not in self._schemes:
            self._schemes[name] = build_scheme(name, seed=self.seed)
        scheme = self._schemes[name]
        scheme.sync_collectives, scheme.check_ranks = self.sync_collectives, self.check_ranks
        return scheme

    def choice_for(
        self, index_sets: Sequence[torch.Tensor], numel: int, *, dtype: torch.dtype = torch.float32, width: int = 0
    ) -> str:
        """The scheme the planner picks at its first decision for ranks holding ``index_sets``."""
        packed = torch.stack(
            [self.planner.sketch_indices(torch.as_tensor(s), numel, 0, by_rows=width > 0) for s in index_sets]
        )
        seconds, _ = self.planner.price(packed, numel, 0, dtype=dtype, width=width)
        return min(seconds, key=seconds.get)

    def _through(self, sketch: dict, group, fn):
        t0 = time.perf_counter()
        name = self.planner.choose("tensor", self.calls, group=group, **sketch)
        sketch_records = self.planner.last_records
        scheme = self.chosen(name)
        out = fn(scheme)
        self.calls += 1
        self.last_choice = name
        self._records = sketch_records + scheme._records
        self._local = scheme.last_local()
        inner = scheme.last_times()
        total = time.perf_counter() - t0
        wire = inner["wire"] + sum(r.wire_seconds for r in sketch_records)
        self._times = {
            "total": total,
            "wire": wire,
            "wait": inner["wait"],
            "local": max(0.0, total - wire - inner["wait"]),
        }
        self._rank = scheme._rank
        return out

    def run(self, tensor: torch.Tensor, *, group: dist.ProcessGroup | None = None) -> torch.Tensor:
        flat = tensor.detach().reshape(-1)
        return self._through(
            {"dense": flat, "dtype": tensor.dtype}, group, lambda scheme: scheme.run(tensor, group=group)
        )

    def sum_rows(self, rows_K, values_KD, num_rows, *, group=None):
        sketch = {"indices": torch.as_tensor(rows_K), "numel": num_rows, "width": values_KD.shape[1]}
        return self._through(
            {**sketch, "dtype": values_KD.dtype},
            group,
            lambda scheme: scheme.sum_rows(rows_K, values_KD, num_rows, group=group),
        )

    def model(self, index_sets, numel, *, dtype=torch.float32, width=0):
        name = self.choice_for(index_sets, numel, dtype=dtype, width=width)
        return self.chosen(name).model(index_sets, numel, dtype=dtype, width=width)

    def time(self, index_sets, numel, topology, *, dtype=torch.float32, width=0):
        name = self.choice_for(index_sets, numel, dtype=dtype, width=width)
        return self.chosen(name).time(index_sets, numel, topology, dtype=dtype, width=width)

    def _run(self, x_N, ex) -> None:  # run() and sum_rows() hand the work to the chosen scheme
        raise NotImplementedError

    def _traffic(self, sets, numel, t) -> None:  # model() is the chosen scheme's
        raise NotImplementedError


def make_scheme(name: str, *, topology: Topology | str | None = None, **options) -> CommScheme:
    """:func:`~zen_analysis.comm.build_scheme`, and ``auto`` (:class:`AutoScheme` on ``topology``)."""
    if name == "auto":
        if topology is None:
            raise ValueError("scheme 'auto' needs the topology its planner prices on")
        return AutoScheme(topology=topology, **options)
    return build_scheme(name, **options)
