"""Zen in real data-parallel training on 4 gloo ranks: the same per-step loss and final parameters as dense
all-reduce (natural sparsity: only the embedding goes through Zen; tolerance for summation order only)."""

import copy

import pytest
import torch

from zen_analysis import paths, recipes
from zen_analysis.dist.launch import launch


def _train(scheme: str, steps: int = 30):
    cfg = recipes.smoke()
    cfg.name = f"parity-{scheme}"
    cfg.run_id = f"parity-{scheme}"
    cfg.dist.num_ranks = 4
    cfg.train.workers_per_rank = 1
    cfg.train.num_steps = steps
    cfg.train.save_params = True
    cfg.capture.enabled = False
    cfg.sync.scheme = scheme
    result = launch(copy.deepcopy(cfg), echo=False, progress=False)
    return result.metrics(), torch.load(paths.run_dir(cfg.run_id) / "params.pt")


@pytest.fixture(scope="module")
def dense():
    return _train("allreduce")


@pytest.mark.parametrize("scheme", ["zen", "agsparse"])
def test_sparse_embedding_sync_matches_dense_all_reduce(dense, scheme):
    m_dense, p_dense = dense
    m, p = _train(scheme)
    assert len(m) == 30
    torch.testing.assert_close(torch.tensor(m["loss"].values), torch.tensor(m_dense["loss"].values), rtol=1e-4, atol=1e-5)
    for name, value in p_dense.items():
        torch.testing.assert_close(p[name], value, rtol=1e-3, atol=1e-5, msg=f"{name} after 30 steps")
    assert (m["sparse_bytes_sent_rank0"] > 0).all()
    emb = p_dense["model.embed_tokens.weight"]
    assert m["sparse_bytes_sent_rank0"].iloc[-1] < emb.numel() * 4  # well under one dense copy of the embedding
