"""The process machinery below training: start ranks, watch them, stop them, and say which one failed and why.

It imports only the standard library, torch and ``zen_analysis.ranks.entry`` / ``env`` /
``netlab``, never the training loop, the model, the capture or the run directory, so the low-level measurements
(``comm``, ``zen``) can start ranks without importing training. :mod:`zen_analysis.runs.launch` (training runs)
builds on it.

* :func:`fork_launch`: run ``fn(rank, world, *args)`` on N forked gloo ranks and gather what each returns (tests,
  benchmarks and notebooks that exchange tensors without training).
* :func:`torchrun_per_node` / :func:`run_in_lab`: one ``torchrun`` per emulated lab node
  (:mod:`zen_analysis.ranks.netlab`), the guide's multi-node recipe on one machine.
* :func:`fork_ranks`, :func:`start_process` and :class:`RankGroup`: the one supervisor every launcher here uses
  (the training launcher's fork and torchrun paths, :func:`fork_launch`, the lab's torchrun nodes): start the
  processes (forked ranks run one preamble: one thread, die with the parent, Ctrl-C left to the parent, their
  environment and lab node), watch them until all succeed, one fails or time runs out, and stop the rest.
* :class:`RankFailedError` and :func:`blame`: which rank is the root cause (a fatal signal, then a real error,
  then an abort, then a timeout), with its traceback or the end of its log.

``torch.distributed.elastic``'s ``start_processes`` was not adopted: its failure report picks the first error
file by time, which here is often a consequence (a peer's gloo abort) rather than the cause :func:`blame` finds;
it has no way to run a forked rank inside a lab node's network namespace; and forked notebook functions, the
parent-death signal and the Ctrl-C behaviour the fault tests demand would all have to be rebuilt around it.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import functools
import multiprocessing as mp
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from zen_analysis.ranks.blame import RankFailedError, blame, log_tail
from zen_analysis.ranks.env import loopback_env
from zen_analysis.ranks.netlab import LAB_INTERFACE, NetLab, address, enter, enter_node

__all__ = [
    "Outcome",
    "RankFailedError",
    "RankGroup",
    "blame",
    "fork_launch",
    "fork_ranks",
    "free_port",
    "log_tail",
    "run_in_lab",
    "start_process",
    "torchrun_per_node",
]

_PR_SET_PDEATHSIG = 1
POLL_S = 0.2
"""How often a watch looks at its processes."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no orphans if a kernel is killed); with
    ``parent``, exit at once if that parent already died before the request was made."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    except OSError:  # not Linux: the launcher still stops its children on every exit path
        pass
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def _kill(procs: list[Any]) -> None:
    for p in procs:
        if _alive(p):
            p.terminate()
    deadline = time.monotonic() + 3
    for p in procs:
        _wait(p, max(0.0, deadline - time.monotonic()))
        if _alive(p):
            p.kill()
            _wait(p, 5)


def _alive(p: Any) -> bool:
    return p.poll() is None if isinstance(p, subprocess.Popen) else p.is_alive()


def _wait(p: Any, timeout: float) -> None:
    if isinstance(p, subprocess.Popen):
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    else:
        p.join(timeout)


def _exitcode(p: Any) -> int | None:
    return p.poll() if isinstance(p, subprocess.Popen) else p.exitcode


@dataclass
class Outcome:
    """How a watch of a :class:`RankGroup` ended."""

    codes: dict[int, int | None]
    """Each process's exit code when the watch ended (None: still running then; it was stopped after)."""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(c == 0 for c in self.codes.values())

    @property
    def failed(self) -> list[int]:
        return [r for r, c in self.codes.items() if c not in (None, 0)]

    @property
    def running(self) -> list[int]:
        return [r for r, c in self.codes.items() if c is None]


class RankGroup:
    """Processes started together (forked ranks or ``torchrun`` subprocesses), watched and stopped together."""

    def __init__(self, procs: list[Any]) -> None:
        self.procs = procs

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def codes(self) -> dict[int, int | None]:
        return {r: _exitcode(p) for r, p in enumerate(self.procs)}

    def stop(self) -> None:
        """SIGTERM every process still running, SIGKILL what is left after 3 s; returns when all have exited."""
        _kill(self.procs)

    def watch(
        self,
        *,
        poll_s: float = POLL_S,
        timeout_s: float | None = None,
        grace_s: float = POLL_S,
        on_tick: Callable[[], None] | None = None,
    ) -> Outcome:
        """Wait until every process has exited 0, one has failed, or ``timeout_s`` has passed; after a failure,
        ``grace_s`` more for near-simultaneous ones to land (which rank is the cause is decided from them all).
        ``on_tick`` runs at every look (progress, echoed logs). Every process still running is stopped before this
        returns, and on any exception (Ctrl-C included)."""
        start = time.monotonic()
        try:
            while True:
                time.sleep(poll_s)
                if on_tick is not None:
                    on_tick()
                codes = self.codes()
                if any(c not in (None, 0) for c in codes.values()):
                    time.sleep(grace_s)
                    return Outcome(self.codes())
                if all(c == 0 for c in codes.values()):
                    return Outcome(codes)
                if timeout_s is not None and time.monotonic() - start > timeout_s:
                    return Outcome(codes, timed_out=True)
        finally:
            self.stop()


