"""Local SGD on the one training loop: Post-Local SGD, DiLoCo and EDiT as settings of :class:`LocalSGD`.

Context (EDiT, Cheng et al., ICLR'25; DiLoCo, Douillard et al. 2023): workers train independently between
syncs; at a sync each worker's pseudo-gradient Delta_m = anchor - local is averaged (EDiT: with its penalty,
:mod:`zen_analysis.local_sgd.penalty`), an outer optimizer (SGD, Nesterov) steps the anchor, and every worker
restarts from it. Attached as the loop's ``sync`` object:

* ``synchronize(model)`` (after each step's backward): during ``warmup_steps`` a dense gradient all-reduce
  (synchronous training); afterwards nothing — the step stays local — and the step counter advances;
* forward pre-hooks: at a sync step (t >= warmup and (t - warmup) mod interval == 0) the first training forward
  syncs each *unit* just before that unit's forward (layer-wise, EDiT's placement; ``layerwise=False`` syncs all
  units before the model's forward — numerically identical, tested); with ``prefetch`` the next unit's
  pseudo-gradient all-reduce is started (asynchronously) as soon as this unit's has been applied, so it runs
  while this unit computes, and is finished at the next unit's hook — the same numbers (tested). Units are the blocks of
  the model's largest ``ModuleList`` plus a root unit holding every other parameter (embeddings, final norm, head);
  ``granularity`` decides what the penalty's norms, detectors, weights and clip see: ``module`` (a unit), ``tensor``
  (each parameter) or ``global`` (the whole model, synced at the root);
* the first sync only sets the anchor; ``finalize`` forces a last sync so the final model is the global one.

Every sync appends, per group and worker, the norm, z-score, weight, clip coefficient and whether the outer
step was skipped to ``log`` (written to ``<run_dir>/local_sgd/rank<r>.jsonl``). The loop itself knows nothing of
local SGD: :class:`zen_analysis.train.loop_hooks.LocalSGDHooks` gives it the engine's schedule (:meth:`max_local_steps`,
:meth:`should_stop`), rank-local losses, the pseudo-gradient capture and the log.

Shape suffixes: N elements of a group's flattened pseudo-gradient."""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import asdict

import torch
from torch import nn

from zen_analysis.capture.pseudo import PseudoGradientCapture
from zen_analysis.local_sgd.cadence import Cadence
from zen_analysis.local_sgd.collective import Collective, Done, TorchCollective
from zen_analysis.local_sgd.outer_step import group_norm, log_row, outer_update, sync_units, worker_weight
from zen_analysis.local_sgd.penalty import EWMADetector, clip_coefficient
from zen_analysis.local_sgd.settings import LocalSGDConfig
from zen_analysis.local_sgd.sparse_pseudo import PseudoGradientTopK, SparseSum
from zen_analysis.sync.grad_sync import DenseAllReduce, GradSync
from zen_analysis.wire.exchange import ring_volume


