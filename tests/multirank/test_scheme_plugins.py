"""A scheme from outside the package (defined here, in a test file) is a name like the built-ins' once registered:
the config takes it, the registry, the replays, the planner and the paper-scale table list it, and the contract check
passes it; a planted lossy one is refused with a message saying what broke; an unknown name gets a "did you mean";
an entry point of an installed distribution is read without being imported, and a broken one only warns."""

from __future__ import annotations

import importlib.metadata
import sys
import warnings

import pytest
import torch

from zen_analysis import recipes
from zen_analysis.comm.planner import Planner
from zen_analysis.comm.scheme_contract import SchemeContractError, check_scheme
from zen_analysis.comm.schemes import SCHEMES, CommScheme, build_scheme, register_scheme, unregister_scheme
from zen_analysis.comm.schemes.base import coo_of
from zen_analysis.config import ExperimentConfig, SyncConfig, apply_overrides
from zen_analysis.config.plugins import scheme_names
from zen_analysis.evaluation.replay import compare
from zen_analysis.pricing.topology import PRESETS
from zen_analysis.train.registry import build_sync
from zen_analysis.wire.coo import coo_words, index_bytes, pack_coo, sum_by_index, unpack_coo


class GatherCOO(CommScheme):
    """Every rank's COO all-gathered in one message, summed in rank order (so every rank has the same bits)."""

    name = "gather_coo"
    folds_agreement = True  # its first collective is a count exchange

    def _run(self, x_N, ex):
        idx_K, val_K = coo_of(x_N)
        N = x_N.numel()
        with ex.phase("gather"):
            counts_W = ex.all_gather_counts(idx_K.numel())
            got = ex.all_gather_v(pack_coo(idx_K, val_K, N), counts_W * coo_words(N, x_N.dtype))
        u_idx, sums = sum_by_index(*unpack_coo(got, N, x_N.dtype))
        x_N[u_idx] = sums  # the union holds this rank's non-zeros: the rest is zero already

    def _sum_rows(self, rows_K, values_KD, num_rows, ex):
        R, D = num_rows, values_KD.shape[1]
        with ex.phase("gather"):
            counts_W = ex.all_gather_counts(rows_K.numel())
            got = ex.all_gather_v(pack_coo(rows_K, values_KD, R), counts_W * coo_words(R, values_KD.dtype, D))
        return sum_by_index(*unpack_coo(got, R, values_KD.dtype, D))

    def _traffic(self, sets, numel, t):
        t.counts("gather")
        t.all_gather("gather", [s.numel() * (index_bytes(numel) + t.value_bytes) for s in sets])


class DropsOne(GatherCOO):
    """Planted: loses the sum's last non-zero (on every rank alike, so only the comparison with all_reduce sees it)."""

    name = "drops_one"

    def _run(self, x_N, ex):
        super()._run(x_N, ex)
        nz = torch.nonzero(x_N).view(-1)
        if nz.numel():
            x_N[nz[-1]] = 0


@pytest.fixture
def gather_coo():
    register_scheme(GatherCOO)
    yield GatherCOO.name
    unregister_scheme(GatherCOO.name)


def test_a_registered_scheme_is_a_name_like_the_builtins(gather_coo):
    cfg = apply_overrides(recipes.smoke(), ["sync.method=natural", f"sync.scheme={gather_coo}"])
    assert cfg.sync.scheme == gather_coo and gather_coo in scheme_names()
    assert SCHEMES[gather_coo] is GatherCOO and isinstance(build_scheme(gather_coo, seed=3), GatherCOO)
    assert gather_coo in Planner().candidates  # the planner reads the registry when it is made
    assert isinstance(build_sync(cfg.resolved().sync).scheme, GatherCOO)  # what the loop trains with
    register_scheme(GatherCOO)  # the same class again (a module imported twice): nothing happens
    unregister_scheme(gather_coo)
    with pytest.raises(ValueError, match="gather_coo' is unknown"):
        apply_overrides(recipes.smoke(), ["sync.method=natural", "sync.scheme=gather_coo"])
    register_scheme(GatherCOO)


def test_replay_measures_it_beside_zen_and_checks_it_lossless(gather_coo):
    sets = [torch.arange(r, 600, 3 + r) for r in range(2)]
    df = compare(sets, 600, repeats=1, topology=PRESETS["paper-tcp25"], schemes=[gather_coo, "zen"])
    assert set(df["scheme"]) == {gather_coo, "zen"}
    assert df.groupby("scheme")["lossless"].all().all()


