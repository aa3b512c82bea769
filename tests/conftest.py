"""What `make test-fast` (``pytest -m "not slow" tests``) runs: every test outside the folders below, and in them
only the tests marked ``smoke`` (one cheap representative per multi-rank family).

Every test under ``tests/multirank``, ``tests/gpu`` and ``tests/browser`` is marked ``slow`` here unless it carries
``@pytest.mark.smoke`` (or ``pytest.param(..., marks=pytest.mark.smoke)`` for one case of a parametrized test), so
a new multi-rank test is slow by default and nobody has to remember a marker. ``make test`` selects no markers and
runs them all. ``tests/unit/test_fast_suite.py`` checks the selection in a subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent
SLOW_FOLDERS = ("multirank", "gpu", "browser")

_COLLECTED = pytest.StashKey[tuple]()


def _in_slow_folder(item: pytest.Item) -> bool:
    try:
        rel = Path(item.path).resolve().relative_to(TESTS.resolve())
    except ValueError:  # a notebook under nbmake, or anything outside tests/
        return False
    return len(rel.parts) > 1 and rel.parts[0] in SLOW_FOLDERS


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by -m, so the marks added here count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[_COLLECTED] = tuple(items)
    for item in items:
        if _in_slow_folder(item) and item.get_closest_marker("smoke") is None:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def collected_items(request: pytest.FixtureRequest) -> tuple[pytest.Item, ...]:
    """Every test collected, before ``-m`` or ``-k`` deselected any (``request.session.items`` is what is left)."""
    return request.config.stash.get(_COLLECTED, tuple(request.session.items))
