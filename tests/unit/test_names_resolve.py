"""What is written about ``zen_analysis`` outside the package still names something: a module renamed or moved fails
here, not in a reader's first import or a GPU machine's first minute.

1. **Imports.** Every ``zen_analysis`` import written in ``scripts/`` (``*.py``; the Python heredocs and
   ``python -c`` strings of ``*.sh``), in the pages (``README.md``, ``CONTRIBUTING.md``, ``data/README.md``, every
   ``docs/**/*.md``: fenced blocks and prose) and in the notebooks' cells: ``import zen_analysis.a.b [as x]``,
   ``from zen_analysis.a import b, c`` (parenthesised lists, aliases), ``python -m zen_analysis[.a.b]``. Python is
   read with ``ast`` where it parses (notebook cells with their ``%magic`` / ``!shell`` lines blanked), with regexes
   where it does not (prose, shell, fragments). Each module imports (a ``-m`` one runs: a module, or a package with
   ``__main__``); each name of a ``from`` import is an attribute of its module or an importable submodule.
2. **Dotted names in prose.** A name in backticks (single or double) in the pages, the notebooks and the scripts whose
   first part is one of the package's own modules or subpackages (``comm``, ``pricing``, ``recipes``, ...; read from
   ``zen_analysis/``), written with or without the ``zen_analysis.`` prefix, resolves under ``zen_analysis.`` to a
   module or an attribute of one. Left out, as not module paths: a name followed by ``=`` or ``/`` (a ``--set`` item,
   a file path), a config key (``section.field`` of :class:`ExperimentConfig`'s sections, or an earlier key of
   ``config.legacy.OLD_KEYS``: ``sync.scheme`` is a key although ``sync`` is a subpackage), a file name
   (``recipes.py``, ``config.json``).
3. **Citations.** A script citing a page's section, ``(docs/guide/local-sgd.md, "Sparse pseudo-gradients")`` or
   ``(README, "...")``, names a page that exists and a heading that page has; the README's guide sections moved to
   ``docs/guide/``, so a citation follows them there.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import json
import re
import textwrap
from pathlib import Path
from typing import NamedTuple

from test_docs import _resolves  # the one resolver of dotted paths, shared with the docs' check

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "zen_analysis"
SCRIPTS = sorted(p for p in (ROOT / "scripts").iterdir() if p.suffix in (".py", ".sh"))
PAGES = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "data/README.md",
    ROOT / "examples/README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
"""Code a user writes outside the package: its imports must resolve like a script's."""
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


class Import(NamedTuple):
    form: str  # "import", "from" or "-m"
    module: str
    names: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.form == "from":
            return f"from {self.module} import {', '.join(self.names)}"
        return f"python -m {self.module}" if self.form == "-m" else f"import {self.module}"


# --- collecting -------------------------------------------------------------------------------------------------

_MODULE = r"(?:zen_analysis|zen_experiments)(?:\.\w+)*"
_ITEM = r"(?:\w+|\*)(?:\s+as\s+\w+)?"
_FROM = re.compile(rf"\bfrom\s+({_MODULE})\s+import\s+(\([^)]*\)|{_ITEM}(?:[ \t]*,[ \t]*{_ITEM})*)")
_IMPORT = re.compile(rf"\bimport\s+({_MODULE})\b")
_RUN = re.compile(rf"""-m['"]?(?:\s*,\s*['"]|\s+)({_MODULE})\b""")  # -m zen_analysis.x; "-m", "zen_analysis"
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1[^\n]*\n(.*?)\n\s*\2\s*$", re.S | re.M)
_DASH_C = re.compile(r"""\s-c\s+(?:"((?:[^"\\]|\\.)*)"|'([^']*)')""", re.S)
_FENCE = re.compile(r"^([ \t]*)```(\w*)[^\n]*\n(.*?)^\1```", re.S | re.M)


def _names(listed: str) -> tuple[str, ...]:
    items = re.sub(r"#[^\n]*", "", listed.strip("()")).split(",")
    return tuple(item.split()[0] for item in items if item.strip())


