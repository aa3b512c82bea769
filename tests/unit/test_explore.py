"""The density explorer, driven like a user would, without a browser."""

import numpy as np
import pytest
import torch

from zen_analysis import paths
from zen_analysis.capture.traces import SparseGrad, TraceWriter, write_manifest
from zen_analysis.interface.explore import DensityExplorer, explore_stats
from zen_analysis.sparsity import densification_ratio

R, D, W = 32, 4, 6


def _rows(step, w):
    return torch.tensor(sorted({(3 * w + k * (step + 1)) % R for k in range(5)}))


def _write(rid, steps, workers):
    tdir = paths.trace_dir(rid)
    wr = TraceWriter(tdir, rank=0, run_id=rid, world_size=1, steps_per_shard=4)
    for step in steps:
        for w in range(workers):
            g = torch.zeros(R, D)
            g[_rows(step, w)] = 1.0
            wr.add(SparseGrad.from_dense(g, step=step, worker=w, rank=0, tensor="emb", kind="natural"))
            wr.add(
                SparseGrad(
                    step, w, 0, "lin", "topk", (8, 8), torch.tensor(sorted({w % 60, (10 + w) % 60, 63})), torch.ones(3)
                )
            )
        wr.end_step()
    wr.close()
    tensors = {
        "emb": {"kind": "natural", "shape": [R, D], "numel": R * D},
        "lin": {"kind": "topk", "shape": [8, 8], "numel": 64},
    }
    write_manifest(tdir, {"run_id": rid, "tensors": tensors})
    return rid


@pytest.fixture(scope="module")
def run_id():
    return _write("synthetic-explore", range(2), W)


@pytest.fixture(scope="module")
def other_run():
    return _write("synthetic-explore-b", (0, 5, 10), 200)


def test_stats_follow_the_definitions(run_id):
    s = explore_stats(run_id, "emb", 1, 4, 8, "row")
    assert s["workers"] == [0, 1, 2, 3] and s["numel"] == R
    assert s["shares"].shape == (4, 8) and np.allclose(s["shares"].sum(1), 1)
    assert s["gamma_n"] == [1, 2, 4]
    assert s["gamma"][-1] == pytest.approx(densification_ratio([_rows(1, w) for w in range(4)]))
    assert len(s["overlaps"]) == 6
    assert s["density_map"].shape == (5, 128)


def test_widget_callbacks_recompute_in_place(run_id):
    ex = DensityExplorer(run_id)
    assert ex.controls["num_workers"].value == W and ex.stats["workers"] == list(range(W))
    n0 = ex.num_updates
    ex.controls["num_workers"].value = 3  # what dragging the slider does
    assert ex.num_updates == n0 + 1 and ex.stats["workers"] == [0, 1, 2]
    ex.controls["num_partitions"].value = 4
    assert ex.stats["shares"].shape == (3, 4)
    ex.controls["granularity"].value = "element"
    assert ex.stats["numel"] == R * D
    ex.controls["tensor"].value = "lin"
    assert list(ex.controls["granularity"].options) == ["element"] and ex.stats["numel"] == 64
    ex.controls["step"].value = 1
    assert ex.figure is not None and ex.num_updates > n0 + 3


def test_the_summary_row_is_what_the_plots_show(run_id, other_run):
    ex = DensityExplorer(run_id)
    ex.controls["num_workers"].value = 4
    row = ex.summary()
    s = explore_stats(run_id, "emb", 0, 4, 8, "row")
    assert row["run"] == run_id and row["tensor"] == "emb" and row["step"] == 0 and row["workers"] == 4
    assert row["density (median)"] == pytest.approx(np.median([_rows(0, w).numel() / R for w in range(4)]))
    assert row["gamma"] == pytest.approx(densification_ratio([_rows(0, w) for w in range(4)]))
    assert row["partition 1 of 8"] == pytest.approx(s["shares"][:, 0].mean())
    assert row["overlap (mean)"] == pytest.approx(np.nanmean(s["overlaps"]))
    ex.controls["run"].value = other_run  # the other run's row, side by side
    assert ex.summary()["run"] == other_run and ex.summary()["workers"] == 200


def _title_matches(ex):
    c = {k: v.value for k, v in ex.controls.items()}
    expected = (
        f"{c['run']} · {c['tensor']} · step {c['step']} · {min(c['num_workers'], len(ex.stats['workers']))} workers"
    )
    return ex.title.startswith(expected) and ex.title.endswith(c["granularity"])


