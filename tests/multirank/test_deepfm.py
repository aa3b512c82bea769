"""``deepfm-smoke`` on 2 gloo ranks: the CTR data reaches the model, training and the capture; Zen syncs the table
exactly as dense all-reduce does; the sparse table with the lazy row update trains; the capture characterizes by row."""

import copy

import pytest
import torch

from zen_analysis import recipes
from zen_analysis.runs.launch import launch
from zen_analysis.sparsity.characterize import characterize, load_tables


def _run(name: str, **overrides):
    cfg = recipes.deepfm_smoke()
    cfg.run_id = f"deepfm-{name}"
    for key, value in overrides.items():
        section, field = key.split("__")
        setattr(getattr(cfg, section), field, value)
    cfg.validate()
    return cfg, launch(copy.deepcopy(cfg), progress=False, echo=False)


@pytest.mark.smoke
def test_deepfm_smoke_trains_zen_matches_all_reduce_and_the_table_characterizes_by_row():
    cfg, dense = _run("allreduce", sync__method="dense")
    _, zen = _run("zen", sync__method="natural", sync__scheme="zen")
    assert cfg.dist.num_ranks == 2
    loss_dense, loss_zen = (torch.tensor(r.metrics()["loss"].to_numpy()) for r in (dense, zen))
    assert len(loss_dense) == cfg.train.num_steps and loss_dense[-1] < loss_dense[0] - 0.01  # it trains
    torch.testing.assert_close(loss_zen, loss_dense, rtol=0, atol=1e-6)
    assert (zen.metrics()["sparse_bytes_sent_rank0"] > 0).all()
    m = dense.traces().manifest
    rows, width = m["corpus"]["vocab_size"], cfg.model.hidden_size + 1
    assert m["finished"] and m["corpus"]["corpus_name"] == "criteo-synth" and m["corpus"]["num_fields"] == 26
    assert m["tensors"] == {"embed.weight": {"kind": "natural", "shape": [rows, width], "numel": rows * width}}
    characterize(dense.run_id, progress=False)
    tables = load_tables(dense.run_id, characterize_if_missing=False)
    density = tables["density"]
    assert set(density["granularity"]) == {"row"} and (density["numel"] == rows).all()
    assert len(density) == cfg.num_workers * len(range(0, cfg.train.num_steps, cfg.capture.every))
    assert ((density["nnz"] > 0) & (density["nnz"] <= cfg.train.batch_per_worker * 26)).all()
    skew = tables["skew"]
    first = skew[(skew["num_partitions"] == 8) & (skew["worker"] >= 0)]["shares"].map(lambda s: s[0])
    assert len(first) == len(density) and (first > 0.5).all()  # the first eighth holds most of each worker's rows


def test_deepfm_smoke_with_a_sparse_table_and_the_lazy_update_trains():
    _, result = _run(
        "sparse-lazy",
        model__sparse_embedding=True,
        train__embedding_update="lazy",
        capture__enabled=False,
        sync__method="natural",
        sync__scheme="zen",
    )
    loss = result.metrics()["loss"].to_numpy()
    assert loss[-1] < loss[0] - 0.01
    digests = {s["param_sha256"] for s in result.results.values()}
    assert len(digests) == 1  # both ranks hold the same table after every lazy row step
