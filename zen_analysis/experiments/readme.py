"""The documentation's deterministic numbers from ``make reproduce``, checked against the files a run wrote.

The tables live in the user guide (``docs/``; the README links to it): :func:`documented_text` is the README and
every page of ``docs/``, the text the checks read. What the messages call "README" is that text.

Training is seeded end to end, so the final losses, the embedding densities and the sparse bytes a rerun of
``make reproduce`` writes equal the ones the README quotes. :func:`mismatches` compares two of the README's tables
with ``data/derived/reproduce/``: the capture table (each run's final train and validation loss and its natural
tensor's density, mean (min-max), from ``capture_summary.txt``) and the parity table (each training's final loss and
sparse bytes per step, from ``parity_summary.txt``); and every decimal number and percentage the claims table quotes
must be one ``claims.md`` holds. ``make reproduce`` runs it last and says what differs; the measured numbers (step
times, tokens/s) vary from run to run and are not compared.
"""

from __future__ import annotations

import re
from pathlib import Path

PARITY_ROWS = {
    "dense all-reduce": "allreduce",
    "embedding via Zen (by rows)": "zen",
    "top-5% + AGsparse": "topk-agsparse",
    "top-5% + Zen": "topk-zen",
}
"""The parity table's rows in the README, by the variant ``parity_summary.txt`` names them."""


def documented_text(root: Path) -> str:
    """The README and every Markdown page under ``root / "docs"``, one after the other."""
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return "\n\n".join(p.read_text() for p in pages if p.exists())


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _capture_runs(text: str) -> dict[str, dict]:
    """``capture_summary.txt``: each run's final loss, val loss and natural tensor's density mean, min and max."""
    runs = {}
    for block in text.split("\n\n"):
        head = re.match(r"run (\S+) ", block)
        losses = re.search(r"final loss ([\d.]+), val loss ([\d.]+)", block)
        if not head or not losses:
            continue
        natural = next((ln.split() for ln in block.splitlines() if " natural " in ln), None)
        density = tuple(float(v) for v in natural[6:9]) if natural else None
        runs[head.group(1)] = {"loss": float(losses.group(1)), "val_loss": float(losses.group(2)), "density": density}
    return runs


def _parity(text: str) -> dict[str, dict]:
    """``parity_summary.txt``: each variant's final loss and median sparse bytes per step (None where dense)."""
    out = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 6:
            out[parts[0]] = {"loss": float(parts[1]), "bytes": None if parts[-1] == "NaN" else round(float(parts[-1]))}
    return out


def _claim_numbers(text: str) -> list[str]:
    """The decimal numbers and percentages of a text (``+`` dropped), as a claims cell quotes them."""
    found = re.findall(r"(?<!top-)(?<![\d.])\+?\d+(?:\.\d+)?%?", text)  # not a top-k ratio's name ("top-5%")
    return [t.lstrip("+") for t in found if "." in t or t.endswith("%")]


def mismatches(readme: str, derived: Path) -> tuple[int, list[str]]:
    """(how many README numbers were compared, the ones that differ from the files under ``derived``
    (``data/derived/reproduce``), each saying where and what the file has)."""
    compared, wrong = 0, []
    summary = derived / "capture_summary.txt"
    runs = _capture_runs(summary.read_text()) if summary.exists() else {}
    parity_file = derived / "parity_summary.txt"
    parity = _parity(parity_file.read_text()) if parity_file.exists() else {}
    claims_file = derived / "claims.md"
    measured = set()
    if claims_file.exists():  # the "we measure" column of every row
        for line in claims_file.read_text().splitlines()[2:]:
            cells = _cells(line)
            if len(cells) >= 5:
                measured.update(_claim_numbers(cells[3]))
    header: list[str] = []
    for line in readme.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = _cells(line)
        if not header:  # a table's first line names its columns
            header = cells
            continue
        run = re.match(r"`(reproduce-[\w-]+)`", cells[0])
        if header[:2] == ["run", "final train loss"] and run and run.group(1) in runs and len(cells) >= 5:
            have = runs[run.group(1)]
            for label, cell, value in (
                ("final train loss", cells[1], have["loss"]),
                ("val loss", cells[2], have["val_loss"]),
            ):
                compared += 1
                if cell != f"{value:.3f}":
                    wrong.append(f"{run.group(1)} {label}: README {cell}, {summary.name} {value:.3f}")
            if have["density"] is not None:
                mean, lo, hi = (100 * d for d in have["density"])
                expect = f"{mean:.2f}% ({lo:.2f}-{hi:.2f}%)"
                compared += 1
                if cells[4] != expect:
                    wrong.append(f"{run.group(1)} embedding density: README {cells[4]}, {summary.name} {expect}")
        if header[:2] == ["claim", "paper"] and measured and len(cells) >= 3:
            for number in _claim_numbers(cells[2]):
                compared += 1
                if number not in measured:
                    wrong.append(f"claims '{cells[0]}': README {number}, not in {claims_file.name}")
        variant = PARITY_ROWS.get(cells[0])
        if header[:2] == ["training", "final loss"] and variant in parity and len(cells) >= 5:
            have = parity[variant]
            compared += 1
            if cells[1] != f"{have['loss']:.6f}":
                wrong.append(f"parity {cells[0]} final loss: README {cells[1]}, {parity_file.name} {have['loss']:.6f}")
            if have["bytes"] is not None:
                compared += 1
                if cells[4] != f"{have['bytes']:,}":
                    wrong.append(f"parity {cells[0]} bytes: README {cells[4]}, {parity_file.name} {have['bytes']:,}")
    return compared, wrong
