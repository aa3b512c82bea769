"""The GPU check rehearsed as a borrowed GPU machine would run it: ``scripts/gpu_check.sh --rehearse`` under a Python
that has the machine's packages and nothing else (``scripts/gpu_machine_packages.txt``: no project venv, no
``datasets``, no pip), writing what a GPU run brings back within the machine's limits; and the results page made
from those files."""

from __future__ import annotations

import csv
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from zen_experiments.gpu_page import render_page

ROOT = Path(__file__).resolve().parents[2]
MACHINE = ROOT / "scripts" / "gpu_machine_packages.txt"
FILES = {
    "env.json",
    "steps.csv",
    "check.log",
    "gpu_tests.log",
    "fig16_hashing_cost.csv",
    "paper_compute.csv",
    "multirank.csv",
}
"""What a GPU run brings back (the machine returns at most 8 files of 16 MiB)."""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _with_requirements(names: set[str]) -> set[str]:
    """``names`` and what their versions installed here require (without extras): the machine's own versions
    bring their own requirements, ours ours (this environment's huggingface_hub needs httpx2, the machine's not)."""
    found, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # on the machine, not here
        found.add(name)
        todo += [_normal(re.split(r"[<>=!~\[ ;(]", r, maxsplit=1)[0]) for r in requires if "extra ==" not in r]
    return found


def machine_python(folder: Path) -> Path:
    """A venv without pip whose site-packages links only the distributions of this environment that the GPU
    machine's image also has (with what their versions here require): its interpreter then imports what that
    machine would, and ``zen_analysis`` only from ``PYTHONPATH``."""
    wanted = _with_requirements({_normal(ln) for ln in MACHINE.read_text().splitlines() if ln and ln[0] != "#"})
    wanted.discard("pip")  # the machine has pip, but the check must not need it: here `python -m pip` fails
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    target = folder / "lib" / version / "site-packages"
    here = Path(sysconfig.get_paths()["purelib"])
    for info in here.glob("*.dist-info"):
        name = info.name.split("-")[0]
        if _normal(name) not in wanted:
            continue
        tops = {info.name}
        record = info / "RECORD"
        if record.is_file():
            tops |= {line.split(",")[0].split("/")[0] for line in record.read_text().splitlines() if line}
        for top in tops:
            if top and not top.startswith("..") and (here / top).exists() and not (target / top).exists():
                (target / top).symlink_to(here / top)
    return folder / "bin" / "python"


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, Path]:
    tmp = tmp_path_factory.mktemp("gpu-check")
    python = machine_python(tmp / "machine")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for pip in ("pip", "pip3"):  # a call of pip leaves a mark (and fails, as it would with no index)
        (bin_dir / pip).write_text(f"#!/bin/sh\ntouch {tmp}/pip-was-called\nexit 1\n")
        (bin_dir / pip).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PY": str(python), "OUT": str(tmp / "out"), "PATH": f"{bin_dir}:{env['PATH']}"}
    cmd = [str(ROOT / "scripts" / "gpu_check.sh"), "--rehearse"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200, check=False)
    return tmp / "out", proc, tmp


def test_the_rehearsal_passes_without_the_venv_and_never_calls_pip(rehearsal):
    out, proc, tmp = rehearsal
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert not (tmp / "pip-was-called").exists()
    env = json.loads((out / "env.json").read_text())
    assert env["rehearsal"] and env["python_executable"].startswith(str(tmp / "machine"))
    assert env["packages"]["datasets"] is None, "the emulated machine has datasets: not the GPU machine's image"
    assert env["packages"]["torch"] and env["features"]["fsdp2_comm_hooks"]
    steps = list(csv.DictReader((out / "steps.csv").open()))
    assert [s["step"] for s in steps] == ["env", "tests", "fig16", "compute", "multirank"]
    assert all(s["status"] == "ok" for s in steps), steps


def test_the_rehearsal_writes_what_a_gpu_run_brings_back(rehearsal):
    out, proc, _ = rehearsal
    written = {p.name for p in out.iterdir()}
    assert written == FILES and len(written) <= 8
    assert all(p.is_file() and p.stat().st_size < 16 * 2**20 for p in out.iterdir())
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", name) for name in written)
    tests_log = (out / "gpu_tests.log").read_text()
    assert re.search(r"\d+ passed", tests_log) and not re.search(r"\d+ (failed|error)", tests_log), tests_log[-3000:]
    rows = list(csv.DictReader((out / "multirank.csv").open()))
    sums = [r for r in rows if r["kind"] in ("scheme", "fsdp")]
    assert len(sums) >= 8 and all(r["ok"] == "True" for r in sums), sums
    phases = list(csv.DictReader((out / "paper_compute.csv").open()))
    assert {p["workload"] for p in phases} == {"lstm", "deepfm"}


def test_the_results_page_renders_a_run_and_refuses_a_rehearsal(rehearsal, tmp_path):
    out, _, _ = rehearsal
    with pytest.raises(ValueError, match="rehearsal"):
        render_page([out])
    run = tmp_path / "2026-12-06-test-card"
    run.mkdir()
    for f in out.iterdir():
        (run / f.name).write_bytes(f.read_bytes())
    env = json.loads((run / "env.json").read_text())
    (run / "env.json").write_text(json.dumps({**env, "rehearsal": False, "gpu_name": "Test Card"}))
    page = render_page([run])
    assert "## Test Card, " in page and "about 6 ms on a V100" in page
    for section in ("### Steps", "### GPU tests", "### Fig. 16", "### The paper models' compute", "### Multi-rank"):
        assert section in page
    assert "passed" in page and "zen" in page
