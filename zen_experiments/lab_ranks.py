"""The ranks of the communication-dominated lab (:mod:`~zen_experiments.lab_check`): each waits out its
compute, then sums its rows with every scheme in turn, over the network lab's shaped links or loopback, and checks
every sum against a dense all-reduce.

Shape suffixes: K rows one rank holds, U rows of the union over the ranks."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist

from zen_analysis.comm.schemes import build_scheme
from zen_analysis.ranks.netlab import NetLab
from zen_analysis.ranks.procs import fork_launch


def _refill(x: torch.Tensor, union_U: torch.Tensor, rows_K: torch.Tensor, values: torch.Tensor) -> None:
    """``x`` back to this rank's gradient after a sum overwrote it: the union's rows zeroed, its own written."""
    x.index_fill_(0, union_U, 0)
    x[rows_K] = values


def _lab_rank(
    rank: int, world: int, sets_by_step: list, num_rows: int, width: int, names: list, compute_s: float, repeats: int
) -> dict[str, list[dict]]:
    """One rank of :func:`lab_check`: per step and repeat, every scheme in turn (drift falls on all alike): wait for
    the others, sleep the compute, sum. Natural workloads: the sparse schemes sum by rows (``sum_rows``: the rows and
    their values, as Zen's drop-in sums an embedding), dense all-reduce all-reduces the dense table in place, as DDP
    does; top-k ones sum the flat gradient in place. Every sum is checked against ``dist.all_reduce``, after a
    barrier (a rank checking while others still sum would take their cores). One warm-up repeat. Returns the
    rows of every timed sum (``steps``) and the seconds inside each phase's collective calls (``phases``)."""
    schemes = {n: build_scheme(n, seed=0) for n in names}
    # a process group (its own TCP connections) per scheme: a scheme's losses and the congestion window they leave
    # must not slow the next scheme's transfers, as they would on shared connections
    groups = {n: dist.new_group(backend="gloo") for n in names}
    out, phases = [], []
    for step, sets in enumerate(sets_by_step):
        rows_K = sets[rank]
        gen = torch.Generator().manual_seed(7919 * step + rank)
        values = torch.randint(1, 5, (rows_K.numel(), *((width,) if width else ())), generator=gen).float()
        x = torch.zeros(num_rows, width) if width else torch.zeros(num_rows)
        x[rows_K] = values
        ref = x.clone()
        dist.all_reduce(ref)  # the reference: a dense all-reduce (integers: exact in any order)
        union_U = torch.unique(torch.cat(list(sets)))
        for rep in range(repeats + 1):
            for name, scheme in schemes.items():
                in_place = not width or not scheme.scans_dense
                if in_place:
                    _refill(x, union_U, rows_K, values)
                dist.barrier()
                t0 = time.perf_counter()
                if compute_s > 0:
                    time.sleep(compute_s)
                t1 = time.perf_counter()
                g = groups[name]
                got = scheme.run(x, group=g) if in_place else scheme.sum_rows(rows_K, values, num_rows, group=g)
                t2 = time.perf_counter()
                dist.barrier()
                if in_place:
                    equal = torch.equal(x, ref)
                else:
                    order = torch.argsort(got[0])
                    equal = torch.equal(got[0][order], union_U) and torch.equal(got[1][order], ref[union_U])
                if rep:
                    key = {"step": step, "rep": rep, "scheme": name, "rank": rank}
                    out.append(key | {"step_s": t2 - t0, "slept_s": t1 - t0, "sum_s": t2 - t1, "equal": bool(equal)})
                    m = scheme.last_measured().groupby("phase")[["wire_seconds", "calls"]].sum()
                    phases += [key | {"phase": p, "wire_s": r.wire_seconds, "calls": r.calls} for p, r in m.iterrows()]
    return {"steps": out, "phases": phases}


def _cpu_seconds() -> tuple[float, float]:
    """(seconds every CPU of this machine spent in user and system time, of them this process's and its reaped
    children's) so far: ``/proc/stat`` (Linux) and ``getrusage``."""
    with open("/proc/stat") as f:
        user, nice, system = (int(v) for v in f.readline().split()[1:4])
    own = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (user + nice + system) / os.sysconf("SC_CLK_TCK"), sum(r.ru_utime + r.ru_stime for r in own)


def run_lab(
    sets_by_step: list,
    *,
    num_rows: int,
    width: int,
    schemes: Sequence[str],
    compute_s: float,
    repeats: int,
    bandwidth_gbps: float,
    network: str,
) -> dict:
    """:func:`_lab_rank` on one rank per set (every rank behind a ``bandwidth_gbps`` link of a fresh lab, or on
    loopback): every rank's ``steps`` and ``phases`` rows together, and ``others_cpu_share``, the share of the
    machine's CPU time that processes other than these ranks took while they ran (user and system time; the
    network's softirq work is in neither): a machine shared with other jobs slows the ranks' sums, and says so."""
    n = len(sets_by_step[0])
    args = (sets_by_step, num_rows, width, list(schemes), compute_s, repeats)
    timeout = 120 + 4 * len(sets_by_step) * (repeats + 1) * len(schemes) * (compute_s + 2.0)
    (busy0, own0), t0 = _cpu_seconds(), time.perf_counter()
    if network == "netlab":
        with NetLab(n, bandwidth_gbps) as lab:
            results = fork_launch(_lab_rank, n, *args, lab=lab, timeout_s=timeout)
    else:
        results = fork_launch(_lab_rank, n, *args, timeout_s=timeout)
    (busy1, own1), wall = _cpu_seconds(), time.perf_counter() - t0
    others = max(0.0, (busy1 - busy0) - (own1 - own0)) / (wall * (os.cpu_count() or 1))
    out = {key: [r for rs in results for r in rs[key]] for key in ("steps", "phases")}
    return out | {"others_cpu_share": others}
