"""The README's Python blocks run as printed: the complete DDP and FSDP2 scripts under torchrun on 2 ranks, every
other block whole, except fragments (first line ``# a fragment``), whose imports are run and the rest compiled."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _blocks() -> list[tuple[str, int, str]]:
    out = []
    for path in DOCS:
        text = path.read_text()
        for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
            out.append((path.name, text[: m.start()].count("\n") + 1, m.group(1)))
    return out


BLOCKS = _blocks()


SCRIPTS = {
    "zen_ddp.py": r"loss \d+\.\d+; Zen sent [\d,]+ bytes, dense all-reduce [\d,]+",
    "zen_fsdp.py": r"loss \d+\.\d+; Zen's reduce-scatter sent [\d,]+ bytes, a dense one [\d,]+",
}
"""The complete scripts (a block that starts a process group), by the file name the README saves them as, and what
rank 0 prints."""


def _script(code: str) -> str:
    return "zen_fsdp.py" if "fully_shard" in code or "zen_analysis.fsdp" in code else "zen_ddp.py"


def test_the_readme_has_its_blocks():
    scripts = [_script(code) for _, _, code in BLOCKS if "dist.init_process_group" in code]
    assert sorted(scripts) == sorted(SCRIPTS)  # one complete DDP script, one FSDP2 script
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250, "the README is a front page: the rest goes to docs/"
    head = readme.split("\n")[:120]
    assert "## Zen in your own DDP training" in head and "## Quick start: the notebooks" in head
    first_screen = "\n".join(head)  # the way to Zen in DDP, FSDP2, Lightning and the Trainer
    assert all(word in first_screen for word in ("**FSDP2**", "**Lightning**", "**The transformers Trainer**"))


@pytest.fixture
def registry_restored():
    """A block may register a scheme (the add-a-scheme page's does, as its reader would): it is unregistered after,
    so no later test of this process finds a scheme of the docs among the built-ins."""
    from zen_analysis.comm.schemes import SCHEMES, unregister_scheme

    before = dict(SCHEMES)
    yield
    for name in [n for n in SCHEMES if SCHEMES[n] is not before.get(n)]:
        unregister_scheme(name)
    assert dict(SCHEMES) == before


@pytest.mark.parametrize("where, line, code", BLOCKS, ids=[f"{w}:{n}" for w, n, _ in BLOCKS])
def test_a_python_block_runs_as_printed(where, line, code, tmp_path, registry_restored):
    if "dist.init_process_group" in code:  # a complete script, as the README says to run it
        name = _script(code)
        (tmp_path / name).write_text(code)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", name]
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ})
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert re.search(SCRIPTS[name], proc.stdout), proc.stdout
        return
    tree = ast.parse(code)  # every block at least parses
    if code.startswith("# a fragment"):
        imports = ast.Module([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], type_ignores=[])
        exec(compile(imports, f"{where}:{line}", "exec"), {})
        return
    exec(compile(tree, f"{where}:{line}", "exec"), {"__name__": "__readme__"})
