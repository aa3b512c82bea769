"""The house's rooms: the library (``zen_analysis``: train, capture, characterize, sum, model), the apparatus
(``zen_experiments``: the figure drivers, the benchmarks, ``make reproduce``, the results pages, and ``scripts/``)
and the interface (``zen_analysis.interface``: the command line over both). The apparatus imports the library; the
library never imports the apparatus, only the interface does; the apparatus never imports the interface."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    """Every absolute module ``path`` imports, at the top or inside a function (``from a.b import c``: ``a.b``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def _reaching(folder: Path, prefix: str, allowed: tuple[str, ...] = ()) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(allowed):
            continue
        found += [f"{rel}: {m}" for m in sorted(_imports(path)) if m == prefix or m.startswith(prefix + ".")]
    return found


def test_the_library_never_imports_the_apparatus_only_the_interface_does():
    found = _reaching(ROOT / "zen_analysis", "zen_experiments", allowed=("zen_analysis/interface/",))
    assert not found, found
    assert _reaching(ROOT / "zen_analysis" / "interface", "zen_experiments"), "the command line runs the benchmarks"


def test_the_apparatus_imports_the_library_and_never_the_interface():
    apparatus = ROOT / "zen_experiments"
    assert _reaching(apparatus, "zen_analysis"), "the apparatus drives the library"
    found = _reaching(apparatus, "zen_analysis.interface") + _reaching(ROOT / "scripts", "zen_analysis.interface")
    assert not found, found


def test_the_check_sees_a_planted_upward_import(tmp_path):
    lib = tmp_path / "zen_analysis" / "sync"
    lib.mkdir(parents=True)
    (lib / "x.py").write_text("def f():\n    from zen_experiments.benchmarks import BENCHMARKS\n")
    assert _imports(lib / "x.py") == {"zen_experiments.benchmarks"}


def test_every_module_of_the_apparatus_imports():
    """Each driver, benchmark family, stage and page writer imports (nothing in the library's tests would notice a
    renamed library module one of them still names); the benchmarks' registry resolves every entry point it lists
    (``tests/unit/test_cli.py``) and the scripts are imported by ``test_scripts``."""
    import importlib
    import pkgutil

    import zen_experiments

    names = [m.name for m in pkgutil.walk_packages(zen_experiments.__path__, "zen_experiments.")]
    assert len(names) > 25, names
    for name in names:
        importlib.import_module(name)
