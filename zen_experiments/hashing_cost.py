"""Cost of building the push buckets (paper Fig. 16): Algorithm 1 against the argsort reference.

``hashing_cost`` times :func:`~zen_analysis.zen.hierarchical.hierarchical_hash` on random index sets of a
``numel``-element tensor at several densities, sweeping the parallel-region size r1 (multiples of the number of
indices, k fixed) and the number of second-level hashes k (r1 fixed), next to :func:`bucket_reference` on the
same sets, and, on CPU tensors, Algorithm 1 in torch rounds (``backend="torch"``, r1 = 2x, k = 3) beside the
compiled kernel the sweeps use. Medians over repeats after one warm-up; on CUDA tensors the device is synchronised
around each call.
The fraction of indices that fell through to the serial regions is reported with each time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

import pandas as pd
import torch

from zen_analysis.zen.hierarchical import bucket_reference, hierarchical_hash

__all__ = ["hashing_cost"]


def _timed(fn, device: torch.device, repeats: int) -> tuple[float, object]:
    out = fn()  # warm-up
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2], out


def hashing_cost(
    *,
    numel: int = 1 << 24,
    densities: Sequence[float] = (0.01, 0.02, 0.05, 0.1),
    num_partitions: int = 16,
    r1_factors: Sequence[float] = (1, 2, 4),
    ks: Sequence[int] = (1, 2, 3, 4),
    k_fixed: int = 3,
    r1_fixed: float = 2,
    repeats: int = 3,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> pd.DataFrame:
    """One row per (density, sweep, setting): median seconds and serial fraction; ``sweep`` is ``r1`` (Fig.
    16a), ``k`` (Fig. 16b), ``argsort`` (the reference) or ``torch_rounds`` (Algorithm 1 without the kernel)."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for d in densities:
        nnz = int(d * numel)
        idx = torch.randperm(numel, generator=gen)[:nnz].to(dev)
        hash_d = partial(hierarchical_hash, idx, num_partitions, seed=seed)  # bound now: timed in this iteration
        for factor in r1_factors:
            s, b = _timed(partial(hash_d, k=k_fixed, r1=int(factor * nnz)), dev, repeats)
            rows.append(_row(d, "r1", f"r1={factor:g}x, k={k_fixed}", s, b.serial_count / max(nnz, 1)))
        for k in ks:
            s, b = _timed(partial(hash_d, k=k, r1=int(r1_fixed * nnz)), dev, repeats)
            rows.append(_row(d, "k", f"k={k}, r1={r1_fixed:g}x", s, b.serial_count / max(nnz, 1)))
        if dev.type == "cpu":
            s, b = _timed(partial(hash_d, k=3, r1=2 * nnz, backend="torch"), dev, repeats)
            rows.append(_row(d, "torch_rounds", "torch rounds (r1=2x, k=3)", s, b.serial_count / max(nnz, 1)))
        s, _ = _timed(partial(bucket_reference, idx, num_partitions, seed=seed), dev, repeats)
        rows.append(_row(d, "argsort", "argsort reference", s, 0.0))
    df = pd.DataFrame(rows)
    return df.assign(numel=numel, num_partitions=num_partitions, device=str(dev))


def _row(density: float, sweep: str, setting: str, seconds: float, serial_fraction: float) -> dict:
    return {
        "density": density,
        "sweep": sweep,
        "setting": setting,
        "seconds": seconds,
        "serial_fraction": serial_fraction,
    }
