"""The install files agree: pyproject.toml is the source of truth, environment.yml mirrors it."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0].lower()


def test_environment_yml_lists_the_same_packages_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["notebooks"]}
    pins = {r for r in project["dependencies"] + project["optional-dependencies"]["notebooks"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_reqs = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    env_reqs = [r for r in pip_reqs if not r.startswith("-e")]
    assert "python=3.11" in env["dependencies"]
    assert {_name(r) for r in env_reqs} == wanted
    assert set(env_reqs) == pins, "version specifiers differ between pyproject.toml and environment.yml"


def test_default_install_pins_the_cpu_torch_wheel_and_library_accepts_older_torch():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch==2.13.0" in project["optional-dependencies"]["cpu"]
    assert "torch>=2.4" in project["dependencies"]
    assert "cpu" in (ROOT / "Makefile").read_text().split("EXTRAS ?=")[1].splitlines()[0]


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make reproduce" in readme
