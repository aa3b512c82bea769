"""The natural-sparsity recipes' defaults (``model.sparse_embedding=auto``, ``sync.overlap=auto``) on 2 gloo ranks:
a sparse embedding gradient with AdamW's dense update and the capture on trains as the dense embedding does (the
same losses and parameters up to the order backward sums a row's repeated ids in), and captures the same records."""

import copy

import pytest
import torch

from zen_analysis import paths, recipes
from zen_analysis.runs.launch import launch


def _run(scheme: str, label: str, **switches):
    cfg = recipes.lstm_words_smoke()
    cfg.run_id = f"defaults-{scheme}-{label}"
    cfg.train.num_steps = 4
    cfg.train.save_params = True
    cfg.sync.method, cfg.sync.scheme = ("dense" if scheme == "allreduce" else "natural"), scheme
    for key, value in switches.items():
        section, name = key.split("__")
        setattr(getattr(cfg, section), name, value)
    cfg.validate()
    result = launch(copy.deepcopy(cfg), progress=False, echo=False)
    records = {(r.step, r.worker, r.tensor): r for r in result.traces().records()}
    return result, torch.load(paths.run_dir(cfg.run_id) / "params.pt"), records


@pytest.mark.parametrize("scheme", ["zen", "allreduce"])
def test_the_recipe_default_trains_and_captures_as_the_dense_embedding(scheme):
    dense, p_dense, r_dense = _run(scheme, "off", model__sparse_embedding=False, sync__overlap=False)
    auto, p_auto, r_auto = _run(scheme, "auto")  # the recipe as it comes
    assert auto.summary["auto"] == {"model.sparse_embedding": True, "sync.overlap": True}
    assert "auto" not in dense.summary
    assert auto.traces().manifest["config"]["model"]["sparse_embedding"] == "auto"  # stored as given
    m_dense, m_auto = dense.metrics(), auto.metrics()
    assert "overlap_s" in m_auto and "overlap_s" not in m_dense
    torch.testing.assert_close(
        torch.tensor(m_auto["loss"].values), torch.tensor(m_dense["loss"].values), rtol=1e-6, atol=1e-6
    )
    for name, value in p_dense.items():
        torch.testing.assert_close(p_auto[name], value, rtol=1e-5, atol=1e-6, msg=name)
    assert len({s["param_sha256"] for s in auto.results.values()}) == 1  # every rank holds the same model
    assert r_auto.keys() == r_dense.keys() and any(t == "embed.weight" for _, _, t in r_dense)
    for key, rec in r_dense.items():  # natural (the embedding) and the LSTM matrices' top-k alike
        assert torch.equal(r_auto[key].indices_K, rec.indices_K), key
        torch.testing.assert_close(r_auto[key].values_K, rec.values_K, rtol=1e-5, atol=1e-9, msg=str(key))
