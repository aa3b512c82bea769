"""No dead code in the package: every function, class and method it defines is named somewhere besides its own
definition (a caller, a test, a script, a page, a notebook). ruff has no rule for an unused public function, so this
is the check: a name that occurs once in the whole tree is a definition nobody reaches."""

import ast
import collections
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READ = ("zen_analysis/**/*.py", "zen_experiments/**/*.py", "tests/**/*.py", "scripts/*", "docs/**/*.md")
READ += ("notebooks/*.ipynb", "examples/**/*")
READ += ("README.md", "CONTRIBUTING.md", "Makefile", "pyproject.toml", "mkdocs.yml")
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _counts() -> collections.Counter:
    words: collections.Counter = collections.Counter()
    for pattern in READ:
        for path in ROOT.glob(pattern):
            if path.is_file() and "__pycache__" not in path.parts:
                words.update(WORD.findall(path.read_text(errors="ignore")))
    return words


def _definitions(tree: ast.Module):
    """(line, qualified name, name) of every module-level function or class and every method (dunders aside:
    Python calls them)."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.lineno, node.name, node.name
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for m in node.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and not m.name.startswith("__"):
                    yield m.lineno, f"{node.name}.{m.name}", m.name


def test_every_definition_in_the_package_is_reached_from_somewhere():
    words = _counts()
    dead = [
        f"{path.relative_to(ROOT)}:{line} {qualified}"
        for package in ("zen_analysis", "zen_experiments")
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, qualified, name in _definitions(ast.parse(path.read_text()))
        if words[name] <= 1
    ]
    assert not dead, "defined and never named again (delete it, or call or test it):\n" + "\n".join(dead)


def test_the_check_sees_a_planted_dead_function(tmp_path):
    tree = ast.parse("def used():\n    pass\n\n\ndef never_called_anywhere_xyz():\n    pass\n\n\nused()\n")
    words = collections.Counter(WORD.findall(ast.unparse(tree)))
    assert [q for _, q, n in _definitions(tree) if words[n] <= 1] == ["never_called_anywhere_xyz"]
