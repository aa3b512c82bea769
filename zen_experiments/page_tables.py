"""What the results pages show of a returned value: a table as Markdown that fits the page, never a text dump.

A benchmark returns DataFrames, paths, numbers and lists of them. :func:`items` stores each as a JSON-safe record
(a table's columns and rows, a text, a number) in ``<name>.runs.json``, and :func:`render` writes the page's
Markdown from them, so a page can be re-rendered from what a run stored. A table is shown by its headline
columns, the ones a reader looks for (the ratio, and the paper's number beside it), after the columns that say
which row is which; where the whole table would not fit the content column, the full table follows in a
collapsible ``<details>`` block (``md_in_html`` renders the Markdown inside it).

Pages written before tables were stored as records hold pandas' ``to_string`` text; :func:`text_frame` reads such
a text back into a table (column by column, from where the header's names end), so those pages render the same way
until their benchmark runs again. Text it cannot read as a table stays preformatted.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zen_analysis import paths

WIDTH = 64
"""Characters a table may span (:func:`_width`) before it is shown by its headline columns: what the documentation's
content column holds at its tables' font (about 690 pixels in a 1400-pixel window, the browser test's)."""
WRAP = 16
"""Characters of a text with spaces counted towards :data:`WIDTH` (a browser wraps the rest within the cell)."""
PAD = 3
"""Characters a cell's padding takes (the site's tables pad each cell about this much)."""
PROSE = 100
"""A text line longer than this is a sentence, shown wrapped (a list item) rather than preformatted."""
KEYS = 4
"""Most columns shown before the headline ones to say which row is which."""
KEY_CHARS = 40
"""Longest value a column saying which row is which may hold (a longer text is a remark, left to the full table)."""
RATIO = re.compile(r"speedup|ratio|lead|_over_|share|paper|measure|^model$")
"""A column holding a ratio, the paper's number or what was measured or modelled beside it, by its name: the
default headline columns."""


def _cell(value: Any) -> Any:
    """A JSON-safe cell: NaN and None as None, numpy scalars as Python's."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)


def _series(value: Any) -> bool:
    """Whether a cell holds a sequence (a run's losses or step times, per step): a list, tuple or array."""
    return isinstance(value, (list, tuple)) or getattr(value, "ndim", 0) > 0


def table(frame: Any) -> dict:
    """A DataFrame or Series as ``{"columns": [...], "rows": [[...], ...]}``; a named index becomes columns. A column
    of sequences (per-step losses, step times) is left out: a page shows one number a cell, and the benchmark's
    derived table (``data/derived/``) keeps the series."""
    if not hasattr(frame, "columns"):  # a Series
        frame = frame.to_frame()
    if any(name is not None for name in frame.index.names):
        frame = frame.reset_index()
    frame = frame[[c for c in frame.columns if not any(_series(v) for v in frame[c])]]
    columns = [" ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in frame.columns]
    return {"columns": columns, "rows": [[_cell(v) for v in row] for row in frame.itertuples(index=False)]}


def _text(value: Any) -> str:
    """A text as the page shows it: a path under a checkout's ``data/`` or ``figures/`` relative to the checkout."""
    text = str(value).replace(f"{paths.REPO_ROOT}/", "").rstrip("\n")
    return re.sub(r"^/\S*?/((?:data|figures)/)", r"\1", text) if "\n" not in text else text


def items(result: Any) -> list[dict]:
    """What a benchmark returned as records, one per returned key (``{"key", "table" | "tables" | "text" |
    "value"}``): tables, lists of tables and dicts of dicts as tables, paths and strings as text, numbers (and a
    dict's numbers, as ``key.name``) as values."""
    pairs = result.items() if isinstance(result, dict) else [("", result)]
    out = []
    for key, value in pairs:
        key = str(key)
        if hasattr(value, "to_string"):  # a pandas table or series (pandas is not imported here)
            out.append({"key": key, "table": table(value)})
        elif isinstance(value, (list, tuple)) and value and all(hasattr(v, "to_string") for v in value):
            out.append({"key": key, "tables": [table(v) for v in value]})
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            out.append({"key": key, "text": "\n\n".join(_text(v) for v in value)})
        elif isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):  # a table
            inner = list(dict.fromkeys(k for v in value.values() for k in v))
            rows = [[str(k), *(_cell(v.get(c)) for c in inner)] for k, v in value.items()]
            out.append({"key": key, "table": {"columns": ["", *map(str, inner)], "rows": rows}})
        elif isinstance(value, dict) and all(
            isinstance(_cell(v), (bool, int, float, type(None))) for v in value.values()
        ):
            out += [{"key": f"{key}.{k}" if key else str(k), "value": _cell(v)} for k, v in value.items()]
        elif isinstance(_cell(value), (bool, int, float, type(None))) and not isinstance(value, (str, Path)):
            out.append({"key": key, "value": _cell(value)})
        else:
            out.append({"key": key, "text": _text(value)})
    return out


