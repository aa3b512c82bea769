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
