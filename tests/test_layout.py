"""Guard against test files that pytest would silently skip (its default norecursedirs include dist/, build/)."""

from pathlib import Path

import pytest

TESTS = Path(__file__).parent


def test_every_test_file_is_collected(request):
    args = [Path(a.split("::")[0]).resolve() for a in request.config.args]
    if not any(a == TESTS or a in TESTS.parents for a in args):
        pytest.skip("the whole tests/ directory was not selected")
    collected = {Path(item.fspath).resolve() for item in request.session.items}
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
