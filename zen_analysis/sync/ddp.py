"""Zen in a user's own DDP training, and compression sparsity for the toolkit's loop.

:func:`register` is the one public entry point for DDP (``state = register(ddp_model, mode="natural")``):

* ``mode="natural"`` (the paper's main case, lossless): the gradients of the sparse parameters (by default the untied
  token tables, not position tables: :func:`select_sparse`) are summed with a sparse scheme (Zen by default) over
  their non-zeros; every other gradient goes the stock all-reduce way, asynchronously, so dense buckets still overlap
  backward. Both kinds of embedding gradient: dense ``.grad`` (the transformers default; a bucket holding it is summed
  inside the hook, the rest of that bucket densely) and ``nn.Embedding(sparse=True)`` (DDP gives it a bucket of its
  own holding a sparse COO tensor; the hook returns the summed rows as one: on NCCL, where a sparse all-reduce does
  not exist, this is one).
* ``mode="topk"``: DGC top-k of every bucket with error feedback, then the scheme (:func:`comm_hook`). Residuals
  are kept per parameter, so they follow their parameters when DDP rebuilds its buckets after the first step;
  the threshold is each rank's own (``threshold="local"``) or, as the paper does, one from every rank's samples
  (``"global"``); ``overlap=True`` runs the buckets' compression and sums on a worker thread over a process group of
  its own, so they proceed while backward computes the next buckets (the hook returns a pending future).

Both states report what they did with the same attributes (``state.summary()``, the keys of
:data:`~zen_analysis.sync.compressed.REPORT`): ``sparse_names`` (the parameters the scheme sums), ``bytes_sent`` (by
the scheme), ``allreduce_bytes_sent`` (by the dense all-reduce), ``sync_s`` (seconds spent summing), ``exposed_s`` (of
those, seconds backward waited for), and ``last_step`` (one row per bucket of the last step: its parameters, size,
path and what it sent).

The toolkit's own loop uses the same compression (:mod:`zen_analysis.sync.compressed`, ``sync.method=topk``):
fixed buckets of ``bucket_mb`` at the loop's synchronization point. Zen adds no loss beyond the sparsifier: for the same
masks the result equals AGsparse's and a dense all-reduce of the sparsified tensors (tested).

``select_sparse`` and ``sparse_parameters`` live in :mod:`zen_analysis.sync.selection` and are re-exported here
for callers that import them from this module.
"""

# no ``from __future__ import annotations`` here: DDP checks the hook's annotations at runtime
import time
import warnings

import torch
import torch.distributed as dist
from torch import nn

from zen_analysis.comm.planner import Planner
from zen_analysis.evaluation.calibrate import planner_topology
from zen_analysis.sync.compressed import HookState, bucket_key, compress_and_sum
from zen_analysis.sync.natural_hook import NaturalState, bucket_offsets, looked_up_tables, natural_hook
from zen_analysis.sync.selection import (  # sparse_parameters: re-exported for callers importing it from here
    select_sparse,
    sparse_parameters,  # noqa: F401
    tied_names,
    warn_tied,
)
from zen_analysis.wire.inflight import outside_python_tls
from zen_analysis.zen.bitmap import cache_limit, set_cache_limit


