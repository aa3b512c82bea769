"""A results page shows a table a reader can take in: its headline columns (which row, the ratio, the paper's number
beside it) first and the full table collapsed when the whole would not fit the content column; never a text frame
cut off at the page's edge, and never JSON or escaped strings."""

import pandas as pd

from zen_experiments import page_tables


def _wide() -> pd.DataFrame:
    """A table like ``bench paper``'s: two identifying columns, 14 measurements, a long remark; the ratio and the
    paper's number in the middle."""
    df = pd.DataFrame({"workload": ["lstm", "lstm", "opt"], "scheme": ["allreduce", "zen", "zen"]})
    for i in range(6):
        df[f"phase{i}_s"] = [0.0125 * (i + 1), 0.0061, 0.25]
    df["speedup"] = [1.0, 2.05, 4.3]
    df["paper"] = [float("nan"), 3.1, 2.1]
    for i in range(6):
        df[f"samples{i}_per_s"] = [181066.0, 232699.0, 3677.5]
    df["reason"] = ["the baseline: 1 by definition", "below the paper: " + "x" * 150, "above the paper"]
    return df


def test_a_wide_table_shows_its_headline_columns_first_and_the_rest_collapsed():
    lines = page_tables.render(page_tables.items({"table": _wide()}))
    text = "\n".join(lines)
    head = lines[lines.index("### `table`") + 2]
    assert head == "| workload | scheme | speedup | paper |"  # which row, then the ratio and the paper's beside it
    assert "| lstm | zen | 2.05 | 3.1 |" in text and "| lstm | allreduce | 1 |  |" in text  # NaN: an empty cell
    details = text[text.index('<details markdown="1">') :]
    assert "<summary>All 17 columns</summary>" in details and details.rstrip().endswith("</details>")
    assert "| workload | scheme | phase0_s |" in details and "| 232,699 |" in details  # the full table, inside
    assert "```" not in text and '"' not in text.replace('markdown="1"', "")  # no JSON, no text frame


def test_a_benchmark_names_its_headline_columns_and_a_narrow_table_shows_whole():
    tab = page_tables.table(_wide())
    assert page_tables.headline(tab, ("scheme", "workload", "paper", "speedup")) == [
        "scheme",
        "workload",
        "paper",
        "speedup",
    ]
    assert page_tables.headline(tab, ("no_such_column",)) == ["workload", "scheme", "speedup", "paper"]  # default
    narrow = page_tables.table_lines(page_tables.table(pd.DataFrame({"n": [8, 16], "lead": [1.5, 2.25]})))
    assert narrow == ["| n | lead |", "|---:|---:|", "| 8 | 1.5 |", "| 16 | 2.25 |", ""]


def test_lists_numbers_and_paths_render_as_tables_and_text():
    crossover = [pd.DataFrame({"n": [8, 16], "crossover_gbps": [float("nan"), 59.8]}).assign(run=r) for r in "ab"]
    result = {"per_step_s": 22.9, "path": "data/derived/x.csv", "crossover": crossover, "ok": True}
    text = "\n".join(page_tables.render(page_tables.items(result)))
    assert "| returned | value |" in text and "| `per_step_s` | 22.9 |" in text and "| `ok` | True |" in text
    assert "`data/derived/x.csv`" in text and text.count("| n | crossover_gbps | run |") == 2
    assert "\\n" not in text and "[" not in text and "```" not in text


def test_a_text_frame_reads_back_as_the_table_it_printed():
    df = _wide()[["workload", "scheme", "speedup", "paper", "reason"]].rename(columns={"reason": "paper says"})
    for shown in (df.to_string(), df.to_string(index=False)):  # with pandas' 0, 1, ... index and without
        tab = page_tables.text_frame(shown)
        assert tab is not None and tab["columns"] == list(df.columns)
        assert tab["rows"][1][:4] == ["lstm", "zen", 2.05, 3.1] and tab["rows"][0][3] is None
        assert tab["rows"][0][4] == "the baseline: 1 by definition"  # a text with spaces, one cell
    assert page_tables.text_frame("final loss 5.2282, val loss 5.2643\ncorpus stdlib (31.5 MB)") is None
    pivot = df.pivot_table(index=["workload", "scheme"], values="speedup").unstack()
    assert page_tables.text_frame(pivot.to_string()) is None  # a two-line header: left as text


def test_a_run_stored_as_text_renders_as_tables_too():
    frames = [pd.DataFrame({"n": [8, 16], "zen_leads": ["always", "above"]}).assign(run=r) for r in ("a", "b")]
    body = ["### `table`", "", "```text", _wide().to_string(), "```", "", "### `crossover`", "", "```json"]
    body += [*__import__("json").dumps([f.to_string() for f in frames], indent=1).split("\n"), "```", ""]
    body += ["### `per_step_s`", "", "```json", "22.87378609800362", "```", ""]
    text = "\n".join(page_tables.legacy_body(body))
    assert "| workload | scheme | speedup | paper |" in text and "<details" in text
    assert text.count("| n | zen_leads | run |") == 2 and "22.87" in text
    assert "```" not in text and "\\n" not in text


def test_a_pivot_with_a_multi_level_index_reads_back_with_its_labels_filled_down():
    df = pd.DataFrame({"numel": [4, 4, 32], "density": [0.01, 0.05, 0.01], "zen": [1.5, 2.0, 3.25]})
    pivot = df.assign(what="zen check cost").pivot_table(index=["numel", "density"], columns="what", values="zen")
    tab = page_tables.text_frame(pivot.to_string())
    assert tab == {
        "columns": ["numel", "density", "zen check cost"],
        "rows": [[4, 0.01, 1.5], [4, 0.05, 2.0], [32, 0.01, 3.25]],
    }


def test_a_stage_markdown_table_too_wide_for_the_page_keeps_its_headline_columns():
    wide = page_tables.markdown(list(_wide().columns), page_tables.table(_wide())["rows"])
    lines = page_tables.markdown_lines("\n".join(["Some text.", "", *wide]))
    assert lines[:3] == ["Some text.", "", "| workload | scheme | speedup | paper |"] and "<details" in "\n".join(lines)
