"""The suite's guard on the scheme registry (``tests/conftest.py``): a test that registers a scheme and leaves it
fails at teardown naming it, and the next test finds the registry as it was; one that cleans up passes."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

LEAKY = """
from zen_analysis.comm.schemes import SCHEMES, register_scheme, unregister_scheme
from zen_analysis.comm.schemes.allreduce import AllReduce


class Leaky(AllReduce):
    name = "leaky_gather"


def test_registers_and_leaves_it():
    register_scheme(Leaky)


def test_finds_the_registry_as_it_was():
    assert "leaky_gather" not in SCHEMES


def test_registers_and_cleans_up():
    register_scheme(Leaky)
    unregister_scheme("leaky_gather")
"""


def test_a_leaked_scheme_fails_its_test_and_is_undone(tmp_path):
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    env = {**os.environ, "ZEN_ANALYSIS_DATA": str(tmp_path / "data")}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rE", "test_leaky.py"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "3 passed, 1 error" in out, out
    assert "ERROR at teardown of test_registers_and_leaves_it" in out, out
    assert "the test left the scheme registry changed (leaky_gather)" in out, out
