"""The paper's LSTM and DeepFM step, timed (a CPU rehearsal here), and paper_scale's compute taken from a GPU run's
table where one exists: its seconds exactly, and the assumed peak x utilization where none does."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from zen_analysis import recipes
from zen_analysis.paper.compute import (
    SHAPES,
    main,
    measured_compute,
    measured_step,
    param_counts,
    step_times,
)
from zen_analysis.paper.scale import DEVICES, PAPER_SIZE, paper_throughput

R, D = 4096, 64  # lstm-words-smoke's table


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


@pytest.fixture(scope="module")
def run_id(lstm_smoke_trace):
    """A tiny natural LSTM trace: 4 workers' Zipf-drawn rows (lstm-words-smoke's table and config)."""
    rng = np.random.default_rng(0)
    rows = [torch.from_numpy(np.unique(np.minimum(rng.zipf(1.1, 128) - 1, R - 1))) for _ in range(4)]
    return lstm_smoke_trace("synthetic-paper-compute", rows)


def _gpu_run(root, folder: str, gpu: str, date: str, table: pd.DataFrame, scale: float = 1.0) -> pd.DataFrame:
    """A GPU run's folder as the check commits it: the step table (paper-sized rows, the phases times ``scale``)
    and env.json."""
    df = table.assign(size="paper", batch=128, seq_len=128)
    df[["forward_s", "backward_s", "optimizer_s", "step_s"]] *= scale
    (root / folder).mkdir(parents=True)
    df.to_csv(root / folder / "paper_compute.csv", index=False)
    (root / folder / "env.json").write_text(json.dumps({"gpu_name": gpu, "date": date, "torch": "2.11.0"}))
    return df.set_index("workload")


def test_a_measured_step_replaces_the_assumed_compute(run_id, rehearsal, tmp_path):
    old = _gpu_run(tmp_path, "a", "NVIDIA H100 80GB HBM3", "2026-01-01", rehearsal, scale=3.0)
    new = _gpu_run(tmp_path, "b", "NVIDIA H100 80GB HBM3", "2026-02-01", rehearsal, scale=1000.0)
    _gpu_run(tmp_path, "c", "NVIDIA H200", "2026-03-01", rehearsal, scale=7.0)
    assert measured_step("lstm", "h100", root=tmp_path)["folder"] == "b"  # the newest run on that card
    assert measured_step("lstm", "a100", root=tmp_path) is None
    bare = _gpu_run(tmp_path / "bare", "d", "", "", rehearsal.assign(device="cuda (NVIDIA H100 80GB HBM3)"))
    assert measured_step("deepfm", "h100", root=tmp_path / "bare")["step_s"] == bare.loc["deepfm", "step_s"]
    df = paper_throughput(run_id, machines=2, device="h100", size="paper", measured=tmp_path).set_index("scheme")
    m = new.loc["lstm"]
    scale = 128 * recipes.lstm_words_smoke().train.seq_len / (128 * 128)  # modelled tokens / measured tokens
    want = (m["forward_s"] + m["backward_s"]) * scale + m["optimizer_s"]
    assert scale != 1 and not math.isclose(want, old.loc["lstm", "step_s"])
    assert df["compute_s"].to_list() == pytest.approx([want] * len(df))
    hidden = np.minimum(df["dense_comm_s"], 0.5 * m["backward_s"] * scale)  # overlap 0.5 of the measured backward
    assert df["hidden_s"].to_list() == pytest.approx(hidden.to_list())
    assert df["compute_source"].iloc[0].startswith("measured on NVIDIA H100 80GB HBM3, 2026-02-01")
    assert df.attrs["device"] == df["compute_source"].iloc[0]
    r = rehearsal.set_index("workload").loc["lstm"]  # the H200 run's phases are 7 x the rehearsal's
    h200 = paper_throughput(run_id, machines=2, device="h200", size="paper", measured=tmp_path)
    assert h200["compute_s"].iloc[0] == pytest.approx(
        7 * ((r["forward_s"] + r["backward_s"]) * scale + r["optimizer_s"])
    )
    assert h200["hidden_s"].iloc[0] == pytest.approx(
        min(h200["dense_comm_s"].iloc[0], 0.5 * 7 * r["backward_s"] * scale)
    )


def test_without_a_measurement_the_compute_stays_assumed(run_id, rehearsal, tmp_path):
    assumed = 6 * PAPER_SIZE["lstm"]["dense"] * 128 * recipes.lstm_words_smoke().train.seq_len / DEVICES["h100"].flops
    df = paper_throughput(run_id, machines=2, device="h100", size="paper", measured=tmp_path)
    assert df["compute_s"].iloc[0] == pytest.approx(assumed) and df.attrs["device"].startswith("assumed: H100")
    _gpu_run(tmp_path, "a", "NVIDIA H100 80GB HBM3", "2026-01-01", rehearsal, scale=1000.0)
    # the measurement is of the paper's model: the captured model's size keeps the assumed compute
    trace = paper_throughput(run_id, machines=2, device="h100", size="trace", measured=tmp_path)
    assert trace["compute_source"].iloc[0].startswith("assumed")
    v100 = paper_throughput(run_id, machines=2, device="v100", size="paper", measured=tmp_path)
    assert v100["compute_s"].iloc[0] == pytest.approx(assumed * DEVICES["h100"].flops / DEVICES["v100"].flops)