def text_imports(text: str) -> set[Import]:
    """The imports and ``-m`` runs ``text`` writes, found by regexes (prose, shell, Python that does not parse)."""
    found = {Import("from", m.group(1), _names(m.group(2))) for m in _FROM.finditer(text)}
    found |= {Import("import", m.group(1)) for m in _IMPORT.finditer(text)}
    return found | {Import("-m", m.group(1)) for m in _RUN.finditer(text)}


def python_imports(source: str) -> set[Import]:
    """``source``'s imports by ``ast`` (and the regexes over its string constants: ``-c`` payloads, docstrings'
    examples; and over the whole text for ``-m``), or by the regexes alone where it does not parse."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return text_imports(source)
    found = {Import("-m", m.group(1)) for m in _RUN.finditer(source)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {Import("import", a.name) for a in node.names if re.fullmatch(_MODULE, a.name)}
        elif isinstance(node, ast.ImportFrom) and not node.level and re.fullmatch(_MODULE, node.module or ""):
            found.add(Import("from", node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "zen_analysis" in node.value:
            found |= text_imports(node.value)
    return found


def shell_imports(text: str) -> set[Import]:
    """A shell script's: the Python of its heredocs and ``-c`` strings, and its ``-m`` runs."""
    payloads = [m.group(3) for m in _HEREDOC.finditer(text)]
    payloads += [m.group(1) if m.group(1) is not None else m.group(2) for m in _DASH_C.finditer(text)]
    found = {Import("-m", m.group(1)) for m in _RUN.finditer(text)}
    return found.union(*(python_imports(p) for p in payloads))


def markdown_imports(text: str) -> set[Import]:
    """A page's: fenced Python blocks by ``ast``, other blocks as shell, the prose (inline code) by the regexes."""
    found = set()
    for m in _FENCE.finditer(text):
        body = textwrap.dedent(m.group(3))
        found |= python_imports(body) if m.group(2) in ("python", "py", "pycon") else shell_imports(body)
        found |= text_imports(body)
    return found | text_imports(_FENCE.sub("", text))


