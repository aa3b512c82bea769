"""Every script under ``scripts/`` is in the apparatus's registry (:data:`zen_experiments.scripts.SCRIPTS`) and
is imported here (its imports resolve and nothing runs on import: a script runs under ``if __name__ ==
"__main__"``) or, for the shell ones, parsed; so a renamed module a script imports fails here, not on the day
someone runs it."""

import ast
import importlib.util
import subprocess

import pytest

from zen_experiments.scripts import SCRIPTS, SCRIPTS_DIR


def test_every_file_in_scripts_is_registered_and_every_registered_one_exists():
    on_disk = {p.name for p in SCRIPTS_DIR.iterdir() if p.is_file()}
    assert on_disk == set(SCRIPTS), {"strays": on_disk - set(SCRIPTS), "gone": set(SCRIPTS) - on_disk}


@pytest.mark.parametrize("name", sorted(n for n, s in SCRIPTS.items() if n.endswith(".py")))
def test_every_python_script_imports_and_runs_only_as_main(name, monkeypatch):
    path = SCRIPTS_DIR / name
    tree = ast.parse(path.read_text())
    guarded = any(
        isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test)
        for node in tree.body
    )
    assert guarded or SCRIPTS[name].module, f"{name} runs on import: put its body under if __name__ == '__main__'"
    monkeypatch.syspath_prepend(str(SCRIPTS_DIR))  # a script's helper beside it (gpu_check_ranks)
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its imports resolve; nothing runs
    assert module.__doc__, f"{name} says what it is for in its docstring"


@pytest.mark.parametrize("name", sorted(n for n in SCRIPTS if n.endswith(".sh")))
def test_every_shell_script_parses(name):
    subprocess.run(["bash", "-n", str(SCRIPTS_DIR / name)], check=True)