def test_every_action_redraws_once_and_the_title_matches_the_controls(run_id, other_run):
    ex = DensityExplorer(run_id)
    actions = [
        ("num_workers", 3),
        ("step", 1),
        ("run", other_run),
        ("step", 10),
        ("tensor", "lin"),
        ("run", run_id),  # back on its embedding, by rows again
        ("granularity", "element"),
        ("num_partitions", 16),
    ]
    for name, value in actions:
        before = ex.num_updates
        ex.controls[name].value = value
        assert ex.num_updates == before + 1, f"{name}={value} drew {ex.num_updates - before} times"
        assert _title_matches(ex), (name, value, ex.title)
        assert ex.history[-2].startswith("<b>computing") and ex.history[-1].startswith("ready")
        assert not ex.busy and not any(c.disabled for c in ex.controls.values())
    # a run switch resets what depends on it: its first tensor and step, all its workers
    ex.controls["run"].value = other_run
    assert (
        ex.controls["step"].value == 0
        and ex.controls["num_workers"].value == 200
        and ex.stats["workers"] == list(range(200))
    )


def test_many_workers_are_grouped_on_screen_and_overlap_is_sampled_among_the_first(other_run):
    from zen_analysis.interface.explore import MAX_MAP_ROWS, MAX_OVERLAP_WORKERS, draw

    s = explore_stats(other_run, "emb", 0, 200, 8, "row")
    assert s["map_group"] == 4 and s["density_map"].shape == (50 + 1, 128)  # 200 workers in 50 rows, + the union
    assert s["density_map"].shape[0] <= MAX_MAP_ROWS + 1 and s["shares_map"].shape == (50, 8)
    assert len(s["overlaps"]) == MAX_OVERLAP_WORKERS * (MAX_OVERLAP_WORKERS - 1) // 2
    fig = draw(s)
    density, shares, gamma = fig.axes[:3]  # then the colorbars
    labels = [t.get_text() for t in density.get_yticklabels()]
    assert labels[-1] == "union" and labels[0] == "0-3" and density.get_xlabel() == "token id (embedding row)"
    assert gamma.get_xscale() == "log" and [t.get_text() for t in gamma.get_xticklabels()][-1] == "200"
    assert all(float(t.get_position()[1]).is_integer() for t in shares.get_yticklabels())


def test_the_explorer_opens_on_the_natural_tensor_at_row_granularity():
    """Bucket records (``bucket00``, ...) sort before the embedding's name; the explorer still opens on the
    embedding, by rows, and offers the buckets in the tensor list."""
    rid = "synthetic-explore-buckets"
    tdir = paths.trace_dir(rid)
    wr = TraceWriter(tdir, rank=0, run_id=rid, world_size=1, steps_per_shard=4)
    for w in range(3):
        g = torch.zeros(R, D)
        g[_rows(0, w)] = 1.0
        wr.add(SparseGrad.from_dense(g, step=0, worker=w, rank=0, tensor="model.embed", kind="natural"))
        wr.add(SparseGrad(0, w, 0, "bucket00", "topk", (64,), torch.tensor([w, 40 + w]), torch.ones(2)))
    wr.end_step()
    wr.close()
    write_manifest(
        tdir,
        {
            "run_id": rid,
            "tensors": {
                "model.embed": {"kind": "natural", "shape": [R, D], "numel": R * D},
                "bucket00": {"kind": "topk", "shape": [64], "numel": 64, "params": [["a", 0, 64]]},
            },
        },
    )
    ex = DensityExplorer(rid)
    assert ex.controls["tensor"].value == "model.embed" and ex.controls["granularity"].value == "row"
    assert "bucket00" in ex.controls["tensor"].options
    assert ex.controls["num_workers"].value == 3 and ex.stats["workers"] == [0, 1, 2]  # every worker, not 2
    # a bucket is by elements only; back on the embedding it is by rows again (it stayed on elements before)
    ex.controls["tensor"].value = "bucket00"
    assert ex.controls["granularity"].value == "element"
    ex.controls["tensor"].value = "model.embed"
    assert ex.controls["granularity"].value == "row" and ex.stats["granularity"] == "row"
    # unless elements were what the user chose for the embedding
    ex.controls["granularity"].value = "element"
    ex.controls["tensor"].value = "bucket00"
    ex.controls["tensor"].value = "model.embed"
    assert ex.controls["granularity"].value == "element"
