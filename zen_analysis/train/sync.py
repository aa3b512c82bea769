"""Gradient synchronization plugged into the training loop.

The loop calls ``sync.attach(model)`` once and ``sync.synchronize(model)`` after the last micro-batch's backward
of every step; after it every rank holds the same averaged gradient. The default, :class:`DenseAllReduce`, is
what DDP does: broadcast rank 0's parameters once, then all-reduce flattened gradient buckets.
:class:`SparseSync` sends the embedding gradient through a sparse scheme (Zen by default). EDiT plugs in
through the same two calls (``build_sync``), not by forking the loop.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from zen_analysis.config import SyncConfig


class GradSync:
    """The loop's contract with a synchronization: every hook and counter the training loop reads, declared here
    with its default, so the loop calls methods and reads attributes instead of probing for them.

    A subclass implements :meth:`attach` and :meth:`synchronize`; the rest is optional."""

    name: str = "sync"
    local: bool = False
    """True: the loop logs rank-local losses (a per-step loss all-reduce would make every step a rendezvous)."""
    sparse_bytes_sent: int | None = None
    """Bytes the sparse path has sent so far (None: there is no sparse path, and the metrics say nothing of it)."""
    bytes_sent: int | None = None
    """Bytes this rank has sent in all (None where not counted)."""
    sync_seconds: float = 0.0
    """Seconds spent in syncs and rendezvous (the loop's stragglers scale compute time only)."""
    decisions: dict | None = None
    """Zen's planner: what it chose per tensor, and why (the run summary's ``planner``)."""
    log: list | tuple = ()
    """Per-sync rows the loop writes to ``local_sgd/rank<r>.jsonl`` (local SGD)."""
    delay: Callable[[int], None] | None = None
    """Under ``perturb.bandwidth_gbps``: sleeps as long as an all-reduce of n bytes takes on the slow link."""
    link_seconds: Callable[[int], float] | None = None
    """Under ``perturb.bandwidth_gbps``: seconds an all-reduce of n bytes takes on the slow link (asynchronous
    syncs keep their own link clock)."""

    def attach(self, model: nn.Module) -> None:
        raise NotImplementedError

    def synchronize(self, model: nn.Module) -> None:
        raise NotImplementedError

    def set_link(self, delay: Callable[[int], None], link_seconds: Callable[[int], float]) -> None:
        """The emulated slow link of ``perturb.bandwidth_gbps`` (before :meth:`attach`)."""
        self.delay, self.link_seconds = delay, link_seconds

    def max_local_steps(self, num_steps: int) -> int:
        """How many loop iterations this rank runs for ``num_steps`` configured steps (A-EDiT: more or fewer)."""
        return num_steps

    def should_stop(self) -> bool:
        """Whether the loop ends after the current step (A-EDiT's time budget)."""
        return False

    def finalize(self, model: nn.Module) -> None:
        """After the last step (local SGD: one last sync, so the final model is the global one)."""

    def describe(self) -> dict | None:
        """The run summary's ``sync`` entry (None: none)."""
        return None


class DenseAllReduce(GradSync):
    """Bucketed dense all-reduce of every gradient, averaged over ranks (the baseline)."""

    name = "allreduce"

    def __init__(self, *, bucket_mb: float = 25.0, group: dist.ProcessGroup | None = None) -> None:
        self.bucket_bytes = int(bucket_mb * 2**20)
        self.group = group
        self.delay = None
        """Set by the loop under ``perturb.bandwidth_gbps``: sleeps as long as an all-reduce of n bytes would take."""
        self.bytes_sent = 0
        """Bytes this rank sent in all-reduces so far (ring volume, 2 (W - 1) / W x buffer)."""
        self._buckets: list[list[nn.Parameter]] = []

    def _world(self) -> int:
        return dist.get_world_size(self.group) if dist.is_initialized() else 1

    def attach(self, model: nn.Module, params: list[nn.Parameter] | None = None) -> None:
        """Broadcast rank 0's parameters and bucket ``params`` (default: every trainable parameter)."""
        if params is None:
            params = [p for p in model.parameters() if p.requires_grad]
        if self._world() > 1:
            for p in params:  # identical start on every rank, whatever each rank's RNG did
                dist.broadcast(p.data, src=0, group=self.group)
        self._buckets, bucket, size = [], [], 0
        for p in params:
            bucket.append(p)
            size += p.numel() * p.element_size()
            if size >= self.bucket_bytes:
                self._buckets.append(bucket)
                bucket, size = [], 0
        if bucket:
            self._buckets.append(bucket)

    def synchronize(self, model: nn.Module) -> None:
        world = self._world()
        if world == 1:
            return
        for bucket in self._buckets:
            flat_N = flatten_grads(bucket)
            dist.all_reduce(flat_N, group=self.group)
            self.bytes_sent += int(2 * (world - 1) / world * flat_N.numel() * flat_N.element_size())
            if self.delay:
                self.delay(flat_N.numel() * flat_N.element_size())
            flat_N /= world
            unflatten_into_grads(bucket, flat_N)


def flatten_grads(bucket: list[nn.Parameter]) -> torch.Tensor:
    """The bucket's gradients (zeros where a parameter has none) as one flat tensor."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in bucket])


def unflatten_into_grads(bucket: list[nn.Parameter], flat_N: torch.Tensor) -> None:
    """Write consecutive slices of ``flat_N`` into the bucket's ``.grad`` (created where missing)."""
    offset = 0
    for p in bucket:
        n = p.numel()
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        p.grad.copy_(flat_N[offset : offset + n].view_as(p))
        offset += n


class SparseSync(GradSync):
    """Natural sparsity: the input embedding's gradient (rows of the tokens seen, the rest exactly zero) is
    summed by a sparse scheme of :mod:`zen_analysis.comm` — ``zen`` by default — and averaged; every other
    parameter goes through the dense bucketed all-reduce, as the Zen paper does (sparse path for the embedding
    only). Bytes and seconds of the sparse path accumulate in ``sparse_bytes_sent`` / ``sparse_seconds``.

    The scheme's hash seed (``seed`` option, h0) is broadcast from rank 0 at ``attach`` so every rank agrees.
    """

    def __init__(
        self,
        scheme: str = "zen",
        *,
        bucket_mb: float = 25.0,
        group: dist.ProcessGroup | None = None,
        planner=None,
        gpus_per_node: int = 0,
        **options,
    ) -> None:
        from zen_analysis.comm import build_scheme

        self.name = scheme
        self.options = options
        self.planner = planner
        """With ``scheme="auto"``: a :class:`zen_analysis.zen.planner.Planner`; the embedding goes through dense
        all-reduce while it profiles, then through the scheme it picks (``decisions``)."""
        self.scheme = build_scheme("allreduce" if scheme == "auto" else scheme, **({} if scheme == "auto" else options))
        self.gpus_per_node = gpus_per_node
        """Zen's hierarchical mode when > 1: reduce-scatter inside nodes, Zen across, all-gather inside."""
        self._groups = None
        self.group = group
        self.dense = DenseAllReduce(bucket_mb=bucket_mb, group=group)
        self.sparse_params: list[nn.Parameter] = []
        self.sparse_bytes_sent = 0
        self.sparse_seconds = 0.0

    def attach(self, model: nn.Module) -> None:
        from zen_analysis.train.model import input_embedding_name

        name = input_embedding_name(model)
        named = dict(model.named_parameters())
        self.sparse_params = [named[name]]
        others = [p for n, p in named.items() if p.requires_grad and n != name]
        self.dense.attach(model, others)
        world = self.dense._world()
        if world > 1:
            dist.broadcast(self.sparse_params[0].data, src=0, group=self.group)
            if hasattr(self.scheme, "seed"):
                seed = torch.tensor([int(self.scheme.seed)], dtype=torch.int64, device=self.sparse_params[0].device)
                dist.broadcast(seed, src=0, group=self.group)
                self.scheme.seed = int(seed)
        if self.gpus_per_node > 1 and world > 1:
            if self.name != "zen" or self.group is not None:
                raise ValueError("the hierarchical mode (sync.gpus_per_node > 1) is Zen's, on the default group")
            from zen_analysis.zen.sync import NodeGroups

            self._groups = NodeGroups(self.gpus_per_node)

    def synchronize(self, model: nn.Module) -> None:
        world = self.dense._world()
        if world == 1:
            return
        self.dense.synchronize(model)
        for p in self.sparse_params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            if self.planner is not None and self.name == "auto":
                self._profile(p.grad)
            if self._groups is not None:
                from zen_analysis.zen.sync import zen_sum_hierarchical

                flat = p.grad.detach().reshape(-1).float()
                used: list = []
                summed = zen_sum_hierarchical(flat, self._groups, seed=self.scheme.seed, exchanges=used).view_as(p.grad)
                p.grad.copy_(summed / world)
                records = [r for ex in used for r in ex.records.values()]
                self.sparse_bytes_sent += sum(r.bytes_sent for r in records)
                self.sparse_seconds += sum(r.seconds for r in records)
                continue
            self.scheme.run(p.grad, group=self.group)  # in place, like all_reduce
            p.grad.div_(world)
            measured = self.scheme.last_measured()
            self.sparse_bytes_sent += int(measured["bytes_sent"].sum())
            self.sparse_seconds += float(measured["seconds"].sum())

    def _profile(self, grad: torch.Tensor) -> None:
        """Gather every rank's non-zero indices of the embedding gradient for the planner (profiling only)."""
        from zen_analysis.comm import build_scheme
        from zen_analysis.comm.exchange import Exchange

        ex = Exchange(self.group)
        idx_K = torch.nonzero(grad.reshape(-1), as_tuple=True)[0]
        counts_W = ex.all_gather_counts(idx_K.numel())
        everyone = torch.split(ex.all_gather_v(idx_K, counts_W).cpu(), counts_W.tolist())
        choice = self.planner.observe("embedding", list(everyone), grad.numel())
        if choice is not None:
            self.name = choice
            self.scheme = build_scheme(choice, **self.options)  # the seed reaches the hashed schemes only

    @property
    def decisions(self) -> dict:
        return self.planner.decisions if self.planner is not None else {}


SYNCS = {"allreduce": DenseAllReduce}
SPARSE_SCHEMES = ("zen", "bp_coo", "agsparse", "sparcml", "omnireduce", "sparse_ps")


def build_sync(cfg: SyncConfig, local_sgd=None) -> GradSync:
    """The synchronization named by ``cfg.scheme``: ``allreduce`` (dense) or a sparse scheme for the embedding;
    with ``cfg.compress == "topk"``, every gradient bucket top-k sparsified and summed by the scheme."""
    from zen_analysis.local_sgd import METHODS
    from zen_analysis.zen.bitmap import set_cache_limit

    set_cache_limit(int(cfg.zen_cache_mb * 2**20))
    if cfg.scheme in METHODS:
        from zen_analysis.config import LocalSGDSection
        from zen_analysis.local_sgd import LocalSGD, method_config

        section = local_sgd or LocalSGDSection()
        return LocalSGD(method_config(cfg.scheme, **section.overrides()), name=cfg.scheme)
    if cfg.compress == "topk":
        from zen_analysis.zen.ddp import CompressedSync

        if cfg.scheme not in (*SYNCS, *SPARSE_SCHEMES):
            raise ValueError(f"sync.scheme={cfg.scheme!r} is unknown; available: {sorted([*SYNCS, *SPARSE_SCHEMES])}")
        return CompressedSync(cfg.scheme, ratio=cfg.topk_ratio, bucket_mb=cfg.bucket_mb, seed=cfg.hash_seed)
    if cfg.scheme in SYNCS:
        return SYNCS[cfg.scheme](bucket_mb=cfg.bucket_mb)
    if cfg.scheme == "auto":
        from zen_analysis.zen.planner import Planner

        planner = Planner(topology=cfg.planner_topology, profile_steps=cfg.planner_steps)
        return SparseSync("auto", bucket_mb=cfg.bucket_mb, planner=planner, seed=cfg.hash_seed)
    if cfg.scheme in SPARSE_SCHEMES:
        return SparseSync(cfg.scheme, bucket_mb=cfg.bucket_mb, gpus_per_node=cfg.gpus_per_node, seed=cfg.hash_seed)
    raise ValueError(f"sync.scheme={cfg.scheme!r} is unknown; available: {sorted([*SYNCS, *SPARSE_SCHEMES, 'auto', *METHODS])}")
