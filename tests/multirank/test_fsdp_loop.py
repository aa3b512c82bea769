"""The toolkit's loop under FSDP2 (``dist.sharding=fsdp``), launched as a notebook cell launches it: stock FSDP2
trains as DDP does (to float rounding), Zen's reduce-scatter and ``auto``'s choice give stock FSDP2's parameters bit
for bit on 2 ranks (a sum of two is the same either way round), and the capture records what DDP's records: the same
workers, rows and values to the order repeated ids are added in, so the characterization reads it the same."""

import copy

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import zen_analysis.fsdp.training  # noqa: F401  (imported before the fork: ranks inherit it)
from zen_analysis import recipes
from zen_analysis.capture.reader import TraceReader
from zen_analysis.runs.launch import launch
from zen_analysis.sparsity.characterize import load_tables


def _cfg(run_id: str, sharding: str, **sync):
    cfg = recipes.smoke()
    cfg.name = cfg.run_id = run_id
    cfg.dist.sharding = sharding
    cfg.train.num_steps = 3
    cfg.capture.every, cfg.capture.topk_scope = 2, "none"
    cfg.train.save_params = True
    for key, value in sync.items():
        setattr(cfg.sync, key, value)
    return cfg


def _run(cfg):
    return launch(copy.deepcopy(cfg), progress=False, echo=False, overwrite=True)


def test_fsdp2_in_the_loop_trains_as_ddp_and_zen_as_stock_fsdp2():
    ddp = _run(_cfg("loop-ddp", "none"))
    stock = _run(_cfg("loop-fsdp", "fsdp"))
    zen_cfg = _cfg("loop-fsdp-zen", "fsdp", method="natural", scheme="zen")
    zen_cfg.train.export = True
    zen = _run(zen_cfg)
    auto = _run(_cfg("loop-fsdp-auto", "fsdp", method="natural", scheme="auto", planner_every=2))
    losses = {name: r.metrics()["loss"].to_numpy() for name, r in [("ddp", ddp), ("stock", stock), ("zen", zen)]}
    np.testing.assert_allclose(losses["stock"], losses["ddp"], rtol=0, atol=1e-6)
    assert losses["zen"].tolist() == losses["stock"].tolist()
    assert zen.summary["param_sha256"] == stock.summary["param_sha256"] == auto.summary["param_sha256"]
    # gathered whole, the table in the vocabulary's order: stock's parameters, and a model from_pretrained loads
    params = {name: torch.load(r.run_dir / "params.pt") for name, r in [("stock", stock), ("zen", zen)]}
    assert params["zen"].keys() == params["stock"].keys()
    assert all(torch.equal(params["zen"][k], params["stock"][k]) for k in params["stock"])
    loaded = AutoModelForCausalLM.from_pretrained(zen.run_dir / "export")
    assert all(torch.equal(v, params["zen"][k]) for k, v in loaded.state_dict().items() if k in params["zen"])
    # what each rank sent: Zen's rows, not the table; auto chose Zen (a 1024-row table, ~140 rows a rank)
    rows = {name: r.metrics().iloc[-1] for name, r in [("stock", stock), ("zen", zen)]}
    assert rows["zen"]["bytes_sent"] < rows["stock"]["bytes_sent"]
    assert 0 < rows["zen"]["sparse_bytes_sent_rank0"] < 1024 * 64 * 4 / 2
    assert {"all_gather_s", "reduce_scatter_s", "embedding_reduce_scatter_s"} <= set(rows["stock"].index)
    (decisions,) = auto.summary["planner"].values()
    assert [d["choice"] for d in decisions] == ["zen", "zen"] and [d["call"] for d in decisions] == [0, 2]
    assert zen.summary["sync"]["embedding_reduce_scatter"] == "zen" and zen.summary["sync"]["hashed_rows"]
    # the capture: DDP's records, in the vocabulary's order though the table is stored hashed
    got = {(r.step, r.worker): r for r in TraceReader("loop-fsdp-zen").records()}
    want = {(r.step, r.worker): r for r in TraceReader("loop-ddp").records()}
    assert sorted(got) == sorted(want) == [(s, w) for s in (0, 2) for w in range(4)]  # 2 ranks x 2 workers
    for key, r in want.items():
        assert torch.equal(got[key].indices_K, r.indices_K), key
        torch.testing.assert_close(got[key].values_K, r.values_K, rtol=1e-5, atol=1e-7)
    density = {run: load_tables(run)["density"] for run in ("loop-ddp", "loop-fsdp-zen")}
    assert density["loop-ddp"].equals(density["loop-fsdp-zen"])


@pytest.mark.parametrize(
    ("recipe", "token", "position"),
    [
        (recipes.gpt2_smoke, "transformer.wte", "transformer.wpe"),
        (recipes.opt_smoke, "model.decoder.embed_tokens", "model.decoder.embed_positions"),
    ],
)
def test_gpt2_and_opt_under_zen_and_auto_give_stock_fsdp2s_parameters(recipe, token, position):
    """A position table sits in the root unit with the head and final norm: it stays stock FSDP2 and Zen sums the
    token table alone (every rank used to fail with a UnitError on the root unit)."""

    def cfg(run_id, **sync):
        c = _cfg(run_id, "fsdp", **sync)
        fam = recipe()
        c.model, c.capture.topk_tensors = fam.model, fam.capture.topk_tensors
        c.capture.enabled = False
        return c

    arch = recipe().model.arch
    stock = _run(cfg(f"loop-fsdp-{arch}"))
    zen = _run(cfg(f"loop-fsdp-{arch}-zen", method="natural", scheme="zen"))
    auto = _run(cfg(f"loop-fsdp-{arch}-auto", method="natural", scheme="auto", planner_every=2))
    assert zen.summary["param_sha256"] == stock.summary["param_sha256"] == auto.summary["param_sha256"]
    losses = {name: r.metrics()["loss"].tolist() for name, r in [("stock", stock), ("zen", zen), ("auto", auto)]}
    assert losses["zen"] == losses["stock"] == losses["auto"]
    params = torch.load(stock.run_dir / "params.pt")
    assert f"{position}.weight" in params  # the table trained, in the root unit
    sync = zen.summary["sync"]
    assert sync["embedding_reduce_scatter"] == "zen" and sync["hashed_rows"]
    assert sync["embedding_unit"] == token
    assert "(root)" in sync["units"] and position not in sync["units"]
    assert zen.metrics().iloc[-1]["sparse_bytes_sent_rank0"] > 0  # Zen's rows went, not stock's table
    (decisions,) = auto.summary["planner"].values()
    assert [d["choice"] for d in decisions] == ["zen", "zen"]


def test_what_fsdp2_cannot_go_with_is_refused_before_any_rank_starts():
    with pytest.raises(ValueError, match="capture.topk_scope"):
        cfg = _cfg("loop-bad", "fsdp")
        cfg.capture.topk_scope = "bucket"
        cfg.validate()
    with pytest.raises(ValueError, match=r"sync.method=topk .*; sync.scheme=bp_coo"):
        _cfg("loop-bad", "fsdp", method="topk", scheme="bp_coo").validate()
    with pytest.raises(ValueError, match="model.arch=lstm"):
        cfg = _cfg("loop-bad", "fsdp")
        cfg.model.arch = "lstm"
        cfg.validate()
