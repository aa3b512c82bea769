"""What the README, CONTRIBUTING and docs/ name exists: every dotted ``zen_analysis`` path resolves to a module or an
attribute of one (a renamed module or function fails here, not in a reader's first import)."""

import importlib
import json
import re
from pathlib import Path

from zen_analysis.config.plugins import ENTRY_POINT_GROUP

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "data" / "README.md", ROOT / "examples" / "README.md"]
DOCS += [*(ROOT / "docs").rglob("*.md")]
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
    # the entry point group schemes from outside the package are declared in is a name, not a module
    missing = sorted(f"{where}: {d}" for where, d in named if not _resolves(d) and d != ENTRY_POINT_GROUP)
    assert not missing, missing
    assert not _resolves("zen_analysis.zen.ddp") and _resolves("zen_analysis.sync.ddp.register")


def test_every_file_path_the_docs_name_exists():
    pattern = r"(?<![\w/.])((?:zen_analysis|tests|scripts|notebooks|docs|examples)/[\w/.-]+\.(?:py|ipynb|c|h|md|png))"
    named = {(p.relative_to(ROOT).as_posix(), f) for p in DOCS for f in re.findall(pattern, p.read_text())}
    assert len(named) > 10
    missing = sorted(f"{where}: {f}" for where, f in named if not (ROOT / f).exists())
    assert not missing, missing


# A measured number, as prose types it: a ratio or share (1.5x, 86%), an amount with a unit of time, size or rate
# (0.46 s, 17 MB, 8,952 tokens/s), a decimal (0.26, 2.4e-7, and so a setting such as 0.5 Gbit/s or a version such as
# 3.11, which prose writes as code: `--set bandwidths=0.5`, `torch==2.13.0`). An integer without such a unit (8 ranks,
# 25 Gbit/s links, Fig. 11) is a size or a setting. Nothing is exempted by the words before it: a target, a limit or
# the paper's number is a number the generated pages hold, beside the command that checks it.
_AMOUNT = r"\d[\d,]*(?:\.\d+)?(?:e-?\d+)?"
_RANGE = rf"{_AMOUNT}(?:\s?(?:-|–|to)\s?{_AMOUNT})?"
_UNITS = "s|ms|µs|us|sec|seconds?|min|minutes?|h|hours?|B|kB|KB|MB|GB|TB|KiB|MiB|GiB|bytes|tokens/s|samples/s|steps/s"
MEASURED = re.compile(
    rf"(?<![\w.\-/^=])(?:{_RANGE}(?:x|×|%)(?![\w/])"
    rf"|{_RANGE} (?:{_UNITS}|MB/s|GB/s|TFLOP/s)(?![\w/])"
    r"|\d+\.\d+(?:e-?\d+)?(?![\d.]*\w)(?!\.\d)"
    r"|\d(?:\.\d+)?e-\d+)"
)
HAND_PAGES = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",  # the site's Contributing page includes it whole
    ROOT / "examples" / "README.md",
    *(p for p in (ROOT / "docs").rglob("*.md") if not p.read_text().startswith("<!--")),
]


def notebook_markdown(path: Path) -> str:
    """A notebook's markdown cells, one after another: its prose (code cells compute what they show)."""
    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def typed_numbers(text: str) -> list[str]:
    """Measured numbers typed into ``text``'s prose: code (fenced blocks, indented ones included, and inline spans:
    commands, settings), link targets and snippet lines are not prose and are left out; everything else is read."""
    text = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", text, flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "`code`", text)
    text = re.sub(r"\]\([^)\s]*\)|arXiv:[\d.]+|https?://\S+", "]", text)  # link targets, paper ids
    found = []
    for line in text.splitlines():
        if line.startswith("--8<--"):
            continue
        found += [f"{m.group(0)!r} in: {line.strip()[:160]}" for m in MEASURED.finditer(line)]
    return found


def test_no_measured_number_is_typed_by_hand():
    """Every measured number of the README, CONTRIBUTING, the site's hand-written pages and the notebooks' markdown
    comes from a generated page (``docs/results/``, written by ``make reproduce`` and the benchmarks): a page links to
    it instead, and says in words what to expect and why."""
    assert typed_numbers("step 0.46 s, 3.8x the dense run, 86% of the best; losses within 2.4e-7; mean 0.26")
    for exempt_no_more in ("the paper's 3.1x", "target: 1.3x", "within 20 minutes", "2 bytes a value", "0.5 Gbit/s"):
        assert typed_numbers(exempt_no_more), exempt_no_more
    assert typed_numbers("| `train.checkpoint_every` | 200 | a checkpoint costs 1.6 s |")
    assert not typed_numbers("8 ranks x 25 Gbit/s, `--set lr=0.1`, `torch==2.13.0`, Fig. 11, [x](https://a.b/1.5)")
    assert not typed_numbers("* a list\n\n  ```python\n  lr = 0.1  # 3.8x\n  ```\n")
    found = {p.relative_to(ROOT).as_posix(): typed_numbers(p.read_text()) for p in HAND_PAGES}
    found |= {p.relative_to(ROOT).as_posix(): typed_numbers(notebook_markdown(p)) for p in NOTEBOOKS}
    assert len(found) > 20 and all(p.relative_to(ROOT).as_posix() in found for p in NOTEBOOKS)
    found = {page: numbers for page, numbers in found.items() if numbers}
    assert not found, "\n".join(f"{page}: {n}" for page, numbers in found.items() for n in numbers)


if __name__ == "__main__":  # the typed numbers of the pages named, or of every hand-written page
    import sys

    for page in [Path(a) for a in sys.argv[1:]] or [*HAND_PAGES, *NOTEBOOKS]:
        text = notebook_markdown(page) if page.suffix == ".ipynb" else page.read_text()
        for number in typed_numbers(text):
            print(f"{page}: {number}")
