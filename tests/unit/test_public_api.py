"""The notebooks use the public API only: every name they import (or their prose tells the reader to import), and
every attribute they read off an imported module, is in its module's ``__all__`` and rendered in the API reference
(``docs/api*.md``, one ``::: module`` per documented module). ``docs/api.md`` calls everything else internal, so a
notebook reaching past it would teach a reader a name that may change under them. And the package root lists its
lazy names to ``dir()`` and ``help()``."""

from __future__ import annotations

import ast
import functools
import importlib
import json
import pydoc
import re
import types
from pathlib import Path

import pytest
from test_names_resolve import markdown_imports  # the pages' reader: the imports a notebook's prose teaches

ROOT = Path(__file__).parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
API_PAGES = sorted((ROOT / "docs").glob("api*.md"))


def documented_modules() -> set[str]:
    """The modules the API reference renders: its ``::: module`` lines."""
    return {m.group(1) for page in API_PAGES for m in re.finditer(r"^:::\s+([\w.]+)\s*$", page.read_text(), re.M)}


def _code(notebook: Path) -> str:
    """The notebook's code cells, ``%magic`` / ``!shell`` lines blanked so the Python parses."""
    cells = json.loads(notebook.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return re.sub(r"^([ \t]*)[%!].*$", r"\1pass", "\n\n".join(code), flags=re.M)


def _child(module: str, name: str) -> object:
    """``module``'s attribute ``name``, or its submodule of that name (which a package's lazy ``__getattr__`` does
    not return before it is imported), or None."""
    value = getattr(importlib.import_module(module), name, None)
    if value is None:
        try:
            value = importlib.import_module(f"{module}.{name}")
        except ModuleNotFoundError:
            return None
    return value


def used_names(source: str) -> set[tuple[str, str]]:
    """(module, name) for every ``zen_analysis`` name ``source`` uses: ``from M import n`` gives (M, n), or, where
    ``M.n`` is a module, (``M.n``, "") and one (``M.n``, attr) per ``alias.attr`` read off it; ``import M as m`` and
    the dotted chains ``zen_analysis.a.b.attr`` likewise."""
    tree = ast.parse(source)
    found: set[tuple[str, str]] = set()
    aliases: dict[str, str] = {}  # a local name bound to one of the package's modules -> that module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "zen_analysis":
            for a in node.names:
                value = _child(node.module, a.name)
                if isinstance(value, types.ModuleType):
                    module = value.__name__
                    aliases[a.asname or a.name] = module
                    found.add((module, ""))
                else:
                    found.add((node.module, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "zen_analysis":
                    aliases[a.asname or a.name.split(".")[0]] = a.asname and a.name or "zen_analysis"
                    found.add((a.name, ""))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, inner = [node.attr], node.value
        while isinstance(inner, ast.Attribute):
            chain.insert(0, inner.attr)
            inner = inner.value
        if not (isinstance(inner, ast.Name) and inner.id in aliases):
            continue
        module = aliases[inner.id]
        for part in chain:  # down the submodules to the first attribute that is not a module
            value = _child(module, part)
            if not isinstance(value, types.ModuleType):
                found.add((module, part))
                break
            module = value.__name__
    return found


def not_public(module: str, name: str, documented: set[str]) -> str | None:
    """Why ``module``'s ``name`` (or the module itself, for "") is not public, or None."""
    if module not in documented:
        return f"{module} is not in the API reference (add `::: {module}` to docs/api.md)"
    exported = getattr(importlib.import_module(module), "__all__", None)
    if exported is None:
        return f"{module} declares no __all__"
    if name and name not in exported:
        return f"{name} is not in {module}.__all__"
    return None


@functools.cache
def _package():
    """The package as mkdocstrings sees it (griffe: by reading the source, not importing it)."""
    griffe = pytest.importorskip("griffe")
    loader = griffe.GriffeLoader(search_paths=[str(ROOT)], allow_inspection=False)
    package = loader.load("zen_analysis")
    loader.resolve_aliases(implicit=False, external=False)
    return package


def _rendered(module: str, name: str) -> bool:
    """Whether the API reference renders ``module``'s ``name``: mkdocstrings leaves out what has no docstring."""
    package = _package()
    obj = package[name] if module == "zen_analysis" else package[f"{module.removeprefix('zen_analysis.')}.{name}"]
    return bool(obj.docstring and obj.docstring.value.strip())


def test_the_scan_sees_every_form():
    source = (
        "from zen_analysis import launch, paths\n"
        "from zen_analysis.plots import style as s\n"
        "import zen_analysis.plots.comm as figs\n"
        "import zen_analysis\n"
        "paths.trace_dir('x'); s.notebook_savefig(f, 'n'); figs.speedup(x); zen_analysis.sparsity.metrics.density(y)\n"
    )
    assert used_names(source) == {
        ("zen_analysis", "launch"),
        ("zen_analysis.paths", ""),
        ("zen_analysis.paths", "trace_dir"),
        ("zen_analysis.plots.style", ""),
        ("zen_analysis.plots.style", "notebook_savefig"),
        ("zen_analysis.plots.comm", ""),
        ("zen_analysis.plots.comm", "speedup"),
        ("zen_analysis", ""),
        ("zen_analysis.sparsity.metrics", "density"),
    }
    documented = documented_modules()
    assert not_public("zen_analysis.runs.launch", "_launch_claimed", documented)  # a private name is reported
    assert not_public("zen_analysis.ranks.procs", "", documented)  # a module the reference leaves out is too


def _taught(notebook: Path) -> set[tuple[str, str]]:
    """The (module, name) of every ``from zen_analysis... import`` the markdown cells write for the reader to use."""
    cells = json.loads(notebook.read_text())["cells"]
    prose = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    found = set()
    for imp in markdown_imports(prose):
        if imp.form == "from":
            found |= {m for name in imp.names for m in used_names(f"from {imp.module} import {name}")}
    return found


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_name_a_notebook_uses_is_public_and_documented(notebook):
    used = used_names(_code(notebook)) | _taught(notebook)
    assert used, f"{notebook.name}: the scan found no zen_analysis name"
    documented = documented_modules()
    private = sorted(f"{m}.{n}: {why}" for m, n in used if (why := not_public(m, n, documented)))
    assert not private, "\n".join(private)
    undocumented = sorted(f"{m}.{n}" for m, n in used if n and not _rendered(m, n))
    assert not undocumented, f"no docstring, so the API reference leaves them out: {undocumented}"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_name_an_example_uses_is_public_and_documented(example):
    """The examples are user code outside the package (a scheme written against the author's interface): what they
    import is what a user may rely on, so it is public and documented as a notebook's is."""
    used = used_names(example.read_text())
    assert used, f"{example.name}: the scan found no zen_analysis name"
    documented = documented_modules()
    private = sorted(f"{m}.{n}: {why}" for m, n in used if (why := not_public(m, n, documented)))
    assert not private, "\n".join(private)
    undocumented = sorted(f"{m}.{n}" for m, n in used if n and not _rendered(m, n))
    assert not undocumented, f"no docstring, so the API reference leaves them out: {undocumented}"


def test_dir_and_help_list_the_package_roots_public_names():
    import zen_analysis

    assert set(zen_analysis.__all__) <= set(dir(zen_analysis)), set(zen_analysis.__all__) - set(dir(zen_analysis))
    text = pydoc.render_doc(zen_analysis, renderer=pydoc.plaintext)
    missing = [name for name in zen_analysis.__all__ if not re.search(rf"\b{name}\b", text)]
    assert not missing, f"help(zen_analysis) does not show {missing}"
    for name in zen_analysis.__all__:  # every name resolves (a lazy entry pointing nowhere fails here)
        assert getattr(zen_analysis, name) is not None


def test_the_notebooks_take_the_reproduce_runs_whole_or_their_fallbacks(monkeypatch, tmp_path, capsys):
    """``runs_or_fallback``, the one place the notebooks choose: all of the given runs where every one is on disk,
    never a mix of sizes; the fallback recipes' runs otherwise (none asked for: an empty list)."""
    from zen_analysis import paths, runs_or_fallback

    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path))
    for run in ("reproduce-a", "reproduce-b"):
        paths.trace_dir(run).mkdir(parents=True)
        (paths.trace_dir(run) / "manifest.json").write_text("{}")
    assert runs_or_fallback(["reproduce-a", "reproduce-b"], ["smoke"]) == ["reproduce-a", "reproduce-b"]
    assert runs_or_fallback(["reproduce-a", "reproduce-c"]) == []  # one missing: not a mix
    assert runs_or_fallback([], []) == []
    trained = []
    monkeypatch.setattr("zen_analysis.runs.launch.ensure_run", lambda cfg, **kw: trained.append(cfg.name) or cfg.name)
    assert runs_or_fallback(["reproduce-a", "reproduce-c"], ["smoke", "lstm-words-smoke"]) == trained
    assert trained == ["smoke", "lstm-words-smoke"] and not capsys.readouterr().out