def fmt(value: Any) -> str:
    """A cell as the page shows it: floats to 4 significant digits (large ones whole, with thousands separators),
    an empty cell for NaN, ``|`` escaped."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) >= 1e5 else str(value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A Markdown table; numeric columns right-aligned."""
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) for i in range(len(columns))]
    lines = ["| " + " | ".join(fmt(c) for c in columns) + " |"]
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    return lines + ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]


def _chars(cell: str) -> int:
    """The characters a cell takes in a row: all of a word or number, a text with spaces wrapped at :data:`WRAP`
    (but never narrower than its longest word)."""
    return max(max(map(len, cell.split(" "))), min(len(cell), WRAP)) if " " in cell else len(cell)


def _width(columns: Sequence[str], rows: Sequence[Sequence[Any]], shown: Sequence[int]) -> int:
    """A table's width in characters, with :data:`PAD` for each cell's padding."""
    return sum(max(_chars(fmt(v)) for v in [columns[i], *(r[i] for r in rows)]) + PAD for i in shown)


def _keys(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """The columns that say which row is which: texts and integers that vary (short ones but for the first, however
    long), none a function of the ones before it (a vocabulary size beside its recipe), at most :data:`KEYS`."""
    keys: list[int] = []
    for i, c in enumerate(columns):
        values = [r[i] for r in rows]
        label = all(isinstance(v, str) or type(v) is int for v in values)
        short = all(len(str(v)) <= KEY_CHARS for v in values) or not keys
        before = {tuple(r[k] for k in keys) for r in rows}
        new = len({tuple(r[k] for k in [*keys, i]) for r in rows}) > len(before)  # tells rows apart further
        if label and short and len(set(values)) > 1 and new and not RATIO.search(c) and len(keys) < KEYS:
            keys.append(i)
    return [columns[k] for k in keys]


def headline(tab: dict, named: Sequence[str] = ()) -> list[str]:
    """The columns a table is shown by: ``named`` (a benchmark's choice, :data:`~zen_experiments.
    benchmarks.Benchmark.columns`) where the table holds one of its ratios (by :data:`RATIO`) or numbers, else the
    columns that say which row is which (:func:`_keys`) and then those :data:`RATIO` names (the last ones left out
    while they overflow :data:`WIDTH`, one always kept), or where none is, its numbers in order while they fit."""
    columns, rows = tab["columns"], tab["rows"]
    chosen = [c for c in named if c in columns]
    numeric = [c for i, c in enumerate(columns) if all(isinstance(r[i], (int, float)) or r[i] is None for r in rows)]
    if any(RATIO.search(c) or c in numeric and c not in columns[:1] for c in chosen):  # the benchmark's choice
        return chosen
    keys = _keys(columns, rows)
    ratios = [c for c in columns if RATIO.search(c)]
    while len(ratios) > 1 and _width(columns, rows, [columns.index(c) for c in keys + ratios]) > WIDTH:
        ratios.pop()
    if ratios:
        return keys + ratios
    shown = list(keys)  # no ratio by name: the numbers in their order, as many as fit
    for i, c in enumerate(columns):
        fits = _width(columns, rows, [columns.index(s) for s in shown] + [i]) <= WIDTH
        if c not in shown and all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) and fits:
            shown.append(c)
    return shown


