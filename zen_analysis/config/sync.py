"""``sync``: how gradients are synchronised: the method (``sync.method``) and the communication scheme that sums
its sparse part (``sync.scheme``); ``zen_analysis.train.registry.build_sync`` turns them into the loop's sync
object."""

from __future__ import annotations

from dataclasses import dataclass

from zen_analysis.config.names import AUTO, SYNC_METHODS, SYNC_SCHEMES, MethodName, StepMethod, Switch, SyncMethod
from zen_analysis.config.plugins import load_plugins, scheme_names, unknown_name

WIRE_DTYPES = ("model", "bfloat16", "float16")
"""``sync.wire_dtype``'s values: the gradients' own dtype, or a 2-byte float they are summed in."""


@dataclass(kw_only=True, slots=True)
class SyncConfig:
    method: SyncMethod = StepMethod.DENSE
    """How the run trains and what it sums: ``dense`` (every gradient in one dense all-reduce per bucket, DDP's),
    ``natural`` (the input embedding's naturally sparse gradient summed by ``scheme``, the rest dense), ``topk``
    (DGC top-k with error feedback on every gradient bucket, summed by ``scheme``), or a local SGD method
    (``post_local_sgd``, ``diloco``, ``edit``, ``a_edit``: workers train apart and average pseudo-gradients, set up
    by the ``local_sgd`` section; ``local_sgd.compress`` says what of them is sent). The names: ``config.names``."""
    scheme: str = "allreduce"
    """The communication scheme summing what ``method`` sends sparse: ``allreduce`` (dense), ``zen``, ``bp_coo``,
    ``agsparse``, ``sparcml``, ``omnireduce``, ``sparse_ps`` (``zen_analysis.comm.schemes``), or ``auto``: the
    planner picks among all of them (dense all-reduce included) from live statistics every ``planner_every`` steps
    (``zen_analysis.comm.planner``). Where nothing is sparse (``method=dense``, local SGD with
    ``local_sgd.compress=dense``) it is ``allreduce``; ``natural`` needs a sparse scheme or ``auto``. Checked where
    a run starts, so a config edited in code (``cfg.sync.scheme = "zen"`` with ``method`` left ``dense``) is an
    error, not a silently dense run. Typed ``str``, unlike ``method``: the set of schemes is the registry's, which
    schemes defined outside the package join (``zen_analysis.comm.schemes.register_scheme``, an entry point, or a
    module of ``plugins``: :func:`~zen_analysis.config.plugins.scheme_names`), so a closed enum would be the wrong
    type; the check above is what refuses an unknown name, with the closest names."""
    plugins: tuple[str, ...] = ()
    """Modules (``my_pkg.schemes``) or ``.py`` files that register communication schemes when imported
    (``zen_analysis.comm.schemes.register_scheme``): imported wherever this config is built, before ``scheme`` is
    checked, so the launcher accepts their names and every rank (forked, spawned or under torchrun, each reading
    ``config.json``) has them before it builds its sync (:mod:`zen_analysis.config.plugins`)."""
    bucket_mb: float = 25.0
    """Dense gradients are flattened into buckets of about this size per collective."""
    hash_seed: int = 0
    """Seed of Zen's h0 for ``zen`` / ``bp_coo`` (rank 0's value is broadcast at start-up)."""
    topk_ratio: float = 0.05
    """With ``method=topk``: the fraction of each bucket's elements kept."""
    planner_topology: str = "auto"
    """``scheme=auto``: what the planner prices the candidates on: ``auto`` (this machine calibrated at the run's rank
    count, ``local-<n>``, or the lab's ``netlab-<B>`` when ``dist.network=netlab``; calibrated by the launcher on
    first use), a preset (``paper-tcp25``, ``paper-efa100``, ``h200-node``: a cluster), ``local-<n>`` or
    ``netlab-<B>``."""
    gpus_per_node: int = 0
    """``scheme=zen``: > 1 turns on Zen's hierarchical mode (dense reduce-scatter inside each node of this many
    ranks, Zen across nodes, all-gather inside); 0 is flat Zen over all ranks."""
    planner_every: int = 50
    """``scheme=auto``: steps between two decisions (the first at step 0); each costs one all-gather of an 8 KiB
    sketch per rank and the pricing (the run summary's ``planner`` entry reports the seconds)."""
    planner_hysteresis: float = 0.1
    """``scheme=auto``: a new choice replaces the current scheme only when modelled this much faster."""
    granularity: str = "rows"
    """How the natural path sums the embedding's gradient: ``rows`` (one index and ``dim`` values per row touched:
    Zen hashes, bitmap-encodes and scatters rows; every scheme alike) or ``elements`` (one index per non-zero
    element, found by a pass over the whole gradient). ``gpus_per_node`` > 1 works by elements."""
    row_source: str = "ids"
    """By rows: where this rank's rows come from: ``ids``, the token ids its forward passes looked up this step
    (free), or ``scan``, a row-wise pass over the gradient."""
    overlap: Switch = False
    """Start summing each gradient bucket while backward still runs (DDP's overlap): as soon as backward has produced
    every gradient of a bucket (``bucket_mb``; DDP's reverse registration order), its dense all-reduce is launched
    asynchronously, or with ``method=topk`` a worker thread compresses and sums it over a process group of its own;
    the loop waits for what is left after backward (the natural path sums the embedding meanwhile). The same buckets
    in the same order as without it: the same numbers, bit for bit. Not on capture steps (the capture edits gradients
    after backward). Pays where a sum waits on the network while a core is free for backward. Not with a local SGD
    method (no per-step sum) nor ``perturb.bandwidth_gbps``; ``auto`` (the natural-sparsity recipes' default): on
    where it applies, off otherwise (:meth:`~zen_analysis.config.experiment.ExperimentConfig.resolved`)."""
    wire_dtype: str = "model"
    """The dtype gradients are summed in: ``model`` (their own), or ``bfloat16`` / ``float16``: cast before the sum
    and back after, every scheme and dense all-reduce alike (DDP's ``bf16_compress_hook``; LLM training's usual
    wire format): half the value bytes of a float32 model. Lossy as the cast is (a sum is rounded once where a rank
    adds, :mod:`zen_analysis.wire.dtypes`; top-k's error feedback keeps the rounding rest)."""
    zen_cache_mb: float = 256.0
    """Zen's static hash sets (with their position tables and accumulators) kept per process, least recently
    used dropped first (``zen.bitmap.set_cache_limit``; the set in use is always kept): 8 + 4 / world bytes per
    element of each synchronised tensor size, e.g. 152 MiB for the lstm-words embedding (17.7M elements) on 4 ranks.
    256 holds the set of the largest tensor among ``make reproduce``'s recipes while bounding what a full cache
    adds to a rank's RSS (``scripts/zen_cache_rss.py workload`` measures it; the guide's "Zen, the system")."""

    def __post_init__(self) -> None:
        if self.overlap not in (True, False, AUTO):
            raise ValueError(f"sync.overlap must be true, false or 'auto', got {self.overlap!r}")
        if self.planner_every < 1:
            raise ValueError("sync.planner_every must be >= 1")
        if not 0 <= self.planner_hysteresis < 1:
            raise ValueError("sync.planner_hysteresis must be in [0, 1)")
        if self.zen_cache_mb <= 0:
            raise ValueError("sync.zen_cache_mb must be positive")
        if self.method not in SYNC_METHODS:
            raise ValueError(f"sync.method={self.method!r} is unknown; choose one of {SYNC_METHODS}")
        self.method = StepMethod(self.method) if self.method in set(StepMethod) else MethodName(self.method)
        load_plugins(self.plugins)
        if self.scheme not in SYNC_SCHEMES and self.scheme not in scheme_names():
            if self.scheme in SYNC_METHODS:
                raise ValueError(
                    f"sync.scheme={self.scheme!r} is unknown ({self.scheme} is a method: sync.method={self.scheme}); "
                    f"choose one of {scheme_names()}"
                )
            raise ValueError(unknown_name(f"sync.scheme={self.scheme!r} is unknown", self.scheme, scheme_names()))
        if self.method == StepMethod.DENSE and self.scheme != "allreduce":
            raise ValueError(
                f"sync.method=dense sums every gradient with a dense all-reduce, so sync.scheme={self.scheme!r} "
                "has nothing to sum: set sync.method=natural (the embedding's sparse gradient) or topk"
            )
        if self.method == StepMethod.NATURAL and self.scheme == "allreduce":
            raise ValueError(
                "sync.method=natural sums the embedding's sparse gradient with a sparse scheme: set sync.scheme "
                f"to one of {SYNC_SCHEMES[1:]}, or sync.method=dense for a dense all-reduce"
            )
        if self.granularity not in ("rows", "elements"):
            raise ValueError(f"sync.granularity must be 'rows' or 'elements', got {self.granularity!r}")
        if self.row_source not in ("ids", "scan"):
            raise ValueError(f"sync.row_source must be 'ids' or 'scan', got {self.row_source!r}")
        if self.wire_dtype not in WIRE_DTYPES:
            raise ValueError(f"sync.wire_dtype must be one of {WIRE_DTYPES}, got {self.wire_dtype!r}")
        if self.wire_dtype != "model" and self.gpus_per_node > 1:
            raise ValueError(
                "sync.wire_dtype applies to flat syncs: the hierarchical mode (sync.gpus_per_node > 1) "
                "sums in the gradients' dtype"
            )
        if self.bucket_mb <= 0:
            raise ValueError("sync.bucket_mb must be positive")
        if not 0 < self.topk_ratio <= 1:
            raise ValueError("sync.topk_ratio must be in (0, 1]")


LEGACY_FIELDS = ("planner_steps",)
"""Fields ``sync`` once had: ``planner_steps`` (the old planner's profiled steps; the planner now decides every
``planner_every`` steps from sketches). Stored configs of older runs still load (``config.overrides`` drops it)."""
