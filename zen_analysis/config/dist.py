"""``dist``: processes, their backend and launcher, and the network they talk over."""

from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("auto", "gloo", "nccl")
LAUNCHERS = ("auto", "fork", "torchrun")
NETWORKS = ("loopback", "netlab")
SHARDINGS = ("none", "fsdp")


@dataclass(kw_only=True)
class DistConfig:
    num_ranks: int = 4
    backend: str = "auto"
    """``auto``: nccl when every rank has a GPU, else gloo."""
    launcher: str = "auto"
    """``auto``: fork on CPU, a torchrun subprocess when CUDA is available."""
    timeout_s: float = 120.0
    """A collective that waits longer fails with a clear error (hung or dead peer)."""
    master_addr: str = "127.0.0.1"
    """torchrun only: the rendezvous endpoint's host. Forked CPU ranks meet through a file store instead, and
    bind gloo to the loopback interface: nothing of theirs listens beyond loopback."""
    master_port: int = 0
    """torchrun only: the endpoint's port; 0 picks a free one. torchrun's c10d store listens on it on every
    interface (as torchrun always does)."""
    network: str = "loopback"
    """``netlab``: the ranks run in the emulated network (:mod:`zen_analysis.ranks.netlab`, root only), each lab node
    behind a link of ``bandwidth_gbps``; the lab is built for the launch and removed after it. Changes time, not
    numbers."""
    bandwidth_gbps: float = 1.0
    """netlab only: each node's link, Gbit/s each way."""
    ranks_per_node: int = 1
    """netlab only: ranks sharing a lab node (loopback between them, the node's link to the others). Under
    torchrun, one torchrun per node, inside its namespace, meeting at node 0's lab address."""

    sharding: str = "none"
    """``none``: every rank holds the whole model (data parallel, DDP's layout). ``fsdp``: FSDP2's
    ``fully_shard`` (:mod:`zen_analysis.fsdp.training`): the input embedding a unit of its own, each transformer
    block one, the rest the root; every parameter, gradient and optimizer moment sharded by rows across the ranks.
    ``sync.method=dense`` is stock FSDP2; ``natural`` with ``sync.scheme=zen`` sums the embedding's gradient by
    Zen's sparse reduce-scatter over hashed row ownership, ``auto`` chooses dense or sparse for it. LLM families
    only; the capture records the embedding's natural gradient (``capture.topk_scope=none``)."""

    def __post_init__(self) -> None:
        if self.sharding not in SHARDINGS:
            raise ValueError(f"dist.sharding={self.sharding!r} is unknown; choose one of {SHARDINGS}")
        if self.num_ranks < 1:
            raise ValueError("dist.num_ranks must be >= 1")
        if self.backend not in BACKENDS:
            raise ValueError(f"dist.backend={self.backend!r} is unknown; choose one of {BACKENDS}")
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"dist.launcher={self.launcher!r} is unknown; choose one of {LAUNCHERS}")
        if self.timeout_s <= 0:
            raise ValueError("dist.timeout_s must be positive")
        if self.network not in NETWORKS:
            raise ValueError(f"dist.network={self.network!r} is unknown; choose one of {NETWORKS}")
        if not self.bandwidth_gbps > 0:
            raise ValueError(f"dist.bandwidth_gbps must be positive, got {self.bandwidth_gbps}")
        if self.ranks_per_node < 1 or self.num_ranks % self.ranks_per_node:
            raise ValueError(f"dist.ranks_per_node={self.ranks_per_node} must divide dist.num_ranks={self.num_ranks}")