def table_lines(tab: dict, named: Sequence[str] = ()) -> list[str]:
    """A table as the page shows it: whole where it fits :data:`WIDTH`, else its :func:`headline` columns with
    the full table in a collapsible block below."""
    columns, rows = tab["columns"], tab["rows"]
    if not columns:
        return ["(an empty table)", ""]
    if _width(columns, rows, range(len(columns))) <= WIDTH:
        return [*markdown(columns, rows), ""]
    shown = [columns.index(c) for c in headline(tab, named)]
    lines = markdown([columns[i] for i in shown], [[r[i] for i in shown] for r in rows])
    lines += ["", '<details markdown="1">', f"<summary>All {len(columns)} columns</summary>", ""]
    return [*lines, *markdown(columns, rows), "", "</details>", ""]


def text_lines(text: str, named: Sequence[str] = ()) -> list[str]:
    """A text as Markdown: each paragraph's ``to_string`` table (:func:`text_frame`) as a table, the rest as
    preformatted lines, or as a list where a line is longer than :data:`PROSE` (a one-line text inline)."""
    if "\n" not in text and text.strip():
        return [f"`{text.strip()}`", ""]
    out: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text.strip("\n")):
        lines = paragraph.split("\n")
        starts = [i for i in range(len(lines) - 1) if not i or len(lines[i - 1]) != len(lines[i])]  # not mid-table
        start = next((i for i in starts if text_frame("\n".join(lines[i:]))), None)
        prose = lines if start is None else lines[:start]
        if prose and max(map(len, prose)) > PROSE:  # sentences: a list the page wraps, not a box cut at its edge
            out += [*(f"- {line.strip()}" for line in prose), ""]
        elif prose:  # short lines, maybe aligned: as they were printed
            out += ["```text", *prose, "```", ""]
        if start is not None:
            out += table_lines(text_frame("\n".join(lines[start:])), named)
    return out


def markdown_lines(text: str, named: Sequence[str] = ()) -> list[str]:
    """A Markdown text (a stage's ``claims.md``) with each of its tables shown as :func:`table_lines` shows one
    (headline columns first where the whole would not fit); its other lines as they are."""
    out: list[str] = []
    lines = text.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        j = i
        while j < len(lines) and lines[j].startswith("|"):
            j += 1
        if j - i < 2 or not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            out.append(lines[i])
            i += 1
            continue
        cells = [
            [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]] for row in lines[i:j]
        ]
        rows = [[_number(c) for c in row] for row in cells[2:]]
        out += table_lines({"columns": cells[0], "rows": rows}, named)[:-1]
        i = j
    return [*out, ""]


def render(records: Sequence[dict], named: Sequence[str] = ()) -> list[str]:
    """A run's stored records (:func:`items`) as Markdown: its numbers in one table, then each table and text
    under its key."""
    values = [r for r in records if "value" in r]
    lines = []
    if values:
        lines += [*markdown(["returned", "value"], [[f"`{r['key']}`", r["value"]] for r in values]), ""]
    for r in records:
        if "value" in r:
            continue
        lines += [f"### `{r['key']}`", ""] if r["key"] else []
        if "text" in r:
            lines += text_lines(r["text"], named)
        for tab in r.get("tables", [r["table"]] if "table" in r else []):
            lines += table_lines(tab, named)
    return lines


def _number(cell: str) -> Any:
    if cell in ("", "NaN", "nan", "None", "<NA>"):
        return None
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            continue
    return cell


def _index(header: str, rows: list[str]) -> tuple[str, list[str], list[str], list[int]]:
    """Where ``to_string`` printed an index: its levels' names and where each starts (left-aligned, unlike the
    columns), the header with the columns' own name blanked, and the rows left under the header. A second line
    whose names end before the first column's does is the index levels' names (a named or multi-level index); else
    a header blank above rows that start at its left edge means an unnamed index (pandas' ``0, 1, ...``)."""
    tokens = [m.span() for m in re.finditer(r"\S+", header)]
    second = rows[0] if len(rows) > 1 and len(tokens) > 1 else ""
    if second.strip() and len(second.rstrip()) < tokens[1][0]:  # the index levels' names
        if tokens[0][0] == 0:
            header = " " * tokens[0][1] + header[tokens[0][1] :]  # the columns' name (a pivot's), not a column
        spans = [m.span() for m in re.finditer(r"\S+", second)]
        return header, rows[1:], [second[a:b] for a, b in spans], [a for a, _ in spans]
    if header[0] == " " and all(r[0] != " " for r in rows):
        return header, rows, [""], [0]
    return header, rows, [], []


