"""Who am I: rank, world size and device from the environment, and process-group setup/teardown.

The same variables drive every launcher: our fork launcher sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` itself,
with ``ZEN_ANALYSIS_FILE_STORE`` (a ``FileStore`` in the run directory: no listening socket) and
``GLOO_SOCKET_IFNAME`` (loopback); torchrun sets ``RANK``.. and ``MASTER_ADDR``/``MASTER_PORT`` for each rank it
starts, and its c10d store listens on that port on every interface (its endpoint, as configured). Without them the
process is a single rank (world size 1) and no process group is created: ``train(cfg)`` runs in a notebook kernel as is.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from zen_analysis.config import DistConfig


def loopback_interface() -> str:
    """The loopback network interface's name (``lo`` on Linux), read from its IFF_LOOPBACK flag."""
    for d in sorted(Path("/sys/class/net").glob("*")):
        try:
            if int((d / "flags").read_text(), 16) & 0x8:
                return d.name
        except (OSError, ValueError):
            continue
    return "lo"


def loopback_env(store: Path) -> dict[str, str]:
    """Environment for a forked rank that talks on loopback only: the rendezvous is a ``FileStore`` at ``store``
    (no listening socket: c10d's ``TCPStore`` binds every interface whatever ``MASTER_ADDR`` says) and gloo binds
    its connections to the loopback interface (by default it takes the address the host name resolves to)."""
    return {"ZEN_ANALYSIS_FILE_STORE": str(store), "GLOO_SOCKET_IFNAME": loopback_interface()}


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0 gates printing and run-level file writing."""
        return self.rank == 0


def resolve_backend(cfg: DistConfig) -> str:
    if cfg.backend != "auto":
        return cfg.backend
    return "nccl" if torch.cuda.is_available() else "gloo"


def init(cfg: DistConfig) -> RankInfo:
    """Create the default process group from the environment (if any) and pick this rank's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    backend = resolve_backend(cfg)
    if backend == "nccl":
        if torch.cuda.device_count() == 0:
            raise ValueError("dist.backend=nccl needs CUDA devices; none is visible. Use dist.backend=gloo on CPU.")
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    if (world > 1 or cfg.sharding == "fsdp") and not dist.is_initialized():  # FSDP2 shards over a mesh, even of 1
        # the fork launcher's file store (no socket); torchrun's ranks rendezvous by env:// at its endpoint; a lone
        # process started by neither, an in-memory store
        store_path = os.environ.get("ZEN_ANALYSIS_FILE_STORE")
        store = dist.FileStore(store_path, world) if store_path else None
        if store is None and world == 1 and "MASTER_ADDR" not in os.environ:
            store = dist.HashStore()
        dist.init_process_group(
            backend=backend,
            store=store,
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=cfg.timeout_s),
            device_id=device if backend == "nccl" else None,
        )
    return RankInfo(rank=rank, world_size=world, local_rank=local_rank, device=device)


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
