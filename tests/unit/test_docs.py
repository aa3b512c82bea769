"""What the README, CONTRIBUTING and docs/ name exists: every dotted ``zen_analysis`` path resolves to a module or an
attribute of one (a renamed module or function fails here, not in a reader's first import)."""

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "data" / "README.md", *(ROOT / "docs").rglob("*.md")]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _resolves(path: str) -> bool:
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _dotted_paths(text: str) -> set[str]:
    return {m.rstrip(".") for m in re.findall(r"(?<![\w/])zen_analysis(?:\.\w+)+", text)}


def test_every_dotted_path_the_docs_name_resolves():
    named = {(p.relative_to(ROOT).as_posix(), d) for p in [*DOCS, *NOTEBOOKS] for d in _dotted_paths(p.read_text())}
    assert len(named) > 20  # the scan sees the README's paths
    missing = sorted(f"{where}: {d}" for where, d in named if not _resolves(d))
    assert not missing, missing
    assert not _resolves("zen_analysis.zen.ddp") and _resolves("zen_analysis.sync.ddp.register")


def test_every_file_path_the_docs_name_exists():
    pattern = r"(?<![\w/.])((?:zen_analysis|tests|scripts|notebooks|docs)/[\w/.-]+\.(?:py|ipynb|c|h|md|png))"
    named = {(p.relative_to(ROOT).as_posix(), f) for p in DOCS for f in re.findall(pattern, p.read_text())}
    assert len(named) > 10
    missing = sorted(f"{where}: {f}" for where, f in named if not (ROOT / f).exists())
    assert not missing, missing