def text_frame(text: str) -> dict | None:
    """A DataFrame's ``to_string`` read back into a table (:func:`table`'s form), or ``None`` where ``text`` is not
    one. Columns end where the header's names end and every row has a space (pandas right-aligns them); an index
    (:func:`_index`) becomes the first columns, its blanks (a multi-level index's repeats) filled from above, and
    pandas' ``0, 1, ...`` is dropped; a header name whose column is empty elsewhere joins the next one (a name with
    a space in it). Every line must be equally long, as pandas pads them."""
    lines = text.rstrip("\n").split("\n")
    if len(lines) < 2 or len({len(line) for line in lines}) != 1 or not lines[0].strip():
        return None
    header, rows, levels, starts = _index(lines[0], lines[1:])
    ends = [m.end() for m in re.finditer(r"\S+", header) if all(r[m.end() : m.end() + 1] in ("", " ") for r in rows)]
    if not ends or ends[-1] != len(header):
        return None
    if levels and levels != [""]:  # a name with spaces over a named index's first column: its words, one column
        lo = starts[-1] + len(levels[-1])
        while len(ends) > 1 and all(not r[lo : ends[0]].strip() for r in rows):
            ends.pop(0)
    index, data = [], []
    for row in rows:  # the index part: the unnamed index's one token, or all but the first column's last token
        cut = len(row.split(" ", 1)[0]) if levels == [""] else row[: ends[0]].rstrip().rfind(" ") + 1
        cut = cut if levels else 0
        part = row[:cut]
        index.append([part[a:b].strip() for a, b in zip(starts, [*starts[1:], len(part)][: len(starts)], strict=True)])
        data.append([row[a:b].strip() for a, b in zip([cut, *ends[:-1]], ends, strict=True)])
    names = [header[a:b].strip() for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    columns, cells, pending = [], [[] for _ in rows], ""
    for i, name in enumerate(names):
        if i < len(names) - 1 and not any(d[i] for d in data):  # part of the next name
            pending += name + " "
            continue
        columns.append(pending + name)
        pending = ""
        for row, d in zip(cells, data, strict=True):
            row.append(_number(d[i]))
    for level in range(len(levels) - 1):  # a multi-level index prints each label once: filled down
        for above, row in zip(index, index[1:]):
            row[level] = row[level] or above[level]
    if levels == [""] and [r[0] for r in index] == [str(i) for i in range(len(rows))]:
        levels, index = [], [[] for _ in rows]  # pandas' 0, 1, ...: not a column
    columns = [*levels, *columns]
    if len(columns) < 2 or any(re.search(r"\s{2,}", c) for c in columns):
        return None  # two names merged: not a plain to_string table (a wrapped frame)
    return {"columns": columns, "rows": [[*map(_number, i), *c] for i, c in zip(index, cells, strict=True)]}


def legacy_body(body: Sequence[str], named: Sequence[str] = ()) -> list[str]:
    """A run's page lines as runs stored them before :func:`items` (a ``### `key``` heading over a pre-rendered
    ``text`` or ``json`` block), read back into records and rendered as :func:`render` renders them: a text table as
    a table, a JSON number as a value, a JSON list of tables' texts as those tables. Other lines (its figures) follow
    as they were."""
    records: list[dict] = []
    rest: list[str] = []
    key, i = "", 0
    while i < len(body):
        line = body[i]
        heading = re.fullmatch(r"#{2,3} `(.*)`", line)
        if heading or line not in ("```text", "```json"):
            key = heading.group(1) if heading else key
            rest += [line] if not heading and (line or rest) else []
            i += 1
            continue
        end = body.index("```", i + 1)
        block = "\n".join(body[i + 1 : end])
        value = block if line == "```text" else json.loads(block)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = "\n\n".join(value)  # tables' texts, or lines
        records += items({key: value})
        key, i = "", end + 1
    return render(records, named) + rest