def _rank_child(
    rank: int, body: Callable[[int], int], parent: int, environ: dict[str, str], lab_namespace: str | None
) -> None:
    """A forked rank's preamble, the same for every launcher, then ``body(rank)``'s exit code."""
    code = 1
    try:
        torch.set_num_threads(1)  # first: fork after the parent used the thread pool deadlocks otherwise
        _die_with_parent(signal.SIGKILL, parent)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt stops
        os.environ.update(environ)
        if lab_namespace is not None:  # this rank's lab node: gloo talks over its shaped link (the store stays a file)
            enter_node(lab_namespace)
        code = body(rank)
    except BaseException:  # noqa: BLE001 - a body reports its own errors; this is what escaped it
        traceback.print_exc()
    finally:
        os._exit(code)


def fork_ranks(
    world: int,
    body: Callable[[int], int],
    *,
    environ: Callable[[int], dict[str, str]] | None = None,
    lab=None,
) -> RankGroup:
    """Fork ``world`` rank processes; rank r sets ``environ(r)``, enters its lab node (``lab``: a
    :class:`~zen_analysis.ranks.netlab.NetLab` of ``world`` ranks) and exits with ``body(r)``. Fork, unlike spawn,
    runs functions defined in a notebook; the caller imports what the ranks need first, so they inherit it."""
    if lab is not None and lab.ranks != world:
        raise ValueError(f"the lab has {lab.ranks} ranks; {world} were asked for")
    ctx = mp.get_context("fork")
    procs = []
    for r in range(world):
        space = lab.namespace(lab.node_of(r)) if lab is not None else None
        env = environ(r) if environ is not None else {}
        procs.append(ctx.Process(target=_rank_child, args=(r, body, os.getpid(), env, space)))
    for p in procs:
        p.start()
    return RankGroup(procs)


def start_process(cmd: list[str], log: Path | None, *, env: dict[str, str] | None = None, namespace: str | None = None):
    """A subprocess (``torchrun``) in its own session that dies with this process, in lab ``namespace`` if given;
    its output to ``log`` (None: this process's stdout and stderr)."""

    def start() -> None:  # in the child, before exec
        _die_with_parent()
        if namespace is not None:
            enter(namespace)

    if log is None:
        return subprocess.Popen(cmd, start_new_session=True, preexec_fn=start, env=env)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=start, env=env
        )


