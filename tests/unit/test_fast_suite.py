"""`make test-fast` is a real fast suite: its marker expression keeps every unit test and one multi-rank smoke test
per family (checked on the session's own selection under `make test-fast`, otherwise on a collection in a subprocess
with the same arguments), and `make test` filters nothing."""

import json
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The multi-rank families test-fast keeps one smoke test of (tests/multirank/<name>). Left out, for the 3-minute
# budget on 2 cores (seconds here, idle to loaded): test_ddp_users_alternatives (10 at its cheapest), test_readme
# (the README's blocks, 8 and more), test_wire_dtype (6 runs, 6-8), test_comm_bench (4-7), test_integrations (3-7),
# test_lossless_defaults (2-5), test_llm_families (1-3), test_ddp_matrix (1-3; test_ddp_natural's smoke is a hook
# against stock DDP) and test_scheme_edges (1; test_comm_schemes's smoke sums every scheme against all_reduce).
SMOKED = (
    "test_checkpoint",
    "test_comm_schemes",
    "test_ddp_edges",
    "test_ddp_lookups",
    "test_ddp_natural",
    "test_ddp_sparse_model",
    "test_deepfm",
    "test_dtype_contract",
    "test_exchange",
    "test_export",
    "test_faults",
    "test_fsdp",
    "test_launch_and_train",
    "test_local_sgd_training",
    "test_lstm_words",
    "test_netlab",
    "test_overlap",
    "test_row_sync",
    "test_zen_hierarchical_sync",
    "test_zen_training",
)

_PROBE = """
import json, sys
import pytest

class Probe:
    def __init__(self):
        self.collected, self.selected, self.smoke = [], [], []

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items):
        self.collected = [i.nodeid for i in items]

    def pytest_collection_finish(self, session):
        self.selected = [i.nodeid for i in session.items]
        self.smoke = [i.nodeid for i in session.items if i.get_closest_marker("smoke")]

probe = Probe()
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *sys.argv[2:]], plugins=[probe])
with open(sys.argv[1], "w") as f:
    json.dump({"code": int(code), "collected": probe.collected, "selected": probe.selected, "smoke": probe.smoke}, f)
"""


def _pytest_args(target: str) -> list[str]:
    """The arguments the Makefile's ``target`` passes to pytest (its one ``-m pytest`` line)."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.M)
    assert match, f"no {target} target in the Makefile"
    lines = [line for line in match.group(1).splitlines() if "-m pytest" in line]
    assert len(lines) == 1, f"{target}: expected one pytest line, found {lines}"
    return shlex.split(lines[0].split("-m pytest", 1)[1])


def _collect(tmp_path, args: list[str]) -> dict:
    out = tmp_path / "collected.json"
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, str(out), *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["code"] == 0, f"collection failed:\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
    return got


def _family(nodeid: str) -> str:
    return Path(nodeid.split("::")[0]).stem


def _this_session_is_test_fast(request) -> bool:
    """Run as ``make test-fast`` runs it (the whole tests/ folder, ``-m "not slow"``, nothing else deselecting):
    this session's own selection is the one to check, and a second collection would cost ~10 s of the budget."""
    opt = request.config.option
    args = {Path(a.split("::")[0]).resolve() for a in request.config.args}
    return (
        opt.markexpr == "not slow"
        and not opt.keyword
        and not opt.deselect
        and not getattr(opt, "lf", False)
        and args == {ROOT / "tests"}
    )


def test_the_fast_selection_is_the_unit_tests_and_one_smoke_per_multirank_family(request, collected_items, tmp_path):
    fast = _pytest_args("test-fast")
    assert "-m" in fast and fast[fast.index("-m") + 1] == "not slow" and "tests" in fast, fast
    assert any(a.startswith("--timeout") for a in fast) and "--nbmake" not in fast, fast
    whole = _pytest_args("test")
    assert not [a for a in whole if a[:2] in ("-m", "-k")], f"make test must run every test: {whole}"

    if _this_session_is_test_fast(request):
        items = request.session.items
        collected, selected = [i.nodeid for i in collected_items], {i.nodeid for i in items}
        smoke = {i.nodeid for i in items if i.get_closest_marker("smoke")}
    else:  # make test, or this file alone: collect as make test-fast does
        got = _collect(tmp_path, ["-m", "not slow", "tests"])
        collected, selected, smoke = got["collected"], set(got["selected"]), set(got["smoke"])
    assert collected, "nothing collected"

    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")}
    assert on_disk <= {n.split("::")[0] for n in collected}, "a test file was not collected"

    def under(folder):
        return [n for n in collected if n.startswith(f"tests/{folder}")]

    unit = [*under("unit/"), *under("test_layout.py")]
    assert unit and not [n for n in unit if n not in selected], "test-fast left out unit tests"
    assert not (selected & {*under("gpu/"), *under("browser/")}), "test-fast runs GPU or browser tests"

    multirank = under("multirank/")
    kept = [n for n in multirank if n in selected]
    assert set(kept) == smoke & set(multirank), "a multi-rank test without @pytest.mark.smoke was selected"
    assert len(kept) <= len(multirank) // 4, f"{len(kept)} of {len(multirank)} multi-rank tests in test-fast"
    per_family = Counter(_family(n) for n in kept)
    assert max(per_family.values()) == 1, f"more than one smoke test in a family: {per_family}"
    missing = sorted(set(SMOKED) - set(per_family))
    assert not missing, f"multi-rank families without a smoke test in test-fast: {missing}"
    assert set(per_family) <= set(SMOKED), f"add new smoke families to SMOKED: {set(per_family) - set(SMOKED)}"
