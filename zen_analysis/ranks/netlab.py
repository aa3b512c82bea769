"""An emulated cluster network on one Linux machine: every node behind its own shaped link.

Each lab node is a network namespace with one veth to a bridge in a switch namespace; both directions of every
link are shaped by a token bucket (``tc qdisc ... tbf``) at the configured bandwidth, so ranks in different
nodes talk over real TCP at a chosen rate, with real gloo in between. Ranks of one node share its namespace
(traffic between them stays inside it, unshaped: like NVLink next to the NICs). Bandwidth can be emulated;
added latency cannot, since this kernel lacks ``netem`` (where a kernel has it, ``tc qdisc ... netem delay``
would add it).

Names: every namespace of a lab is ``zl-<tag>-sw`` or ``zl-<tag>-n<i>`` with a random six-hex-digit tag, so
labs of concurrent runs never meet and :func:`cleanup` removes only what a lab made. Teardown happens on
``close()`` / leaving the ``with`` block, and, if the creating process dies without it (``kill -9``, a notebook
kernel restart), by a guard process that waits on a pipe only the creator holds. Node i has address
``10.77.<i // 250>.<i % 250 + 1>/16`` on its ``eth0`` (namespaces are private: these addresses exist nowhere
else).

Needs root or CAP_NET_ADMIN, ``ip`` and ``tc`` (iproute2), and kernel support for veth, bridges and tbf:
:func:`available` tries them all once and says what is missing. Nothing else in the toolkit needs the lab.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from functools import lru_cache

__all__ = ["NetLab", "available"]

NAME = re.compile(r"^zl-[0-9a-f]{6}-(sw|n\d+)$")
"""What a lab namespace is called; :func:`cleanup` never touches anything else."""
TCP_PAYLOAD_FRACTION = 1448 / 1514
"""What TCP payload a shaped link carries: tbf counts each frame's bytes (14-byte Ethernet header + 1500-byte IP
packet), of which 1448 are payload (20 IP + 20 TCP + 12 timestamp option bytes of headers). At 1 Gbit/s
configured a lab link carries 0.956 Gbit/s of payload, what ``tests/multirank/test_netlab.py`` holds the lab's TCP
to."""
_CLONE_NEWNET = 0x40000000
_CAP_NET_ADMIN = 12


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"netlab: `{' '.join(cmd)}` failed: {proc.stderr.strip()}")


def _has_net_admin() -> bool:
    """CAP_NET_ADMIN in the effective set (root has it unless a container or ``setpriv`` took it away)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_NET_ADMIN & 1)
    except OSError:
        pass
    return os.geteuid() == 0


@lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """(whether a lab can be built here, why not): root or CAP_NET_ADMIN, ``ip`` and ``tc`` on the PATH, and a
    trial namespace pair with a veth, a bridge and a tbf qdisc (created and removed at once)."""
    if not sys.platform.startswith("linux"):
        return False, f"the lab needs Linux network namespaces (this is {sys.platform})"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return False, f"missing {' and '.join(missing)} (install iproute2)"
    if not _has_net_admin():
        return False, "needs root or CAP_NET_ADMIN to create network namespaces"
    tag = secrets.token_hex(3)
    a, b = f"zl-{tag}-sw", f"zl-{tag}-n0"
    try:
        trials = [
            ("network namespaces", ["ip", "netns", "add", a]),
            ("network namespaces", ["ip", "netns", "add", b]),
            ("bridges", ["ip", "-n", a, "link", "add", "br0", "type", "bridge"]),
            ("veth pairs", ["ip", "link", "add", "eth0", "netns", b, "type", "veth", "peer", "name", "p0", "netns", a]),
            (
                "tbf shaping",
                [
                    "tc",
                    "-n",
                    b,
                    "qdisc",
                    "add",
                    "dev",
                    "eth0",
                    "root",
                    "tbf",
                    "rate",
                    "1gbit",
                    "burst",
                    "64kb",
                    "latency",
                    "50ms",
                ],
            ),
        ]
        for what, step in trials:
            proc = subprocess.run(step, capture_output=True, text=True, check=False)
            if proc.returncode:
                return False, f"this kernel or container refuses {what}: `{' '.join(step)}`: {proc.stderr.strip()}"
        return True, ""
    finally:
        cleanup(tag)


def lab_namespaces(tag: str | None = None) -> list[str]:
    """Lab namespaces that exist now (of one lab, with ``tag``)."""
    out = _ip("netns", "list", check=False).stdout.split("\n")
    names = [line.split()[0] for line in out if line.strip()]
    return [n for n in names if NAME.match(n) and (tag is None or n.startswith(f"zl-{tag}-"))]


def cleanup(tag: str | None = None) -> list[str]:
    """Delete the lab namespaces of ``tag`` (every lab's with None: ``zen-analysis netlab --cleanup``); their
    veths and bridge go with them. Returns the names removed."""
    removed = []
    for name in lab_namespaces(tag):
        if _ip("netns", "del", name, check=False).returncode == 0:
            removed.append(name)
    return removed


def address(node: int) -> str:
    return f"10.77.{node // 250}.{node % 250 + 1}"


def enter(namespace: str) -> None:
    """Move the calling thread (in a freshly forked rank: the process) into ``namespace``'s network."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {namespace}: {os.strerror(err)}")
    finally:
        os.close(fd)


LAB_INTERFACE = "eth0"
"""Every lab node's link to the switch (gloo binds to it: ``GLOO_SOCKET_IFNAME``)."""