class LocalSGD(Cadence, GradSync):
    """The loop's ``sync`` object for local SGD methods (see the module docstring)."""

    def __init__(
        self,
        config: LocalSGDConfig,
        *,
        name: str = "local_sgd",
        collective: Collective | None = None,
        planner=None,
    ) -> None:
        self.config = config
        self.name = name
        self.collective = collective
        self.step = 0
        self.log: list[dict] = []
        self._units: list[tuple[str, nn.Module, list[tuple[str, nn.Parameter]]]] = []
        self._anchor: dict[str, list[torch.Tensor]] = {}
        self._momentum: dict[str, list[torch.Tensor] | None] = {}
        self._detectors: dict[str, EWMADetector] = {}
        self._done: set[str] = set()
        self._pending: dict[str, list[dict]] = {}
        """Units whose sync was started ahead (prefetch): their in-flight all-reduces, finished at their hook."""
        self._done_step = -1
        self._dense = None
        self._sync_bytes = 0
        self._seconds_at: dict[int, float] = {}
        """Seconds in syncs (and rendezvous) per step, for the outer sync's time in :meth:`describe`."""
        self.topk = PseudoGradientTopK(config.topk_ratio, seed=config.seed) if config.compress == "topk" else None
        """``compress=topk``: the selection and the residuals (:mod:`zen_analysis.local_sgd.sparse_pseudo`)."""
        self._sparse_sum = SparseSum(config.scheme, seed=config.seed)
        """``compress`` topk / natural: the scheme (or the planner's choice) that sums a group's selections."""
        self._embedding = None
        """The model's input-embedding weight (its group's log rows say ``embedding``: natural sparsity lives there)."""
        if config.compress != "none" and config.scheme == "auto" and planner is None:
            raise ValueError("sync.scheme=auto needs a planner (train/registry.py builds it from sync.planner_*)")
        self.pseudo_capture = None
        """Under ``capture.pseudo`` (:meth:`capture_pseudo_gradients`, which the loop's hooks call): a
        :class:`zen_analysis.capture.pseudo.PseudoGradientCapture` recording each group's pseudo-gradient (before
        selection) and selection (after) at every outer sync."""
        self.planner = planner
        """With ``scheme=auto``: a :class:`zen_analysis.comm.planner.Planner` (or a function of the world size that
        builds one at ``attach``). At a group's first outer sync and every ``planner.every`` steps after, the ranks'
        sketches of that group's selections are all-gathered and priced; ``decisions`` holds the choices."""
        self.sync_seconds = 0.0
        """Time spent in syncs and rendezvous (a straggler's delay scales compute time only)."""
        self.delay = None
        """Set by the loop under ``perturb.bandwidth_gbps``: sleeps as long as an all-reduce of n bytes would take."""
        self.link_seconds = None
        """Set by the loop under ``perturb.bandwidth_gbps``: seconds an all-reduce of n bytes takes on the slow link.
        The engine keeps a link clock: all-reduces in flight together queue on it, and the emulated time is added
        after the real all-reduce, less the compute between its start and its wait (what prefetch hides)."""
        self._link_free = 0.0
        """The link clock: ``perf_counter()`` time at which the emulated link finishes what is queued on it."""
        self._decided_step = -1
        self._due_now = False
        self._last_sync_time = None
        self._total_at_sync = 0
        self._stop = False
        self.step_budget = 0
        """A-EDiT: stop (at a sync) once all workers together made this many steps (set by
        :meth:`max_local_steps` from the loop's ``num_steps``; 0: no budget)."""

    # ---- attachment
    def attach(self, model: nn.Module) -> None:
        self.collective = self.collective or TorchCollective()
        if self.config.compress != "none":
            if self.link_seconds is not None:
                raise ValueError(
                    f"local_sgd.compress={self.config.compress} under perturb.bandwidth_gbps: the emulated delay "
                    "prices a dense all-reduce; run the ranks behind real shaped links instead (dist.network=netlab)"
                )
            if callable(self.planner) and not hasattr(self.planner, "decide"):
                self.planner = self.planner(self.collective.world)
            self._sparse_sum.planner = self.planner
        self._dense = DenseAllReduce()
        if self.collective.world > 1 and isinstance(self.collective, TorchCollective):
            self._dense.attach(model)  # identical start: rank 0's parameters
        else:
            self._dense = None
        embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        self._embedding = getattr(embed, "weight", None)
        self._units = sync_units(model)
        for key, module, _ in self._units:
            if self.config.layerwise and self.config.granularity != "global" and module is not model:
                module.register_forward_pre_hook(self._hook(key))
        model.register_forward_pre_hook(self._root_hook(model))

    def _hook(self, key: str):
        def pre_forward(module: nn.Module, args) -> None:
            if module.training and self._decided_step == self.step and self._due_now:
                self._sync_unit(key)

        return pre_forward

    def _root_hook(self, model: nn.Module):
        def pre_forward(module: nn.Module, args) -> None:
            if not module.training:
                return
            if self._decided_step != self.step:  # once per step, at its first micro-batch
                self._decided_step, self._due_now = self.step, self._decide()
            if not self._due_now:
                return
            if self.config.granularity == "global" or not self.config.layerwise:
                for key, _, _ in self._units:
                    self._sync_unit(key)
            else:
                self._sync_unit("root")

        return pre_forward

    def synchronize(self, model: nn.Module) -> None:
        """After a step's backward: dense gradient all-reduce during warm-up, nothing afterwards."""
        self._flush()
        if self.pseudo_capture is not None:
            self.pseudo_capture.end_sync()
        if self.step < self.config.warmup_steps and self._dense is not None:
            self._dense.delay = self.delay
            self._dense.synchronize(model)
        self.step += 1

    def state_dict(self) -> dict:
        """What decides the coming steps beyond the model and the inner optimizer: the step counter, every unit's
        anchor (the parameters at its last sync) and outer momentum, the anomaly detectors, and the per-sync log
        rows so far. Step-based methods only: A-EDiT's clock cannot be replayed."""
        if self.config.sync_time_s > 0:
            raise ValueError("A-EDiT's syncs follow the wall clock: a resumed run cannot replay them")
        return copy.deepcopy(
            {
                "step": self.step,
                "anchor": self._anchor,
                "momentum": self._momentum,
                "detectors": self._detectors,
                "log": self.log,
                "sync_bytes": self._sync_bytes,
                "topk": self.topk.state_dict() if self.topk is not None else None,
                "planner": self.planner.state_dict() if hasattr(self.planner, "decide") else None,
            }
        )

    def load_state_dict(self, state: dict) -> None:
        self.step, self._sync_bytes = int(state["step"]), int(state["sync_bytes"])
        self._anchor, self._momentum, self._detectors = state["anchor"], state["momentum"], state["detectors"]
        self.log = list(state["log"])
        if (state.get("topk") is None) != (self.topk is None):
            raise ValueError("the checkpoint's local_sgd.compress differs from this run's: resume with the same one")
        if self.topk is not None:
            self.topk.load_state_dict(state["topk"])
        if state.get("planner") is not None and hasattr(self.planner, "decide"):
            self.planner.load_state_dict(state["planner"])

    def finalize(self, model: nn.Module) -> None:
        """Force a sync of every unit (the model every worker then holds is the global one)."""
        if self.step >= self.config.warmup_steps:
            self.step += 1  # a sync of its own, after the last step
            self._done_step = -1
            for key, _, _ in self._units:
                self._sync_unit(key, force=True)
            if self.pseudo_capture is not None:
                self.pseudo_capture.end_sync()

    def capture_pseudo_gradients(self, writer, *, rank: int, mode: str) -> dict[str, dict]:
        self.pseudo_capture = PseudoGradientCapture(
            writer,
            rank=rank,
            mode=mode,
            compress=self.config.compress,
            topk_ratio=self.config.topk_ratio,
            layout=self.group_layout(),
        )
        return self.pseudo_capture.tensor_info()

    def group_layout(self) -> list[tuple[str, list[tuple[str, int]], bool]]:
        """Every sync group in sync order (after ``attach``): its key, its parameters as (name, numel) in the order
        its pseudo-gradient flattens them, and whether it holds the input embedding."""
        names = {id(p): n for _, _, ps in self._units for n, p in ps}
        return [
            (group, [(names[id(p)], p.numel()) for p in params], any(p is self._embedding for p in params))
            for key, _, _ in self._units
            for group, params in self._groups(key)
        ]

    # ---- the sync
    def _groups(self, key: str) -> list[tuple[str, list[nn.Parameter]]]:
        params = next(p for k, _, p in self._units if k == key)
        if self.config.granularity == "tensor":
            return [(f"{key}/{n}", [p]) for n, p in params]
        if self.config.granularity == "global":
            return [("global", [p for _, _, ps in self._units for _, p in ps])] if key == self._units[0][0] else []
        return [(key, [p for _, p in params])]

    def _sync_unit(self, key: str, *, force: bool = False) -> None:
        if self._done_step != self.step:
            self._flush()
            self._done_step, self._done = self.step, set()
        if key in self._done and not force:
            return
        self._done.add(key)
        states = self._pending.pop(key, None)
        if states is None:
            states = [self._timed(self._begin_group, group, params) for group, params in self._groups(key)]
        nxt = self._next_unit(key)
        if nxt is not None and nxt not in self._done and nxt not in self._pending:
            # prefetch: its parameters are untouched until its own forward, so starting now changes no number
            self._pending[nxt] = [self._timed(self._begin_group, group, params) for group, params in self._groups(nxt)]
        for state in states:
            self._timed(self._end_group, state)

    def _next_unit(self, key: str) -> str | None:
        c = self.config
        if not (c.prefetch and c.layerwise and c.granularity != "global"):
            return None
        keys = [k for k, _, _ in self._units]
        i = keys.index(key)
        return keys[i + 1] if i + 1 < len(keys) else None

    def _flush(self) -> None:
        """Finish syncs started ahead whose unit never ran a forward this step (an unused block)."""
        for key in list(self._pending):
            for state in self._pending.pop(key):
                self._timed(self._end_group, state)

    def _timed(self, fn, *args):
        """``fn(*args)``, its time added to the sync time (less what the pseudo-gradient capture spent in it)."""
        t0 = time.perf_counter()
        c0 = self.pseudo_capture.seconds if self.pseudo_capture is not None else 0.0
        try:
            return fn(*args)
        finally:
            dt = time.perf_counter() - t0
            if self.pseudo_capture is not None:
                dt -= self.pseudo_capture.seconds - c0
            self.sync_seconds += dt
            self._seconds_at[self.step] = self._seconds_at.get(self.step, 0.0) + dt

    @torch.no_grad()
    def _begin_group(self, key: str, params: list[nn.Parameter]) -> dict:
        """Pseudo-gradient, anomaly test and weight, then start the weighted all-reduce."""
        c, coll = self.config, self.collective
        if key not in self._anchor:  # first sync: the anchor only
            return {"key": key, "params": params, "init": True}
        anchor = self._anchor[key]
        delta = [a - p.float() for a, p in zip(anchor, params)]
        capture = self.pseudo_capture
        if capture is not None and capture.wants("pseudo"):  # before the penalty and any selection
            capture.record("pseudo", step=self.step, group=key, flat_N=torch.cat([d.reshape(-1) for d in delta]))
        g = group_norm(delta)
        z, anomalous, w = worker_weight(c, coll, self._detectors, key, g, self.step)
        if anomalous:
            delta = [torch.zeros_like(d) for d in delta]
        flat = torch.cat([d.reshape(-1) for d in delta])
        row = log_row(self.step, key, params, delta, flat, self._embedding, g=g, z=z, anomalous=anomalous, w=w)
        if c.compress != "none":  # summed now by a sparse scheme (its run blocks): the selection, or all of it
            if self.topk is not None:
                flat, kept = self.topk.select(key, flat, worker=coll.rank, round=self.step, skip=anomalous)
                row["kept"] = kept
            flat.mul_(w)
            if capture is not None and self.topk is not None:  # what the scheme sums from this worker
                capture.record("pseudo_topk", step=self.step, group=key, flat_N=flat)
            flat, nbytes = self._sparse_sum(key, flat, collective=coll, step=self.step)
            return {
                "key": key,
                "params": params,
                "init": False,
                "flat": flat,
                "handle": Done(),
                "link_done": None,
                "bytes": nbytes,
                "row": row,
            }
        flat = flat * w
        handle = coll.all_reduce_sum_async(flat)
        link_done = None
        if self.link_seconds is not None:  # the slow link: this transfer starts when the previous one is through
            now = time.perf_counter()
            link_done = self._link_free = max(now, self._link_free) + self.link_seconds(
                flat.numel() * flat.element_size()
            )
        return {
            "key": key,
            "params": params,
            "init": False,
            "flat": flat,
            "handle": handle,
            "link_done": link_done,
            "bytes": int(ring_volume(flat.numel() * flat.element_size(), coll.world)),
            "row": row,
        }

    @torch.no_grad()
    def _end_group(self, state: dict) -> None:
        """Wait for the all-reduce, clip, outer step on the anchor, every worker restarts from it."""
        c, coll, key, params = self.config, self.collective, state["key"], state["params"]
        if state["init"]:
            self._anchor[key] = [p.detach().clone().float() for p in params]
            self._momentum[key] = None
            self.log.append({"step": self.step, "group": key, "init": True})
            return
        anchor, flat = self._anchor[key], state["flat"]
        wait_start = time.perf_counter()
        state["handle"].wait()
        self._sync_bytes += state["bytes"]
        state["row"]["bytes_sent"] = state["bytes"]
        if (
            state["link_done"] is not None
        ):  # the slow link: what compute since the start did not hide, after the real wait
            hidden_until = state["link_done"] - wait_start
            if hidden_until > 0:
                time.sleep(hidden_until)
                self._link_free = max(self._link_free, time.perf_counter())
        norm = float(flat.double().norm())
        coef = clip_coefficient(norm, c.clip)
        flat *= coef
        skipped = bool(
            c.anomaly
            and bool((flat == 0).all())
            and coll.all_gather_scalars(float(state["row"]["anomalous"])).min() > 0
        )
        if not skipped:
            self._momentum[key] = outer_update(c, anchor, self._momentum[key], flat)
        for a, p in zip(anchor, params):
            p.copy_(a.to(p.dtype))
        row = {**state["row"], "clip_coef": coef, "avg_norm": norm, "skipped": skipped}
        if c.anomaly:
            row["ema_mean"] = self._detectors[key].mean
        self.log.append(row)

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank sent in all-reduces (ring volume): warm-up gradients plus pseudo-gradients."""
        return self._sync_bytes + (self._dense.bytes_sent if self._dense is not None else 0)

    def describe(self) -> dict:
        """The run summary's ``sync``: the settings, the outer syncs' count, this rank's bytes sent per outer sync
        (median; the dense path's ring volume, a sparse scheme's measured bytes) and seconds per outer sync
        (median: the groups' syncs of that step, waits included), and the residuals' norm with ``compress=topk``."""
        steps = sorted({r["step"] for r in self.log if not r.get("init")})
        per_sync = [
            sum(r.get("bytes_sent", 0) for r in self.log if r["step"] == t and not r.get("init")) for t in steps
        ]
        seconds = [self._seconds_at.get(t, 0.0) for t in steps]
        out = {"method": self.name, **asdict(self.config), "syncs": len(steps)}
        if steps:
            out["bytes_per_sync"] = int(statistics.median(per_sync))
            out["outer_sync_s"] = float(statistics.median(seconds))
        if self.topk is not None:
            out["residual_norm"] = self.topk.residual_norm()
        return out

    @property
    def decisions(self) -> dict:
        """``scheme=auto``: the planner's choice per sync group (the run summary's ``planner`` entry)."""
        return getattr(self.planner, "decisions", {}) if self.planner is not None else {}