@outside_python_tls
def comm_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: DGC top-k per bucket (residuals per parameter), then the state's sparse scheme; on
    a worker thread when ``state.overlap``."""
    buffer = bucket.buffer()
    if buffer.is_sparse:
        raise ValueError("mode='topk' needs dense gradients; sum nn.Embedding(sparse=True) with mode='natural'")
    parts, last, step = bucket_offsets(bucket), bucket.is_last(), state.step
    key = bucket_key(state, parts)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    if not state.overlap:
        out, row = compress_and_sum(buffer, state, key, parts, step=step)
        state.exposed_s += row["seconds"]
        state._finish_bucket(row, last)
        fut.set_result(out)
        return fut
    called = time.perf_counter()

    def work() -> None:
        try:
            out, row = compress_and_sum(buffer, state, key, parts, step=step, group=state._worker_group)
            if last:  # the last bucket's hook runs as backward ends: what follows it, backward waits for
                state.exposed_s += time.perf_counter() - called
            state._finish_bucket(row, last)
            fut.set_result(out)
        except BaseException as e:  # noqa: BLE001 - DDP re-raises it from backward
            fut.set_exception(e)

    state._executor.submit(work)
    return fut


def model_group(ddp_model: nn.Module, group=None):
    """The process group the hook sums over: the DDP model's own (``ddp_model.process_group``: DDP averages its
    gradients over it, so a sum over any other set of ranks would be wrong), or ``group`` when it spans the same
    ranks; a ``group`` of other ranks is an error."""
    own = getattr(ddp_model, "process_group", None)
    if own is None:
        return group
    if group is not None and group is not own:
        ranks, mine = dist.get_process_group_ranks(group), dist.get_process_group_ranks(own)
        if ranks != mine:
            raise ValueError(
                f"group= spans ranks {ranks}, but the DDP model averages over its process group of ranks "
                f"{mine}: leave group= out (the hook uses the model's own group)"
            )
    return own


def _reserve_hash_sets(scheme: str, numel: int) -> None:
    """Raise the static-hash-set cache (:func:`~zen_analysis.zen.bitmap.set_cache_limit`) to hold Zen's sets for
    ``numel`` elements summed per step (9 bytes each: S_p, the position table, an accumulator), so the hook never
    rebuilds a set every step: top-k sums every bucket, one set per bucket size, and the default cache holds a
    few 25 MB buckets only. Never lowers it."""
    if scheme in ("zen", "auto"):  # auto: Zen may be picked
        need = 9 * numel + (1 << 20)
        if need > cache_limit():
            set_cache_limit(need)


def _planner(scheme: str, group, topology, every: int, hysteresis: float):
    """``scheme="auto"``'s planner, on ``topology`` (a name resolved at the group's size, never calibrating here:
    a rank must not fork a calibration), or None for a fixed scheme."""
    if scheme != "auto":
        return None
    if isinstance(topology, str):
        topology = planner_topology(topology, dist.get_world_size(group), calibrate_missing=False)
    return Planner(topology=topology, every=every, hysteresis=hysteresis)


def register(
    ddp_model: nn.Module,
    *,
    mode: str = "natural",
    scheme: str = "zen",
    params=None,
    group=None,
    seed: int = 0,
    ratio: float = 0.05,
    threshold: str = "local",
    overlap: bool = False,
    granularity: str = "rows",
    row_source: str = "ids",
    topology="auto",
    planner_every: int = 50,
    hysteresis: float = 0.1,
):
    """Put Zen (or another scheme of :mod:`zen_analysis.comm`) into a ``DistributedDataParallel`` model; returns the
    hook's state (:class:`NaturalState` or :class:`HookState`: bytes sent, seconds, per-bucket rows).

    The hook sums over the DDP model's own process group (``DDP(..., process_group=pg)``; :func:`model_group`);
    ``group``, if given, must span the same ranks. Gradients are summed in their own dtype (a bf16 model's values
    travel at 2 bytes; :mod:`zen_analysis.wire.dtypes`).

    ``mode="natural"``: the gradients of ``params`` (default :func:`sparse_parameters`: the untied embeddings, dense
    or ``sparse=True``) are summed losslessly by ``scheme``, everything else by DDP's own all-reduce; a 2-D table by
    rows (``granularity="rows"``, :mod:`zen_analysis.wire.rows`) or by elements (``"elements"``). A dense ``.grad``'s
    rows are the ids its ``nn.Embedding`` looked up (``row_source="ids"``, :mod:`~zen_analysis.sync.lookups`:
    checked against a pass over the table on the first step) or a pass over the table every step (``"scan"``).
    ``mode="topk"``: DGC top-``ratio`` of every bucket with error feedback per parameter, then ``scheme`` (lossy as
    the sparsifier is; :func:`comm_hook`); ``threshold="local" | "global"``; ``overlap=True`` sums on a worker
    thread while backward goes on (creates a process group: call ``register`` on every rank).

    ``scheme="sparse_ps"`` is contiguous row ownership, the scheme users adopted before Zen (modded-nanogpt's sparse
    bigram gradient comms): each rank owns an even contiguous slice of the table's rows, a touched row goes to its
    owner, and the owners' sums come back to every rank (:mod:`~zen_analysis.comm.schemes.sparse_ps`); Zen's hashed
    owners balance what a skewed table puts on the first slice's owner (``bench exchange`` measures both).

    ``scheme="auto"``: the planner (:mod:`zen_analysis.comm.planner`) picks the scheme per tensor — each sparse
    parameter (natural), each bucket (top-k) — among all of them and dense all-reduce, every ``planner_every``
    steps, switching only for a gain over ``hysteresis``; priced on ``topology``: a
    :class:`~zen_analysis.pricing.topology.Topology`, a preset name (a GPU cluster: ``h200-node``, ``paper-efa100``),
    or ``auto``, this machine calibrated at the group's size (``local-<n>``; calibrate it once before the ranks
    start: ``zen_analysis.evaluation.calibrate.local(n)``). Its choices: ``state.decisions``.

    What the hook does is in the state's report, the same for both modes (:meth:`~.compressed.Stats.summary`):
    ``sparse_names`` (what goes through the scheme), ``left_dense`` (the embeddings natural mode's default left dense,
    and why: tied, or a position table; :func:`select_sparse`), ``hooked``, ``step``, ``bytes_sent``,
    ``allreduce_bytes_sent``, ``threshold_bytes_sent``, ``sync_s``, ``exposed_s``; ``last_step`` bucket by bucket.
    Natural mode with nothing to sum sparsely (a tied embedding, positions only) warns and leaves the model stock DDP:
    the state says ``hooked=False`` and counts nothing.

    The exit needs nothing of the user: the hook's asynchronous all-reduces go through
    :mod:`zen_analysis.wire.inflight`, which at exit waits for gloo's thread to let go of their tensors and
    callbacks before the interpreter finalizes (a thread that takes the GIL after that aborts the process,
    "terminate called without an active exception"). Deleting the DDP model before ``destroy_process_group()``
    (``scripts/ddp_transformers.py``) stays good practice."""
    module = getattr(ddp_model, "module", None)
    if module is None:
        raise ValueError("register() takes a torch.nn.parallel.DistributedDataParallel model")
    group = model_group(ddp_model, group)
    names = {id(p): n for n, p in module.named_parameters()}
    common = {  # what both hooks' states take alike
        "scheme": scheme,
        "group": group,
        "seed": seed,
        "names": names,
        "planner": _planner(scheme, group, topology, planner_every, hysteresis),
    }
    if mode == "natural":
        return _register_natural(ddp_model, module, params, granularity, row_source, common)
    if mode == "topk":
        return _register_topk(ddp_model, module, ratio, threshold, overlap, common)
    raise ValueError(f"mode must be 'natural' or 'topk', got {mode!r}")


def _register_natural(ddp_model: nn.Module, module: nn.Module, params, granularity: str, row_source: str, common):
    """:func:`register`'s ``mode="natural"``: the parameters chosen (``params``, or :func:`select_sparse`'s), the
    hook registered on them, or none with a warning where nothing is left to sum sparsely."""
    if params is not None:
        chosen, left = tuple(params), {}
        tied = tied_names(module)
        for p in chosen:
            if id(p) in tied:
                warnings.warn(
                    f"params: {tied[id(p)][0]} is tied to {tied[id(p)][1:]}: its gradient is dense, so Zen "
                    "sums every element of it (leave it out: stock DDP's all-reduce is cheaper)",
                    stacklevel=3,
                )
    else:
        chosen, left = select_sparse(module)
        warn_tied(left)
    if not chosen:
        warnings.warn(
            "natural mode: nothing to sum sparsely ("
            + ("params=[] is empty" if params is not None else f"left dense: {left or 'no nn.Embedding at all'}")
            + "): the model stays stock DDP, no hook registered (state.hooked is False, its counters stay 0)",
            stacklevel=3,
        )
        return NaturalState(params=(), granularity=granularity, left_dense=left, hooked=False, **common)
    _reserve_hash_sets(common["scheme"], sum(p.numel() for p in chosen))
    state = NaturalState(params=chosen, granularity=granularity, row_source=row_source, left_dense=left, **common)
    if granularity == "rows" and row_source == "ids":
        state._lookups = looked_up_tables(module, chosen, common["names"])
    ddp_model.register_comm_hook(state, natural_hook)
    return state


def _register_topk(ddp_model: nn.Module, module: nn.Module, ratio: float, threshold: str, overlap: bool, common):
    """:func:`register`'s ``mode="topk"``: DGC top-k of every bucket, then the scheme (:func:`comm_hook`)."""
    if any(getattr(m, "sparse", False) for m in module.modules() if isinstance(m, nn.Embedding)):
        raise ValueError("mode='topk' needs dense gradients; nn.Embedding(sparse=True) goes with mode='natural'")
    _reserve_hash_sets(common["scheme"], sum(p.numel() for p in module.parameters() if p.requires_grad))
    trainable = tuple(n for n, p in module.named_parameters() if p.requires_grad)
    state = HookState(ratio=ratio, threshold=threshold, overlap=overlap, sparse_names=trainable, **common)
    ddp_model.register_comm_hook(state, comm_hook)
    return state