def test_it_passes_the_contract_and_a_lossy_one_is_refused_saying_what_broke(gather_coo):
    report = check_scheme(gather_coo, ranks=(2, 3))
    assert report["rows"] and report["cases"] > 0
    with pytest.raises(SchemeContractError) as caught:
        check_scheme(DropsOne, ranks=(2,))
    message = str(caught.value)
    assert "breaks the contract on 2 ranks" in message and "differ from dist.all_reduce" in message
    assert f"check_scheme({DropsOne.__module__}.DropsOne, ranks=(2,), seed=0)" in message


def _random_rows() -> list[torch.Tensor]:
    """4 workers' rows of lstm-words-smoke's 4096-row table, 64 draws each."""
    return [torch.unique(torch.randint(0, 4096, (64,), generator=torch.Generator().manual_seed(w))) for w in range(4)]


def test_the_paper_scale_table_prices_it(gather_coo, lstm_smoke_trace):
    from zen_analysis.paper.scale import paper_throughput

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a store written without its shard list says so
        df = paper_throughput(lstm_smoke_trace("plugin-paper-scale", _random_rows()), machines=2).set_index("scheme")
    assert gather_coo in df.index and df.loc[gather_coo, "sparse_comm_s"] > 0


def test_registration_refuses_what_is_not_a_scheme_of_its_own():
    class Nameless(GatherCOO):
        pass

    class Half(CommScheme):
        name = "half"

        def _run(self, x_N, ex): ...

    class Zen(GatherCOO):
        name = "zen"

    class Auto(GatherCOO):
        name = "auto"

    for bad, error, match in [
        (int, TypeError, "subclass of CommScheme"),
        (Half, TypeError, "does not implement _traffic"),
        (Nameless, ValueError, "inherits 'gather_coo'"),
        (Zen, ValueError, "'zen' is a built-in scheme.*replace=True"),
        (Auto, ValueError, "reserved"),
    ]:
        with pytest.raises(error, match=match):
            register_scheme(bad)
    register_scheme(Zen, replace=True)
    assert SCHEMES["zen"] is Zen
    unregister_scheme("zen")  # a replaced built-in is the built-in again
    assert SCHEMES["zen"].__module__ == "zen_analysis.comm.schemes.zen"


def test_an_unknown_name_is_refused_with_the_closest_ones():
    with pytest.raises(ValueError, match=r"sync.scheme='agsprase' is unknown \(did you mean 'agsparse'\?\)"):
        apply_overrides(recipes.smoke(), ["sync.method=natural", "sync.scheme=agsprase"])
    with pytest.raises(ValueError, match=r"unknown scheme 'zne' \(did you mean 'zen'"):
        build_scheme("zne")


def test_sync_plugins_imports_a_file_that_registers_a_scheme(tmp_path):
    path = tmp_path / "plugin_gather.py"
    path.write_text(
        "from zen_analysis.comm.schemes import register_scheme\n"
        "from zen_analysis.comm.schemes.agsparse import AGSparse\n\n\n"
        "class FromFile(AGSparse):\n    name = 'from_file'\n\n\nregister_scheme(FromFile)\n"
    )
    try:
        cfg = SyncConfig(method="natural", scheme="from_file", plugins=(str(path),))
        again = ExperimentConfig.from_json(ExperimentConfig(sync=cfg).to_json())  # as every rank reads it
        assert again.sync.plugins == (str(path),) and SCHEMES["from_file"].__name__ == "FromFile"
        with pytest.raises(ValueError, match="sync.plugins: 'no_such_module_xyz' could not be imported"):
            SyncConfig(method="natural", scheme="zen", plugins=("no_such_module_xyz",))
    finally:
        unregister_scheme("from_file")
        sys.modules.pop("plugin_gather", None)


class _EntryPoint:
    """What ``importlib.metadata.entry_points(group=...)`` yields, as an installed distribution would declare it."""

    def __init__(self, name, value, load):
        self.name, self.value, self._load = name, value, load

    def load(self):
        return self._load()


def test_entry_points_are_named_to_the_config_unimported_and_loaded_on_first_use(monkeypatch):
    loaded = []

    def good():
        loaded.append("ep_gather")
        return type("EpGather", (GatherCOO,), {"name": "ep_gather"})

    def broken():
        raise ImportError("No module named 'their_pkg'")

    eps = [_EntryPoint("ep_gather", "my_pkg.schemes:EpGather", good), _EntryPoint("bad", "their_pkg:X", broken)]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: eps if group else [])
    monkeypatch.setattr(SCHEMES, "_loaded", False)  # as in a fresh process
    cfg = SyncConfig(method="natural", scheme="ep_gather")  # the name alone, from the metadata
    assert cfg.scheme == "ep_gather" and not loaded
    try:
        with pytest.warns(RuntimeWarning, match=r"entry point bad = 'their_pkg:X'.*not loaded: ImportError"):
            assert "ep_gather" in SCHEMES
        assert loaded == ["ep_gather"] and "bad" not in SCHEMES
    finally:
        unregister_scheme("ep_gather")
