"""Guard against test files that pytest would silently skip (its default norecursedirs include dist/, build/)."""

from pathlib import Path

import pytest

TESTS = Path(__file__).parent


def test_every_test_file_is_collected(request, collected_items):
    args = [Path(a.split("::")[0]).resolve() for a in request.config.args]
    if not any(a == TESTS or a in TESTS.parents for a in args):
        pytest.skip("the whole tests/ directory was not selected")
    collected = {Path(item.fspath).resolve() for item in collected_items}  # before -m "not slow" deselected any
    on_disk = {p.resolve() for p in TESTS.rglob("test_*.py")}
    missing = sorted(str(p.relative_to(TESTS)) for p in on_disk - collected)
    assert not missing, f"test files pytest did not collect: {missing}"


def test_notebooks_are_committed_clean_and_valid():
    """No outputs, no execution counts, and a cell id on every cell (nbformat 4.5 requires them; nbmake warns)."""
    import json

    import nbformat

    for path in sorted((TESTS.parent / "notebooks").glob("*.ipynb")):
        raw = json.loads(path.read_text())  # as written: nbformat.read would add missing ids itself
        assert all("id" in cell for cell in raw["cells"]), f"{path.name}: a cell without an id"
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name}: committed with outputs"


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports, at the top or inside functions (``ast``; relative imports
    resolved; ``from pkg import name`` points at ``pkg.name`` when that is a module, else at ``pkg``)."""
    import ast

    root = TESTS.parent / "zen_analysis"
    files = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                stem = node.module or ""
                if node.level:
                    base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                    stem = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
                targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in files else stem for a in node.names]
            else:
                continue
            for t in targets:
                while t not in files and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in files and t != mod:
                    graph[mod].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def test_no_import_cycle():
    """The package imports in layers: no module imports, at the top or inside a function, one that imports it back
    (the last cycle, through the training launcher, went when the process machinery moved to ranks.procs)."""
    found = _cycles(_import_graph())
    assert not found, [sorted(c) for c in found]
    # the check itself sees cycles: a planted one is found
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(planted) == [{"a", "b", "c"}]


LAYERS = (
    ("foundations", "paths atomic workspace indices derived"),
    ("configuration", "config recipes"),
    ("wire", "wire"),
    ("workload", "workload"),
    ("ranks", "ranks"),
    ("zen", "zen"),
    ("capture", "capture"),
    ("pricing", "pricing"),
    ("sparsity", "sparsity"),
    ("comm", "comm"),
    ("evaluation", "evaluation"),
    ("sync", "sync"),
    ("fsdp", "fsdp"),
    ("local_sgd", "local_sgd"),
    ("train", "train"),
    ("paper", "paper"),
    ("runs", "runs"),
    ("plots", "plots"),
    ("interface", "interface __main__"),
)
"""The package's layers, lowest first: one folder each (a name covers its submodules), the root's foundation modules
below them all and ``recipes`` beside the configuration it builds. A module imports only from its own layer or
below — at the top of the file or inside a function. CONTRIBUTING.md's layer table lists the same rows in the same
order (``test_contributing_lists_the_layers``) and says what each holds."""


def _layer_of(module: str) -> int | None:
    name = module.removeprefix("zen_analysis").removeprefix(".")
    best, depth = None, -1
    for i, (_, members) in enumerate(LAYERS):
        for m in members.split():
            if (name == m or name.startswith(m + ".")) and m.count(".") > depth:
                best, depth = i, m.count(".")
    return best


def test_every_module_has_a_layer():
    graph = _import_graph()
    unplaced = sorted(m for m in graph if m != "zen_analysis" and _layer_of(m) is None)
    assert not unplaced, f"modules without a layer (add them to LAYERS): {unplaced}"


def test_imports_point_down_the_layers():
    """No import reaches a higher layer (the root package's lazy re-exports aside: it is the facade over all)."""
    upward = []
    for mod, targets in _import_graph().items():
        if mod == "zen_analysis":
            continue
        for t in targets:
            if t != "zen_analysis" and _layer_of(t) > _layer_of(mod):
                upward.append(f"{mod} ({LAYERS[_layer_of(mod)][0]}) -> {t} ({LAYERS[_layer_of(t)][0]})")
    assert not upward, upward
    # the check itself sees an upward import: the training loop is above the schemes, the schemes above Zen's kernels
    assert (
        _layer_of("zen_analysis.train.loop")
        > _layer_of("zen_analysis.comm.schemes.zen")
        > _layer_of("zen_analysis.zen.sparse_allreduce")
    )


def test_every_folder_is_one_layer_and_contributing_lists_the_layers():
    """The layers and the folders agree one to one: every subpackage is named by exactly one row, as a whole (its
    subfolders with it), and CONTRIBUTING.md's layer table has the same rows in the same order."""
    root = TESTS.parent / "zen_analysis"
    folders = {p.parent.relative_to(root).parts[0] for p in root.glob("*/__init__.py")}
    named = [m for _, members in LAYERS for m in members.split()]
    assert sorted(m for m in named if m in folders) == sorted(folders), "a folder without its own row"
    assert all("." not in m for m in named), "a row names part of a folder"
    rows = [
        line.split("|")[1].strip()
        for line in (TESTS.parent / "CONTRIBUTING.md").read_text().split("## The layers", 1)[1].splitlines()
        if line.startswith("| ") and not line.startswith("| layer")
    ]
    assert rows == [name for name, _ in LAYERS], rows


def _package_of(module: str, packages: set[str]) -> str:
    """The folder holding ``module``: a package's ``__init__`` is the package itself."""
    return module if module in packages else module.rsplit(".", 1)[0]


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Subpackage -> the subpackages its modules import (at any depth: ``comm`` and ``comm.schemes`` are two). The
    root package is left out: its modules are the foundations below every folder (``paths``, ``config``'s
    ``recipes``...) and the interface above them all (``cli``, the lazy facade), and ``LAYERS`` orders them."""
    packages = {m for m in graph if (TESTS.parent / m.replace(".", "/") / "__init__.py").exists()}
    out: dict[str, set[str]] = {p: set() for p in packages if p != "zen_analysis"}
    for mod, targets in graph.items():
        a = _package_of(mod, packages)
        for t in targets:
            b = _package_of(t, packages)
            if a != b and "zen_analysis" not in (a, b):
                out[a].add(b)
    return out


def test_no_two_folders_import_each_other():
    """A folder is a layer: no subpackage imports, directly or through others, one that imports it back."""
    found = _cycles(_package_graph(_import_graph()))
    assert not found, [sorted(c) for c in found]
    # the check itself sees a pair of folders: a module of capture importing the loop would close one
    planted = _import_graph()
    planted["zen_analysis.capture.traces"] = planted["zen_analysis.capture.traces"] | {"zen_analysis.train.loop"}
    assert _cycles(_package_graph(planted))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_reach(root: Path) -> list[str]:
    """Every place a module under ``root`` takes another module's ``_private`` name: ``from m import _x`` (relative
    imports too) or ``m._x``, ``pkg.m._x``, where ``m`` is one of the package's modules bound by an import."""
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        here = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        where = path.relative_to(root.parent).as_posix()
        tree = ast.parse(path.read_text())
        bound = {}  # a local name -> the package module it names
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                stem = node.module or ""
                if node.level:
                    base = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
                    stem = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
                if stem.split(".")[0] != root.name:
                    continue
                for a in node.names:
                    if _private(a.name) and stem != here:
                        found.append(f"{where}:{node.lineno}: from {stem} import {a.name}")
                    target = root.parent / stem.replace(".", "/") / a.name
                    if target.with_suffix(".py").exists() or (target / "__init__.py").exists():
                        bound[a.asname or a.name] = f"{stem}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == root.name:
                        bound[a.asname or root.name] = a.name if a.asname else root.name
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            chain, inner = [], node.value
            while isinstance(inner, ast.Attribute):
                chain.insert(0, inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in bound:
                owner = ".".join([bound[inner.id], *chain])
                if owner != here:
                    found.append(f"{where}:{node.lineno}: {owner}.{node.attr}")
    return found


def test_no_module_reaches_another_modules_private_names(tmp_path):
    """A leading underscore means "this module's own": no module imports one from another module, or reads one off
    an imported module, even within its folder (what another module needs is public under a plain name, or the
    use moves to the module that owns it). Tests may reach in; the package may not."""
    found = _private_reach(TESTS.parent / "zen_analysis") + _private_reach(TESTS.parent / "zen_experiments")
    assert not found, found
    # the check itself sees each form: a planted package reaching into a module three ways, and not its own use
    planted = tmp_path / "pkg"
    planted.mkdir()
    (planted / "__init__.py").write_text("")
    (planted / "a.py").write_text("def _x(): ...\n_y = _x()\n")
    (planted / "b.py").write_text("from pkg.a import _x\nfrom pkg import a\nimport pkg.a\nv = a._y, pkg.a._x\n")
    (planted / "c.py").write_text("from .a import _x as x\n")
    assert _private_reach(planted) == [
        "pkg/b.py:1: from pkg.a import _x",
        "pkg/b.py:4: pkg.a._y",
        "pkg/b.py:4: pkg.a._x",
        "pkg/c.py:1: from pkg.a import _x",
    ]


def test_the_package_root_holds_the_foundations_and_the_public_face_only():
    """At most 8 modules at the root, none of them a driver (a benchmark, a reproduce stage) or the interface."""
    root = TESTS.parent / "zen_analysis"
    modules = sorted(p.stem for p in root.glob("*.py"))
    assert len(modules) <= 8, modules
    drivers = [m for m in modules if m.startswith(("bench", "reproduce", "cli", "explore"))]
    assert not drivers, drivers


def _unmarked_deferred_imports(source: str) -> list[int]:
    """The lines of imports of the package's own modules (``zen_analysis...`` or relative) made inside a function
    whose statement carries no ``# deferred: <reason>`` comment."""
    import ast
    import re

    lines = source.splitlines()
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                ours = any(a.name == "zen_analysis" or a.name.startswith("zen_analysis.") for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                ours = node.level > 0 or module == "zen_analysis" or module.startswith("zen_analysis.")
            else:
                continue
            text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
            if ours and not re.search(r"#\s*deferred:\s*\S", text):
                found.append(node.lineno)
    return sorted(set(found))


def test_every_deferred_import_of_our_own_modules_says_why():
    """Imports go at the top of a module. One of the package's own modules imported inside a function stays there
    only to keep the CLI's start-up light or an optional dependency optional, and says which on its line:
    ``# deferred: <reason>``."""
    found = [
        f"{path.relative_to(TESTS.parent)}:{line}"
        for root in (TESTS.parent / "zen_analysis", TESTS.parent / "zen_experiments")
        for path in sorted(root.rglob("*.py"))
        for line in _unmarked_deferred_imports(path.read_text())
    ]
    assert not found, f"imports inside a function without '# deferred: <reason>': {found}"
    # the check itself sees them: a planted unmarked one is found, a marked one and a top-level one are not
    planted = (
        "from zen_analysis import paths\n"
        "def f():\n"
        "    from zen_analysis.config import ExperimentConfig\n"
        "    from . import sibling  # deferred: torch off the CLI's start-up\n"
        "    import json\n"
        "    from zen_analysis.wire import rows  # deferred:\n"
    )
    assert _unmarked_deferred_imports(planted) == [3, 6]


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 80


def _too_long(root: Path) -> list[str]:
    """Modules over :data:`MAX_MODULE_LINES` lines and functions (methods too; the def line through the last,
    docstring included) over :data:`MAX_FUNCTION_LINES` under ``root``."""
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        if (n := len(text.splitlines())) > MAX_MODULE_LINES:
            found.append(f"{path.relative_to(root.parent)}: {n} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (n := node.end_lineno - start + 1) > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(root.parent)}::{node.name}: {n} lines")
    return found


def test_no_module_over_400_lines_and_no_function_over_80(tmp_path):
    """Long modules hold two concepts and long functions two steps: split them along the seam."""
    for package in ("zen_analysis", "zen_experiments"):
        assert not _too_long(TESTS.parent / package), _too_long(TESTS.parent / package)
    # the check itself sees both: a planted module of 401 lines with an 81-line function
    planted = tmp_path / "pkg"
    planted.mkdir()
    body = "def f():\n" + "    x = 1\n" * 80 + "\n" * 320
    (planted / "m.py").write_text(body)
    assert _too_long(planted) == ["pkg/m.py: 401 lines", "pkg/m.py::f: 81 lines"]
