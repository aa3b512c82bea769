"""Every module that names tensors by shape suffix (``idx_K``, ``values_KD``, ``counts_W``) says what its letters
mean. A letter means different things in different files (``W`` is the ranks in one and a table's width in another,
``D`` a row's width in one and the dense features in another), so a reader cannot carry a legend over from the next
file: each module's docstring holds one ``Shape suffixes:`` paragraph, ``<LETTER> <meaning>`` items separated by
commas (a meaning may hold commas inside parentheses), defining every letter its code uses and no other.

Only code counts: names, arguments, attributes and keywords (``ast``), not prose, so a docstring that mentions
``values_KD`` of another module needs no legend for it."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "zen_analysis"

SHAPE_SUFFIXED = re.compile(r"^_*[a-z][a-z0-9_]*?_([A-Z][A-Z0-9]{0,3})$")
"""``name_K``, ``values_KD``, ``row_of_id_R``; digits may follow the first letter (``bounds_B1``: one more than B) and
only the letters need a meaning."""

NOT_SHAPES: dict[str, str] = {}
"""Names the pattern matches that are not shape suffixes, each with the reason (none turned up in the package)."""

PENDING: frozenset[str] = frozenset()
"""Modules whose legends wait on other edits under way (none now)."""

LEGEND = re.compile(r"^Shape suffixes:(.*?)(?:\n[ \t]*\n|\Z)", re.S | re.M)
ITEM = re.compile(r"([A-Z]) (\S.*)", re.S)


def suffix_letters(tree: ast.Module) -> dict[str, list[str]]:
    """Letter -> the shape-suffixed names of the module's code that use it (sorted)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
    letters: dict[str, list[str]] = {}
    for name in sorted(names):
        m = SHAPE_SUFFIXED.match(name)
        if m and name not in NOT_SHAPES:
            for letter in dict.fromkeys(c for c in m.group(1) if c.isalpha()):
                letters.setdefault(letter, []).append(name)
    return letters


def _items(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    return [item.strip() for item in [*items, text[start:]]]


def legend(doc: str) -> tuple[dict[str, str], list[str]] | None:
    """(letter -> meaning, malformed items) of the docstring's ``Shape suffixes:`` paragraph; None without one."""
    m = LEGEND.search(doc)
    if m is None:
        return None
    defined: dict[str, str] = {}
    bad = []
    for item in _items(" ".join(m.group(1).split()).removesuffix(".")):
        parsed = ITEM.fullmatch(item)
        if parsed is None or parsed.group(1) in defined:
            bad.append(item)
        else:
            defined[parsed.group(1)] = parsed.group(2)
    return defined, bad


def problems(source: str) -> list[str]:
    """What is wrong with a module's legend: missing, malformed, a used letter undefined, a defined letter unused."""
    tree = ast.parse(source)
    used = suffix_letters(tree)
    found = legend(ast.get_docstring(tree) or "")
    if found is None:
        if not used:
            return []
        uses = ", ".join(f"{letter} ({names[0]})" for letter, names in sorted(used.items()))
        return [f'no "Shape suffixes:" line in the module docstring; the code uses {uses}']
    defined, bad = found
    out = [f"malformed or repeated legend item {item!r} (want '<LETTER> <meaning>')" for item in bad]
    out += [f"{letter} is not in the legend ({', '.join(used[letter])})" for letter in sorted(set(used) - set(defined))]
    out += [f"the legend defines {letter}, which no name uses" for letter in sorted(set(defined) - set(used))]
    return out


def test_every_module_with_shape_suffixes_has_a_legend_for_its_letters():
    failures = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "zen_experiments").rglob("*.py")]):
        rel = path.relative_to(PACKAGE).as_posix() if path.is_relative_to(PACKAGE) else ""
        if rel not in PENDING:
            failures += [f"{path.relative_to(ROOT).as_posix()}: {p}" for p in problems(path.read_text())]
    assert not failures, "shape-suffix legends (see this test's docstring):\n" + "\n".join(failures)


def test_no_pending_module_is_done_already():
    gone = sorted(rel for rel in PENDING if not (PACKAGE / rel).exists())
    assert not gone, f"PENDING names modules that are gone: {gone}"
    done = sorted(rel for rel in PENDING if not problems((PACKAGE / rel).read_text()))
    assert not done, f"these modules' legends are right: take them out of PENDING: {done}"


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ("Sums rows.", ['no "Shape suffixes:" line in the module docstring; the code uses D (values_KD), K (idx_K)']),
        ("Sums rows.\n\nShape suffixes: K non-zeros on this rank.", ["D is not in the legend (values_KD)"]),
        (
            "Sums rows.\n\nShape suffixes: K non-zeros, D values per row (the table's width), W ranks.",
            ["the legend defines W, which no name uses"],
        ),
        (
            "Shape suffixes: K non-zeros, values per row.",
            [
                "malformed or repeated legend item 'values per row' (want '<LETTER> <meaning>')",
                "D is not in the legend (values_KD)",
            ],
        ),
        ("Shape suffixes: K non-zeros (rows, or\nelements), D values\nper row.\n\nMore prose, with commas.", []),
    ],
)
def test_a_planted_legend_problem_is_reported(doc, expected):
    source = f'"""{doc}"""\n\n\ndef sum_rows(idx_K, values_KD):\n    return values_KD[idx_K]\n'
    assert problems(source) == expected


def test_prose_and_constants_need_no_legend():
    assert problems('"""Reads ``values_KD`` of another module."""\n\nMAX_K = 3\nvalues = 1\n') == []
