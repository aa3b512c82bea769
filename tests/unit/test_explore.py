"""The density explorer, driven like a user would, without a browser."""

import numpy as np
import pytest
import torch

from zen_analysis import paths
from zen_analysis.capture.traces import SparseGrad, TraceWriter, write_manifest
from zen_analysis.explore import DensityExplorer, explore_stats
from zen_analysis.sparsity import densification_ratio

R, D, W = 32, 4, 6


def _rows(step, w):
    return torch.tensor(sorted({(3 * w + k * (step + 1)) % R for k in range(5)}))


@pytest.fixture(scope="module")
def run_id():
    rid = "synthetic-explore"
    tdir = paths.trace_dir(rid)
    wr = TraceWriter(tdir, rank=0, run_id=rid, world_size=1, steps_per_shard=4)
    for step in range(2):
        for w in range(W):
            g = torch.zeros(R, D)
            g[_rows(step, w)] = 1.0
            wr.add(SparseGrad.from_dense(g, step=step, worker=w, rank=0, tensor="emb", kind="natural"))
            wr.add(SparseGrad(step, w, 0, "lin", "topk", (8, 8), torch.tensor([w, 10 + w, 63]), torch.ones(3)))
        wr.end_step()
    wr.close()
    tensors = {"emb": {"kind": "natural", "shape": [R, D], "numel": R * D}, "lin": {"kind": "topk", "shape": [8, 8], "numel": 64}}
    write_manifest(tdir, {"run_id": rid, "tensors": tensors})
    return rid


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
