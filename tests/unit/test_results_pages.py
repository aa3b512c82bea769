"""The results pages are what a stage wrote: its files noted as it runs, rendered (a Markdown table inline, a text
table preformatted, a figure copied and shown), and a stage that has not run says which command runs it."""

import json

import pytest

from zen_analysis import paths
from zen_experiments import results_pages


def test_a_stage_page_shows_what_the_stage_wrote(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("ZEN_ANALYSIS_FIGURES", str(tmp_path / "figures"))
    derived = paths.derived_dir() / "reproduce"
    derived.mkdir(parents=True)
    paths.figures_dir().mkdir(parents=True)
    (derived / "old.txt").write_text("from an earlier stage\n")
    before = results_pages.snapshot()
    (derived / "claims.md").write_text("| claim | holds |\n|---|---|\n| C1 | True |\n")
    (derived / "table.txt").write_text("run default:\nvariant  loss\n    zen   5.2\n")
    (paths.figures_dir() / "fig2b.png").write_bytes(b"\x89PNG fake")
    (derived / "table.parquet").write_bytes(b"PAR1\xa0\x00")  # binary: named, not shown
    assert [f.name for f in results_pages.figures_since(before)] == ["fig2b.png"]  # what a benchmark drew
    made = ["claims.md", "fig2b.png", "table.parquet", "table.txt"]
    assert results_pages.record("characterize", before, seconds=83.4) == made
    assert json.loads((derived / "outputs.json").read_text())["characterize"]["files"] == made
    out = tmp_path / "results"
    pages = results_pages.write_pages(out)
    assert [p.name for p in pages] == [f"{s}.md" for s in results_pages.TITLES]
    page = (out / "characterize.md").read_text()
    assert page.startswith(results_pages.GENERATED) and "in 1 min 23 s on " in page
    assert "| C1 | True |" in page and "```text\nrun default:\n```" in page  # a text file's prose stays text
    assert "| variant | loss |\n|---|---:|\n| zen | 5.2 |" in page  # and its table is a table
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
    (tmp_path / "drawn.png").write_bytes(b"\x89PNG fake")
    page = results_pages.write_bench_page(
        "fsdp", "stock vs Zen", ["ranks=4"], result, out=tmp_path, seconds=61.04, figures=[tmp_path / "drawn.png"]
    )
    text = page.read_text()
    assert "![drawn.png](figures/drawn.png)" in text and (tmp_path / "figures" / "drawn.png").exists()
    assert "## `zen-analysis bench fsdp --set ranks=4`" in text and "stock vs Zen." in text and "(61 s)" in text
    assert "| zen | 0.75 |" in text and "| `ratio` | 2 |" in text and "```" not in text  # no JSON, no text frame
    index = results_pages.write_bench_index({"fsdp": ("stock vs Zen", True), "hashing": ("h", False)}, out=tmp_path)
    assert "| [`fsdp`](fsdp.md) | stock vs Zen | the network lab (root) | a run |" in index.read_text()
    assert "| [`hashing`](hashing.md) | h | loopback (`make bench`) | not run yet |" in index.read_text()
    assert "`zen-analysis bench hashing` writes this page" in (tmp_path / "hashing.md").read_text()


def test_a_benchmark_page_keeps_each_command_and_quotes_a_headline_as_its_range(tmp_path):
    import pandas as pd

    def run(overrides, zen_s, lead):
        result = {"table": pd.DataFrame({"variant": ["zen"], "step_s": [zen_s]})}
        headline = {"Zen vs stock (x)": lead, "no baseline (x)": float("nan")}
        return results_pages.write_bench_page("ddp", "d", overrides, result, out=tmp_path, headline=headline)

    for zen_s, lead in [(0.5, 2.16), (0.4, 2.51), (0.7, 1.9), (0.6, 2.3)]:  # four runs of one command
        run(["ranks=16"], zen_s, lead)
    text = run(["ranks=4"], 0.25, 1.03).read_text()  # another command adds a section
    sections = text.split("## `zen-analysis bench ddp ")
    assert len(sections) == 3 and sections[1].startswith("--set ranks=16`") and sections[2].startswith("--set ranks=4`")
    assert "3 runs:" in sections[1] and "| Zen vs stock (x) | 2.3 | 1.9-2.51 (3 runs) |" in sections[1]  # last three
    assert "| zen | 0.6 |" in sections[1] and "| zen | 0.7 |" not in text  # the newest run's tables only
    assert "| Zen vs stock (x) | 1.03 | one run |" in sections[2] and "no baseline" not in text
    runs = json.loads((tmp_path / "ddp.runs.json").read_text())["runs"]
    assert [bool(r["values"]) for r in runs] == [False, False, True, True]


def test_the_lab_benchmarks_headlines_are_their_ratios_to_stock():
    import pandas as pd

    from zen_experiments import benchmarks, headlines

    named = [b.headline for b in benchmarks.BENCHMARKS.values() if b.headline]
    assert len(named) == 6 and all(callable(benchmarks._function(h)) for h in named)
    lab = pd.DataFrame(
        {
            "ranks": [16, 16],
            "scheme": ["allreduce", "zen"],
            "measured_s": [1.0, 0.4],
            "modelled_s": [0.9, 0.5],
            "ratio": [0.9, 1.25],
        }
    )
    assert headlines.lab_check({"lab_check": lab}) == pytest.approx(
        {
            "Zen vs all-reduce step, measured, 16 ranks (x)": 2.5,
            "Zen vs all-reduce step, modelled, 16 ranks (x)": 1.8,
            "largest model / measured - 1, 16 ranks": 0.25,
        }
    )

    ddp = pd.DataFrame(
        {
            "network": ["1 Gbit/s"] * 4,
            "variant": ["stock", "stock-sparse", "natural", "natural-sparse"],
            "step_s_median": [2.0, 0.5, 0.8, 0.4],
        }
    )
    assert headlines.ddp({"ddp": ddp}) == {
        "natural vs stock sparse=True, 1 Gbit/s (x)": 0.625,
        "natural-sparse vs stock sparse=True, 1 Gbit/s (x)": 1.25,
    }
    assert headlines.ddp({"ddp": ddp[ddp.variant != "stock-sparse"]}) == {}  # no baseline, no headline
    exchange = pd.DataFrame(
        {"ranks": [16, 16], "bandwidth_gbps": [1.0, 1.0], "scheme": ["stock", "zen"], "lead_vs_stock": [1.0, 2.2]}
    )
    assert headlines.exchange({"exchange": exchange}) == {"Zen vs stock sparse, 16 ranks, 1 Gbit/s (x)": 2.2}
    contiguous = pd.DataFrame({"ranks": [16], "bandwidth_gbps": [1.0], "scheme": ["sparse_ps"], "lead_vs_stock": [1.1]})
    assert headlines.exchange({"exchange": pd.concat([exchange, contiguous])}) == {
        "Zen vs stock sparse, 16 ranks, 1 Gbit/s (x)": 2.2,
        "Zen vs contiguous rows, 16 ranks, 1 Gbit/s (x)": 2.0,
    }
    fsdp = pd.DataFrame(
        {"ranks": [8, 8], "variant": ["stock", "zen"], "step_speedup": [1.0, 1.5], "embed_rs_speedup": [1.0, 25.0]}
    )
    assert headlines.fsdp(fsdp) == {
        "zen step vs stock, 8 ranks (x)": 1.5,
        "zen embedding reduce-scatter vs stock, 8 ranks (x)": 25.0,
    }


def test_an_only_run_on_a_fresh_data_root_leaves_the_other_stages_pages_and_figures(tmp_path, monkeypatch):
    """``zen-analysis reproduce --only paper`` where no other stage ran: its page is written; the committed pages
    and figures of the stages that did not run here stay as they were."""
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("ZEN_ANALYSIS_FIGURES", str(tmp_path / "figures"))
    (paths.derived_dir() / "reproduce").mkdir(parents=True)
    paths.figures_dir().mkdir(parents=True)
    out = tmp_path / "results"
    (out / "figures").mkdir(parents=True)
    (out / "train.md").write_text("the committed train page\n")
    (out / "figures" / "fig2b.png").write_bytes(b"\x89PNG committed")
    before = results_pages.snapshot()
    (paths.derived_dir() / "reproduce" / "paper.txt").write_text("workload  speedup\n")
    results_pages.record("paper", before, seconds=12.0)
    written = {p.name for p in results_pages.write_pages(out)}
    assert "paper.md" in written and "train.md" not in written
    assert (out / "train.md").read_text() == "the committed train page\n"
    assert (out / "figures" / "fig2b.png").exists()
    assert "Not run yet" in (out / "scale.md").read_text()  # a stage without a page gets one


def test_the_committed_benchmark_pages_are_what_their_stored_runs_render(tmp_path):
    """Every page under ``docs/results/bench/`` is its ``runs.json`` rendered by today's code (a change to how pages
    are drawn comes with ``benchmarks.write_pages()``), and none prints JSON or a text frame."""
    import shutil

    from zen_experiments import benchmarks

    committed = paths.REPO_ROOT / "docs" / "results" / "bench"
    for stored in committed.glob("*.runs.json"):
        shutil.copy(stored, tmp_path / stored.name)
    for page in benchmarks.write_pages(tmp_path):
        text = page.read_text()
        assert text == (committed / page.name).read_text(), f"{page.name}: run benchmarks.write_pages()"
        assert "```json" not in text and "\\n" not in text, page.name