def notebook_imports(text: str) -> set[Import]:
    """A notebook's (its JSON): code cells as Python with ``%magic`` / ``!shell`` lines blanked (the shell ones read
    as shell), markdown cells as pages."""
    found = set()
    for cell in json.loads(text)["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            found |= markdown_imports(source)
        elif cell["cell_type"] == "code":
            magic = re.compile(r"^([ \t]*)[%!].*$", re.M)
            found |= python_imports(magic.sub(r"\1pass", source))
            found |= shell_imports("\n".join(m.group(0) for m in magic.finditer(source)))
    return found


def imports_in(path: Path) -> set[Import]:
    text = path.read_text()
    reader = {".py": python_imports, ".sh": shell_imports, ".md": markdown_imports, ".ipynb": notebook_imports}
    return reader[path.suffix](text)


# --- resolving ----------------------------------------------------------------------------------------------------


def unresolved(imp: Import) -> str | None:
    """Why ``imp`` fails, or None when it works."""
    try:
        module = importlib.import_module(imp.module)
    except Exception as e:  # noqa: BLE001 - any failure to import is what the test reports
        return f"{type(e).__name__}: {e}"
    if imp.form == "-m" and hasattr(module, "__path__") and importlib.util.find_spec(f"{imp.module}.__main__") is None:
        return "a package without __main__"
    missing = []
    for name in imp.names:
        if name == "*" or hasattr(module, name):
            continue
        try:
            importlib.import_module(f"{imp.module}.{name}")
        except ModuleNotFoundError:
            missing.append(name)
    return f"no {', '.join(missing)} in {imp.module}" if missing else None


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_collector_reports_a_planted_broken_import():
    """Each reader finds each form, and a name gone from its module is reported."""
    planted = "from zen_analysis.zen import profile"
    assert unresolved(next(iter(python_imports(planted)))) == "no profile in zen_analysis.zen"
    assert unresolved(Import("from", "zen_analysis.zen", ("bitmap", "hashing"))) is None
    assert unresolved(Import("import", "zen_analysis.comm.evaluate")).startswith("ModuleNotFoundError")
    assert unresolved(Import("-m", "zen_analysis")) is None and unresolved(Import("-m", "zen_analysis.comm"))
    sh = f"set -e\n\"$PY\" - \"$OUT\" <<'PYEOF'\nimport sys\n{planted}\nPYEOF\n$PY -c 'import zen_analysis.wire'\n"
    assert shell_imports(sh) == {
        Import("from", "zen_analysis.zen", ("profile",)),
        Import("import", "zen_analysis.wire"),
    }
    page = (
        "Run `python -m zen_analysis.ranks.entry`, or `from zen_analysis import recipes`:\n\n"
        "```python\nfrom zen_analysis.zen import (\n    bitmap,  # the hash bitmap\n    profile as p,\n)\n```\n"
    )
    assert markdown_imports(page) == {
        Import("-m", "zen_analysis.ranks.entry"),
        Import("from", "zen_analysis", ("recipes",)),
        Import("from", "zen_analysis.zen", ("bitmap", "profile")),
    }
    cell = {"cell_type": "code", "source": ["%matplotlib inline\n", "!ls\n", f"{planted} as prof\n"]}
    assert notebook_imports(json.dumps({"cells": [cell]})) == {Import("from", "zen_analysis.zen", ("profile",))}
    runs = 'cmd = [sys.executable, "-m", "zen_analysis", "netlab"]\nimport zen_analysis.sync.ddp as ddp\n'
    assert python_imports(runs) == {Import("-m", "zen_analysis"), Import("import", "zen_analysis.sync.ddp")}


def test_every_import_written_outside_the_package_resolves():
    seen = {(_rel(p), imp) for p in [*SCRIPTS, *EXAMPLES, *PAGES, *NOTEBOOKS] for imp in imports_in(p)}
    where = {w.split("/")[0] if "/" in w else w for w, _ in seen}
    assert {"scripts", "docs", "notebooks", "README.md"} <= where, where  # every reader saw something
    assert any(i.form == "-m" for _, i in seen)  # shell heredocs: test_the_collector_reports_a_planted_import
    assert len(seen) > 60, len(seen)  # the scan sees the scripts', pages' and notebooks' imports
    broken = sorted(f"{w}: {imp} ({why})" for w, imp in seen if (why := unresolved(imp)))
    assert not broken, "\n".join(broken)


# --- dotted names in prose -----------------------------------------------------------------------------------------

TOP = sorted(
    p.stem if p.is_file() else p.name
    for p in PACKAGE.iterdir()
    if (p.suffix == ".py" and not p.stem.startswith("__")) or (p / "__init__.py").exists()
)
"""The package's own modules and subpackages: the first parts of a name written without ``zen_analysis.``."""
_DOTTED = re.compile(rf"(?:zen_analysis\.)?((?:{'|'.join(TOP)})(?:\.\w+)+)(.?)")
_FILE_SUFFIXES = {"py", "json", "md", "ipynb", "csv", "txt", "parquet", "png", "c", "h", "so"}


def config_keys() -> set[str]:
    """``section.field`` for every field of every section, and the earlier keys still read."""
    from zen_analysis.config import ExperimentConfig
    from zen_analysis.config.legacy import OLD_KEYS

    cfg = ExperimentConfig()
    keys = set(OLD_KEYS)
    for section in dataclasses.fields(cfg):
        sub = getattr(cfg, section.name)
        if dataclasses.is_dataclass(sub):
            keys |= {f"{section.name}.{f.name}" for f in dataclasses.fields(sub)}
    return keys


def prose_names(text: str, keys: set[str]) -> set[str]:
    """The dotted names in ``text``'s code spans (fenced blocks left out) that should be module paths (the rule in
    this module's docstring), without the ``zen_analysis.`` prefix."""
    text = _FENCE.sub("", text)
    found = set()
    for span in re.findall(r"`([^`\n]+)`", text):
        m = _DOTTED.match(span)
        if not m or m.group(2) in ("=", "/"):
            continue
        name = m.group(1)
        if name not in keys and name.rsplit(".", 1)[1] not in _FILE_SUFFIXES:
            found.add(name)
    for span in re.findall(r"`(zen_experiments(?:\.\w+)+)`", text):  # the apparatus's names, prefixed
        if span.rsplit(".", 1)[1] not in _FILE_SUFFIXES:
            found.add(span)
    return found


def _prose(path: Path) -> str:
    if path.suffix != ".ipynb":
        return path.read_text()
    return "\n".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"])


def _full(name: str) -> str:
    """A prose name as a module path: the apparatus's as written, the library's under ``zen_analysis.``."""
    return name if name.startswith("zen_experiments.") else f"zen_analysis.{name}"


def test_every_dotted_name_the_prose_writes_resolves():
    keys = config_keys()
    assert {"sync.scheme", "capture.pseudo", "local_sgd.compress", "sync.compress"} <= keys
    assert prose_names("`comm.evaluate.crossover`, ``zen_analysis.pricing.x``, `comm/schemes/zen.py`", keys) == {
        "comm.evaluate.crossover",
        "pricing.x",
    }
    assert not prose_names("`sync.scheme=zen`, `dist.num_ranks`, `sync.method`, `recipes.py`, `config.json`", keys)
    named = {(_rel(p), n) for p in [*PAGES, *NOTEBOOKS, *SCRIPTS] for n in prose_names(_prose(p), keys)}
    assert len(named) > 50, len(named)
    assert not _resolves("zen_analysis.comm.evaluate") and _resolves("zen_analysis.evaluation.crossover")
    missing = sorted(f"{where}: {n}" for where, n in named if not _resolves(_full(n)))
    assert not missing, "\n".join(missing)


# --- scripts citing a page's section ---------------------------------------------------------------------------------

_CITE = re.compile(r"\b(README(?:\.md)?|docs/[\w/.-]+\.md),\s+\"([^\"]+)\"")
_UNQUOTED = re.compile(r"\b(?:README(?:\.md)?|docs/[\w/.-]+\.md),\s+(?!\")\S+")


def headings(page: Path) -> set[str]:
    """A page's headings as written, backticks and a trailing ``{#id}`` left out (fenced blocks' ``#`` comments are
    not headings)."""
    text = _FENCE.sub("", page.read_text())
    return {re.sub(r"\s*\{#[^}]*\}$|`", "", h).strip() for h in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def citations(text: str) -> list[tuple[str, str]]:
    """``(page, heading)`` for each citation; a citation wrapped over comment lines is joined first."""
    text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)
    return [(page, heading) for page, heading in _CITE.findall(text)] + [(m, "") for m in _UNQUOTED.findall(text)]


def test_every_section_a_script_cites_exists():
    assert citations('# the row sum (docs/guide/zen.md,\n#  "Measured"); README, "Two commands"') == [
        ("docs/guide/zen.md", "Measured"),
        ("README", "Two commands"),
    ]
    assert citations("(README, GPUs)") == [("README, GPUs)", "")]  # unquoted: reported
    assert "Sparse pseudo-gradients" in headings(ROOT / "docs/guide/local-sgd.md")
    assert "a fragment" not in headings(ROOT / "docs/guide/your-training.md")  # a comment in a fenced block
    cited, wrong = 0, []
    for script in SCRIPTS:
        for page, heading in citations(script.read_text()):
            cited += 1
            target = ROOT / ("README.md" if page.startswith("README") else page)
            if not heading:
                wrong.append(f"{_rel(script)}: {page!r}: not a quoted heading")
            elif not target.is_file():
                wrong.append(f"{_rel(script)}: ({page}, {heading!r}): no such page")
            elif heading not in headings(target):
                elsewhere = [_rel(p) for p in PAGES if heading in headings(p)]
                wrong.append(f"{_rel(script)}: ({page}, {heading!r}): no such heading; it is in {elsewhere or 'none'}")
    assert cited >= 5, cited
    assert not wrong, "\n".join(wrong)
