"""The GPU results page is what its generator makes of the committed runs (``data/gpu/*/``): never edited by hand,
never stale."""

from zen_analysis import paths
from zen_experiments.gpu_page import gpu_runs, render_page


def test_the_committed_gpu_page_is_what_the_generator_writes():
    page = paths.REPO_ROOT / "docs" / "results" / "gpu.md"
    assert page.read_text() == render_page(gpu_runs()), "run: python -m zen_experiments.gpu_page"


def test_with_no_run_the_page_says_how_to_make_one(tmp_path):
    text = render_page(gpu_runs(tmp_path / "none"))
    assert "No GPU run is committed yet" in text and "scripts/gpu_check.sh" in text
