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


# A measured number, as prose types it: a ratio or share (1.5x, 86%), an amount with a unit of time, size or rate
# (0.46 s, 17 MB, 8,952 tokens/s), a decimal (0.26, 2.4e-7). Link rates (Gbit/s) are the lab's settings, not
# results; integers without a unit (8 ranks, 69,071 words) are sizes.
_AMOUNT = r"\d[\d,]*(?:\.\d+)?(?:e-?\d+)?"
_RANGE = rf"{_AMOUNT}(?:\s?(?:-|–|to)\s?{_AMOUNT})?"
_UNITS = "s|ms|µs|us|sec|seconds?|min|minutes?|h|hours?|B|kB|KB|MB|GB|TB|KiB|MiB|GiB|bytes|tokens/s|samples/s|steps/s"
MEASURED = re.compile(
    rf"(?<![\w.\-/^=])(?:{_RANGE}(?:x|×|%)(?![\w/])"
    rf"|{_RANGE} (?:{_UNITS}|MB/s|GB/s|TFLOP/s)(?![\w/])"
    r"|\d+\.\d+(?:e-?\d+)?(?![\d.]*\w)(?!\.\d)(?!\s?[GM]bit/s)"
    r"|\d(?:\.\d+)?e-\d+)"
)
NOT_MEASURED = re.compile(
    r"(?:\b(?:[Ss]ections?|Sec\.|§|Fig\.|Figs\.|Figure|Table|Algorithm|Theorem|Eq\.|paper's|paper:|paper says"
    r"|target:?|targets|limit:?|Python|torch|version|Llama)\s*$)|(?:(?:>=|<=)\s*$)"
    r"|(?:\b(?:within|under|at most)\s*$)"
)
"""What may stand before a number that is not a measurement: a reference into a paper (section 2.1, Fig. 17), a number
the paper gives (the paper's 3.1x), a target or limit (target: 1.3x), a version (Python 3.11, Llama 3.2), a time
budget (within 20 minutes, time units only)."""
WIDTH = re.compile(r"^ (?:a|an|per|each) (?:value|index|id|row|element|parameter)")
"""What may follow a number of bytes that is a format's width, not a measurement (2 bytes a value)."""
HAND_PAGES = [ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md") if not p.read_text().startswith("<!--"))]


def typed_numbers(text: str) -> list[str]:
    """Measured numbers typed into ``text``'s prose: code (fenced blocks, inline spans: commands, settings) and snippet
    lines are left out."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "`code`", text)
    text = re.sub(r"\]\([^)\s]*\)|arXiv:[\d.]+|https?://\S+", "]", text)  # link targets, paper ids
    found = []
    for line in text.splitlines():
        if line.startswith("--8<--"):
            continue
        if line.startswith("| `code`"):  # a row of a settings table: its cells of plain numbers are defaults
            line = re.sub(r"(?<=\|)[\d.,e\- ]+(?=\|)", " ", line)
        for m in MEASURED.finditer(line):
            if m.group(0).endswith("bytes") and WIDTH.match(line[m.end() :]):
                continue
            before = line[max(0, m.start() - 24) : m.start()]
            budget = re.search(r"(?:min|minutes?|s|h|hours?)$", m.group(0))
            why_not = NOT_MEASURED.search(before)
            if why_not and (budget or why_not.group(0).strip() not in ("within", "under", "at most", "in")):
                continue
            found.append(f"{m.group(0)!r} in: {line.strip()[:160]}")
    return found


def test_no_measured_number_is_typed_by_hand():
    """Every measured number of the README and the site's hand-written pages comes from a generated page
    (``docs/results/``, written by ``make reproduce`` and the benchmarks): a page links to it instead."""
    assert typed_numbers("step 0.46 s, 3.8x the dense run, 86% of the best; losses within 2.4e-7; mean 0.26")
    assert not typed_numbers("8 ranks x 0.5 Gbit/s, `--set lr=0.1`, section 2.1, the paper's 3.1x, within 20 minutes")
    assert not typed_numbers("| `train.lr` | 3e-3 | the usual |\nPython 3.11, 2 bytes a value, [x](https://a.b/1.5)")
    assert typed_numbers("| `train.checkpoint_every` | 200 | a checkpoint costs 1.6 s |")
    found = {p.relative_to(ROOT).as_posix(): typed_numbers(p.read_text()) for p in HAND_PAGES}
    found = {page: numbers for page, numbers in found.items() if numbers}
    assert not found, "\n".join(f"{page}: {n}" for page, numbers in found.items() for n in numbers)


if __name__ == "__main__":  # the typed numbers of the pages named, or of every hand-written page
    import sys

    for page in [Path(a) for a in sys.argv[1:]] or HAND_PAGES:
        for number in typed_numbers(page.read_text()):
            print(f"{page}: {number}")
