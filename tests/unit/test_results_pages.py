"""The results pages are what a stage wrote: its files noted as it runs, rendered (a Markdown table inline, a text
table preformatted, a figure copied and shown), and a stage that has not run says which command runs it."""

import json

from zen_analysis import paths
from zen_analysis.experiments import results_pages


def test_a_stage_page_shows_what_the_stage_wrote(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("ZEN_ANALYSIS_FIGURES", str(tmp_path / "figures"))
    derived = paths.derived_dir() / "reproduce"
    derived.mkdir(parents=True)
    paths.figures_dir().mkdir(parents=True)
    (derived / "old.txt").write_text("from an earlier stage\n")
    before = results_pages.snapshot()
    (derived / "claims.md").write_text("| claim | holds |\n|---|---|\n| C1 | True |\n")
    (derived / "table.txt").write_text("variant  loss\n    zen  5.2\n")
    (paths.figures_dir() / "fig2b.png").write_bytes(b"\x89PNG fake")
    (derived / "table.parquet").write_bytes(b"PAR1\xa0\x00")  # binary: named, not shown
    made = ["claims.md", "fig2b.png", "table.parquet", "table.txt"]
    assert results_pages.record("characterize", before) == made
    assert json.loads((derived / "outputs.json").read_text()) == {"characterize": made}
    out = tmp_path / "results"
    pages = results_pages.write_pages(out)
    assert [p.name for p in pages] == [f"{s}.md" for s in results_pages.TITLES]
    page = (out / "characterize.md").read_text()
    assert page.startswith(results_pages.GENERATED)
    assert "| C1 | True |" in page and "```text\nvariant  loss\n    zen  5.2\n```" in page
    assert "![fig2b.png](figures/fig2b.png)" in page and (out / "figures" / "fig2b.png").read_bytes() == b"\x89PNG fake"
    assert "from an earlier stage" not in page and "Also written: `data/derived/reproduce/table.parquet`" in page
    assert "`zen-analysis reproduce --only scale` writes this page" in (out / "scale.md").read_text()
    assert "`make reproduce-full`" in (out / "scale.md").read_text()


def test_only_the_checkouts_own_data_root_writes_the_committed_pages(tmp_path, monkeypatch):
    monkeypatch.delenv("ZEN_ANALYSIS_DATA", raising=False)
    assert results_pages.writes_pages()
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path))  # a test's data root, or a user's scratch one
    assert not results_pages.writes_pages()


def test_a_benchmark_writes_its_page_and_the_index_lists_every_one(tmp_path):
    import pandas as pd

    result = {"table": pd.DataFrame({"variant": ["stock", "zen"], "step_s": [1.5, 0.75]}), "ratio": 2.0}
    page = results_pages.write_bench_page("fsdp", "stock vs Zen", ["ranks=4"], result, out=tmp_path)
    text = page.read_text()
    assert "`zen-analysis bench fsdp --set ranks=4`" in text and "stock vs Zen." in text
    assert "  zen    0.75" in text and "```json\n2.0\n```" in text
    index = results_pages.write_bench_index({"fsdp": ("stock vs Zen", True), "hashing": ("h", False)}, out=tmp_path)
    assert "| [`fsdp`](fsdp.md) | stock vs Zen | the network lab (root) | a run |" in index.read_text()
    assert "| [`hashing`](hashing.md) | h | loopback (`make bench`) | not run yet |" in index.read_text()
    assert "`zen-analysis bench hashing` writes this page" in (tmp_path / "hashing.md").read_text()
