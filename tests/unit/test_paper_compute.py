"""The paper's LSTM and DeepFM step, timed (a CPU rehearsal here)."""

import json

import numpy as np
import pytest
import torch

from zen_analysis import recipes
from zen_analysis.experiments.paper_compute import (
    SHAPES,
    main,
    measured_compute,
    param_counts,
    step_times,
)
from zen_analysis.experiments.paper_scale import PAPER_SIZE


@pytest.fixture(scope="module")
def rehearsal():
    return step_times(device="cpu", size="rehearse", repeats=2, warmup=1)


def test_a_rehearsal_times_every_phase_of_both_workloads(rehearsal):
    df = rehearsal.set_index("workload")
    assert list(df.index) == ["lstm", "deepfm"]
    phases = df[["forward_s", "backward_s", "optimizer_s", "step_s"]].to_numpy()
    assert np.isfinite(phases).all() and (phases > 0).all(), df
    assert df["step_s"].to_numpy() == pytest.approx(df[["forward_s", "backward_s", "optimizer_s"]].sum(1).to_numpy())
    # the counts of the model timed are the meta-device counts of the same shapes
    assert param_counts("rehearse").set_index("workload").equals(df[["dense_params", "table_rows", "table_dim"]])
    lstm, deepfm = SHAPES["rehearse"]["lstm"], SHAPES["rehearse"]["deepfm"]
    assert (df.loc["lstm", "batch"], df.loc["lstm", "seq_len"]) == (lstm.batch, lstm.seq_len)
    assert (df.loc["deepfm", "batch"], df.loc["deepfm", "seq_len"], df.loc["deepfm", "table_dim"]) == (
        deepfm.batch,
        1,
        deepfm.dim + 1,
    )
    assert df["optimizer"].str.startswith("AdamW").all() and (df["device"] == "cpu").all()
    assert (df["dtype"] == "float32").all() and df["peak_mem_bytes"].isna().all()
    assert np.isfinite(df["loss"]).all()


def test_the_paper_sized_models_land_on_table_1_without_allocating_them():
    counts = param_counts("paper").set_index("workload")
    for workload in ("lstm", "deepfm"):
        row, paper = counts.loc[workload], PAPER_SIZE[workload]
        assert row["dense_params"] == pytest.approx(paper["dense"], rel=0.03), (workload, row["dense_params"])
        assert row["table_rows"] * row["table_dim"] == pytest.approx(paper["table"], rel=0.01), workload
    assert (counts.loc["lstm", "table_rows"], counts.loc["lstm", "table_dim"]) == (793_471, 512)
    assert SHAPES["paper"]["lstm"].batch == 128 and SHAPES["paper"]["deepfm"].batch == 1024
    assert SHAPES["paper"]["lstm"].seq_len == recipes.lstm_words().train.seq_len
    with pytest.raises(ValueError, match="size"):
        param_counts("huge")


def test_main_writes_the_table_the_reader_reads(tmp_path):
    out = tmp_path / "h100-run"
    main(["--device", "cpu", "--size", "rehearse", "--repeats", "1", "--warmup", "0", "--out", str(out)])
    (out / "env.json").write_text(json.dumps({"gpu_name": "NVIDIA H100 80GB HBM3", "date": "2026-01-02"}))
    got = measured_compute(tmp_path)
    assert list(got["workload"]) == ["lstm", "deepfm"] and (got["folder"] == "h100-run").all()
    assert (got["gpu_name"] == "NVIDIA H100 80GB HBM3").all() and (got["torch"] == torch.__version__).all()
    assert measured_compute(tmp_path / "none").empty