def torchrun_per_node(
    lab, program: list[str], port: int, log_dir: Path, *, node0_inherits_output: bool = False
) -> RankGroup:
    """One ``torchrun`` per lab node running ``program`` (``["-m", "module", ...]`` or ``["script.py", ...]``),
    each inside its node's namespace with ``ranks_per_node`` processes, meeting by c10d rendezvous at node 0's lab
    address: the guide's multi-node recipe, with the lab's links between the nodes. Node i's output goes to
    ``log_dir/torchrun-node<i>.log`` (node 0's to this process's stdout and stderr with ``node0_inherits_output``)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GLOO_SOCKET_IFNAME": LAB_INTERFACE}
    procs = []
    for node in range(lab.nodes):
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nnodes={lab.nodes}",
            f"--node-rank={node}",
            f"--nproc-per-node={lab.ranks_per_node}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={address(0)}:{port}",
            # node 0 hosts the rendezvous store: torchrun decides that by host name, and the lab address is not the
            # machine's; on a real cluster the endpoint's host is the node's own name
            f"--rdzv-conf=is_host={str(node == 0).lower()}",
            f"--local-addr={address(node)}",  # what the others reach this node at (not its host name's address)
            *program,
        ]
        log = None if node == 0 and node0_inherits_output else log_dir / f"torchrun-node{node}.log"
        procs.append(start_process(cmd, log, env=env, namespace=lab.namespace(node)))
    return RankGroup(procs)


def _fn_rank(
    rank: int, world: int, store: str, out_dir: Path, fn: Callable[..., Any], args: tuple, timeout_s: float
) -> int:
    """:func:`fork_launch`'s rank body: a gloo group over a file store, ``fn``, its result pickled."""
    try:
        dist.init_process_group(
            "gloo",
            store=dist.FileStore(store, world),
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        result = fn(rank, world, *args)
        dist.barrier()
        dist.destroy_process_group()
        with open(out_dir / f"rank{rank}.pkl", "wb") as f:
            pickle.dump(result, f)
    except BaseException:  # noqa: BLE001 - reported by the parent
        (out_dir / f"rank{rank}.err").write_text(traceback.format_exc())
        return 1
    return 0


def fork_launch(fn: Callable[..., Any], num_ranks: int, *args: Any, timeout_s: float = 120.0, lab=None) -> list[Any]:
    """Run ``fn(rank, world, *args)`` on ``num_ranks`` forked gloo ranks; returns each rank's result.

    The light-weight sibling of :func:`~zen_analysis.runs.launch.launch` for tests, benchmarks and notebooks that
    exchange tensors without training: no config, no data preparation. A failing rank raises
    :class:`RankFailedError` with its traceback. ``lab``: a :class:`~zen_analysis.ranks.netlab.NetLab` with
    ``num_ranks`` ranks; each rank then runs in its lab node and gloo talks over the shaped links (the rendezvous
    stays a file).
    """
    if lab is not None and lab.ranks != num_ranks:
        raise ValueError(f"the lab has {lab.ranks} ranks; fork_launch was asked for {num_ranks}")
    with tempfile.TemporaryDirectory(prefix="zen-fork-") as tmp:
        out_dir = Path(tmp)
        env = loopback_env(out_dir / "rendezvous")
        store, gloo_if = env["ZEN_ANALYSIS_FILE_STORE"], {"GLOO_SOCKET_IFNAME": env["GLOO_SOCKET_IFNAME"]}
        body = functools.partial(
            _fn_rank, world=num_ranks, store=store, out_dir=out_dir, fn=fn, args=args, timeout_s=timeout_s
        )
        group = fork_ranks(num_ranks, body, environ=lambda r: gloo_if, lab=lab)
        group.watch(poll_s=0.02, grace_s=0.05, timeout_s=timeout_s + 30)
        errors = sorted(out_dir.glob("rank*.err"), key=lambda f: f.stat().st_mtime_ns)  # the first to fail, not
        if errors:  # a survivor that saw its peer's connection close
            rank = int(errors[0].stem[4:])
            raise RankFailedError(
                f"rank {rank} failed:\n{errors[0].read_text()}", rank=rank, run_id="fork_launch", pids=group.pids
            )
        missing = [r for r in range(num_ranks) if not (out_dir / f"rank{r}.pkl").exists()]
        if missing:
            raise RankFailedError(
                f"ranks {missing} produced no result (killed or timed out)",
                rank=missing[0],
                run_id="fork_launch",
                pids=group.pids,
            )
        return [pickle.loads((out_dir / f"rank{r}.pkl").read_bytes()) for r in range(num_ranks)]


def run_in_lab(
    program: list[str], *, nodes: int, ranks_per_node: int = 1, bandwidth_gbps: float = 1.0, log_dir: Path | None = None
) -> int:
    """Run a user's torchrun program (``["script.py", "--flag", ...]`` or ``["-m", "module", ...]``) on ``nodes``
    lab nodes of ``ranks_per_node`` ranks behind ``bandwidth_gbps`` links; node 0's output on this process's
    stdout, the others' in ``log_dir`` (a temporary folder by default). Returns the first non-zero exit code
    (0 if every node succeeded); the lab is removed however it ends, and Ctrl-C stops every node."""
    with contextlib.ExitStack() as stack:
        logs = (
            Path(log_dir) if log_dir else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="zen-netlab-")))
        )
        lab = stack.enter_context(NetLab(nodes * ranks_per_node, bandwidth_gbps, ranks_per_node=ranks_per_node))
        group = torchrun_per_node(lab, program, free_port(), logs, node0_inherits_output=True)
        group.watch(grace_s=1.0)  # after a failure, let the other nodes notice and report
        codes = group.codes()
        failed = [i for i, c in codes.items() if c not in (0, None)]
        for i in failed[:2]:
            if i:
                print(
                    f"--- node {i} (exit {codes[i]}):\n{log_tail(logs / f'torchrun-node{i}.log').rstrip()}",
                    file=sys.stderr,
                )
        return next((codes[i] for i in failed), 0)
