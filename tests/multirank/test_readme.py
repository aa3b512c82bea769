"""The README's Python blocks run as printed: the complete DDP script under torchrun on 2 ranks, every other block
whole, except fragments (first line ``# a fragment``), whose imports are run and the rest compiled."""

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


def test_the_readme_has_its_blocks():
    assert sum("dist.init_process_group" in code for _, _, code in BLOCKS) == 1  # the complete DDP script
    head = (ROOT / "README.md").read_text().split("\n")[:150]
    assert "## Zen in your own DDP training" in head and "## Quick start: the notebooks" in head


@pytest.mark.parametrize("where, line, code", BLOCKS, ids=[f"{w}:{n}" for w, n, _ in BLOCKS])
def test_a_python_block_runs_as_printed(where, line, code, tmp_path):
    if "dist.init_process_group" in code:  # the complete script, as the README says to run it
        (tmp_path / "zen_ddp.py").write_text(code)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "zen_ddp.py"]
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ})
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert re.search(r"loss \d+\.\d+; Zen sent [\d,]+ bytes, dense all-reduce [\d,]+", proc.stdout), proc.stdout
        return
    tree = ast.parse(code)  # every block at least parses
    if code.startswith("# a fragment"):
        imports = ast.Module([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], type_ignores=[])
        exec(compile(imports, f"{where}:{line}", "exec"), {})
        return
    exec(compile(tree, f"{where}:{line}", "exec"), {"__name__": "__readme__"})
