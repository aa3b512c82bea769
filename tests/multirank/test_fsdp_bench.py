"""``zen-analysis bench fsdp`` on loopback at a small size: every variant trains the same steps from the same weights,
Zen's losses equal stock's, its table's reduce-scatter writes less, and the summary's columns come from the steps."""

import pytest

from zen_experiments.bench_fsdp import bench_fsdp


def test_bench_fsdp_compares_stock_and_zen_variants_on_loopback(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path))
    sets = ["ranks=2", "bandwidth=0", "variants=stock,zen,zen-bf16", "recipe=lstm-words-smoke", "vocab=5000"]
    summary = bench_fsdp([*sets, "hidden=16", "heads=2", "layers=1", "seq_len=16", "steps=3", "warmup=1"])
    by = summary.set_index("variant")
    assert list(by.index) == ["stock", "zen", "zen-bf16"]
    assert by.loc["zen", "loss_diff_vs_stock"] == pytest.approx(0.0, abs=1e-6)
    written = by["written_mb_per_rank"]
    assert by.loc["zen", "embed_reduce_scatter_s"] > 0 and written["zen"] < written["stock"]
    assert 1.0 <= by.loc["zen", "busiest_rows_over_mean"] < 2.0
    assert (summary.step_s > 0).all() and (summary.compute_s > 0).all()
    out = tmp_path / "derived" / "fsdp"
    assert (out / "train.txt").exists() and (out / "steps.parquet").exists()