def enter_node(namespace: str) -> None:
    """Make this (freshly forked) rank a process of lab node ``namespace``: its network, and gloo bound to the
    node's link."""
    enter(namespace)
    os.environ["GLOO_SOCKET_IFNAME"] = LAB_INTERFACE


class NetLab:
    """``nodes`` namespaces behind links of ``bandwidth_gbps`` Gbit/s each way, joined by a bridge.

    ``NetLab(ranks, bandwidth_gbps, ranks_per_node=1)``: ``ranks // ranks_per_node`` nodes; rank r lives in node
    ``r // ranks_per_node``. ``burst`` (bytes) is the token bucket's depth: by default 1 ms of traffic at the
    rate, at least 128 KiB (below that, at 2.5 Gbit/s and up, the link falls short of its rate). A deep bucket
    refills while ranks compute and lets the next message through at memory speed, so the sparse schemes' small
    messages would look nearly free (the guide's "Measuring on an emulated network"). Use as a context
    manager, or call :meth:`close`; a dying creator is covered by the guard process."""

    def __init__(self, ranks: int, bandwidth_gbps: float, *, ranks_per_node: int = 1, burst: int | None = None) -> None:
        if ranks < 1 or ranks_per_node < 1 or ranks % ranks_per_node:
            raise ValueError(f"need ranks >= 1 divisible by ranks_per_node, got {ranks} and {ranks_per_node}")
        if not bandwidth_gbps > 0:
            raise ValueError(f"bandwidth_gbps must be positive, got {bandwidth_gbps}")
        ok, why = available()
        if not ok:
            raise RuntimeError(f"the network lab is unavailable: {why}")
        self.ranks, self.ranks_per_node = ranks, ranks_per_node
        self.nodes = ranks // ranks_per_node
        self.bandwidth_gbps = float(bandwidth_gbps)
        rate_bytes = self.bandwidth_gbps * 1e9 / 8
        self.burst = int(burst) if burst else max(128 * 1024, int(rate_bytes * 0.001))
        self.tag = secrets.token_hex(3)
        self.switch = f"zl-{self.tag}-sw"
        self._guard = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; sys.stdin.buffer.read(); from zen_analysis.ranks.netlab import cleanup; "
                "cleanup(sys.argv[1])",
                self.tag,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def namespace(self, node: int) -> str:
        return f"zl-{self.tag}-n{node}"

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def address_of(self, rank: int) -> str:
        return address(self.node_of(rank))

    def _shape(self, ns: str, dev: str) -> None:
        rate = f"{int(self.bandwidth_gbps * 1e6)}kbit"
        _run(
            [
                "tc",
                "-n",
                ns,
                "qdisc",
                "add",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                rate,
                "burst",
                str(self.burst),
                "latency",
                "50ms",
            ]
        )

    def _build(self) -> None:
        sw = self.switch
        _run(["ip", "netns", "add", sw])
        _run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", sw, "link", "set", "br0", "up"])
        for i in range(self.nodes):
            ns = self.namespace(i)
            _run(["ip", "netns", "add", ns])
            _run(["ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"p{i}", "netns", sw])
            _run(["ip", "-n", ns, "addr", "add", f"{address(i)}/16", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", sw, "link", "set", f"p{i}", "master", "br0"])
            _run(["ip", "-n", sw, "link", "set", f"p{i}", "up"])
            self._shape(ns, "eth0")  # node -> switch
            self._shape(sw, f"p{i}")  # switch -> node

    def close(self) -> None:
        """Remove every namespace of this lab (idempotent) and let the guard go."""
        cleanup(self.tag)
        if self._guard.poll() is None:
            self._guard.stdin.close()
            self._guard.wait(timeout=30)

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def throughput_gbps(self, src: int = 0, dst: int = 1, nbytes: int = 64 << 20) -> float:
        """Measured TCP throughput from node ``src`` to node ``dst`` (Gbit/s): ``nbytes`` sent by a process in
        ``src``'s namespace to one in ``dst``'s, timed at the receiver from its first byte to its last."""

        ctx = mp.get_context("fork")
        ready, result = ctx.Queue(), ctx.Queue()
        port = 29000 + secrets.randbelow(1000)

        def receive() -> None:
            enter(self.namespace(dst))
            srv = socket.create_server((address(dst), port))
            ready.put(True)
            conn, _ = srv.accept()
            got, t0 = 0, None
            while got < nbytes:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                t0 = t0 or time.perf_counter()
                got += len(chunk)
            result.put((got, time.perf_counter() - (t0 or time.perf_counter())))

        def send() -> None:
            enter(self.namespace(src))
            ready.get(timeout=30)
            with socket.create_connection((address(dst), port), timeout=60) as c:
                buf = b"\0" * (1 << 20)
                for _ in range(nbytes >> 20):
                    c.sendall(buf)

        procs = [ctx.Process(target=receive), ctx.Process(target=send)]
        for p in procs:
            p.start()
        try:
            got, seconds = result.get(timeout=120)
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
        if got < nbytes >> 20 << 20:
            raise RuntimeError(f"netlab throughput: received {got} of {nbytes} bytes")
        return got * 8 / seconds / 1e9
