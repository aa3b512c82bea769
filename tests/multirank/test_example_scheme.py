"""The worked example outside the package, ``examples/ring_coo.py``, on real gloo ranks: its sum equals
``all_reduce`` bit for bit on integer-valued inputs (elements and rows, float32, int32 and bf16), every rank gets the
same bits, and the bytes and calls it passed to collectives equal its traffic model. The file is imported by path, as
a user's own scheme would be: nothing in the package knows it."""

import copy
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from test_row_sync import CASES, _rows_of, _table

from zen_analysis import recipes
from zen_analysis.comm.scheme_contract import KINDS, check_scheme, index_set
from zen_analysis.comm.schemes import SCHEMES, register_scheme, unregister_scheme
from zen_analysis.config import apply_overrides
from zen_analysis.config.plugins import load_object
from zen_analysis.evaluation.replay import compare
from zen_analysis.pricing.topology import PRESETS
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.runs.launch import launch

EXAMPLE = Path(__file__).parents[2] / "examples" / "ring_coo.py"
NUMELS = (1, 7, 257, 1000)
KEYS = ["rank", "phase", "kind"]


ring_coo = None
"""The example module, once :func:`registered` imported it (the forked ranks inherit it)."""


@pytest.fixture(autouse=True, scope="module")
def registered():
    """The example imported as ``sync.plugins`` imports it (which registers ``ring_coo``), for this module's tests
    only: every other test that walks the registry sees the built-ins alone."""
    global ring_coo
    ring_coo = sys.modules[load_object(f"{EXAMPLE}:RingCOO").__module__]
    register_scheme(ring_coo.RingCOO)  # a second import of a cached module registers nothing: say it again
    yield ring_coo.RingCOO.name
    unregister_scheme(ring_coo.RingCOO.name)


def _sets(kinds: list[str], numel: int, seed: int) -> list[list[int]]:
    """The ranks' index sets, rank ``r`` of kind ``kinds[r]``, drawn from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    sets: list[list[int]] = []
    for rank, kind in enumerate(kinds):
        sets.append(index_set(kind, rank, len(kinds), numel, gen, sets[0] if sets else []))
    return sets


def _element_cases(world: int) -> list[tuple[int, list[list[int]], torch.dtype]]:
    """Every kind of index set on every rank, and the kinds mixed across ranks; a few in int32 and bf16."""
    cases = []
    for seed, numel in enumerate(NUMELS):
        for kind in KINDS:
            cases.append((numel, _sets([kind] * world, numel, seed), torch.float32))
        mixed = _sets([KINDS[(r + seed) % len(KINDS)] for r in range(world)], numel, seed)
        cases.append((numel, mixed, (torch.float32, torch.int32, torch.bfloat16, torch.float32)[seed]))
    return cases


def _body(rank, world, cases):
    out = []
    for case_id, (numel, sets, dtype) in enumerate(cases):
        gen = torch.Generator().manual_seed(case_id * 7 + rank)
        idx = torch.tensor(sets[rank], dtype=torch.long)
        vals = torch.randint(1, 4, (idx.numel(),), generator=gen) * (1 - 2 * torch.randint(0, 2, (idx.numel(),)))
        x = torch.zeros(numel, dtype=dtype)
        x[idx] = vals.to(dtype)  # +-1..3, never 0: the non-zeros are the index set
        ref = x.float() if dtype == torch.bfloat16 else x.clone()
        dist.all_reduce(ref)
        scheme = ring_coo.RingCOO()
        z = x.clone()
        y = scheme.run(z)
        equal = y is z and z.dtype == dtype and torch.equal(z.to(ref.dtype), ref)
        out.append(("elements", case_id, equal, z, scheme.last_measured()))
    for case_id, (R, D, kind) in enumerate(CASES):
        rows, x = _table(kind, rank, R, D, torch.float32)
        ref = x.clone()
        dist.all_reduce(ref)
        scheme = ring_coo.RingCOO()
        u_rows, u_vals = scheme.sum_rows(rows, x[rows], R)
        got = torch.zeros_like(x)
        got[u_rows] = u_vals
        ordered = bool((u_rows[1:] > u_rows[:-1]).all())  # each row once, ascending
        out.append(("rows", case_id, torch.equal(got, ref) and ordered, got, scheme.last_measured()))
    return out


def _model(what: str, case_id: int, world: int, cases) -> pd.DataFrame:
    if what == "elements":
        numel, sets, dtype = cases[case_id]
        return ring_coo.RingCOO().traffic([torch.tensor(s, dtype=torch.long) for s in sets], numel, dtype=dtype)
    R, D, kind = CASES[case_id]
    return ring_coo.RingCOO().traffic([_rows_of(kind, r, R) for r in range(world)], R, width=D)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ring_coo_is_lossless_and_its_traffic_model_is_exact(world):
    cases = _element_cases(world)
    results = fork_launch(_body, world, cases)
    for rank_results in results:
        for what, case_id, equal, _, _ in rank_results:
            assert equal, f"ring_coo differs from all_reduce on {what} case {case_id}"
    for i, (what, case_id, _, first, _) in enumerate(results[0]):
        assert all(torch.equal(rr[i][3], first) for rr in results), f"ranks' bits differ on {what} case {case_id}"
        measured = pd.concat([rr[i][4] for rr in results])
        b = measured.groupby(KEYS)[["bytes_sent", "bytes_received", "calls"]].sum().sort_index()
        a = _model(what, case_id, world, cases).groupby(KEYS)[["bytes_sent", "bytes_received", "calls"]].sum()
        assert set(a.index) == set(b.index), f"{what} case {case_id}: modelled and measured (rank, phase, kind) differ"
        pd.testing.assert_frame_equal(a.sort_index(), b, check_dtype=False, obj=f"ring_coo {what} case {case_id}")


def test_a_block_grows_only_by_the_indices_new_to_it_at_each_hop():
    """Three ranks, six elements, blocks [0, 2), [2, 4), [4, 6). Block 0 starts at rank 1 ({0, 1}) and passes
    rank 2 ({1}) and rank 0 ({0}), which add nothing new: two entries at every hop. Block 2 starts at rank 0 ({4}),
    rank 1 adds nothing and rank 2, its owner, adds {5} at the last merge: one entry, one, then two in the
    all-gather."""
    sets = [torch.tensor([0, 4]), torch.tensor([0, 1, 2]), torch.tensor([1, 5])]
    assert ring_coo.partial_sizes(sets, 6).tolist() == [[2, 2, 2], [0, 0, 1], [1, 1, 2]]
    frame = ring_coo.RingCOO().traffic(sets, 6).set_index(["phase", "kind", "rank"]).sort_index()["bytes_sent"]
    assert frame["reduce_scatter0", "payload"].tolist() == [1 * 8, 2 * 8, 0]  # rank r: block r - 1, 8 B an entry
    assert frame["all_gather1", "payload"].tolist() == [2 * 8, 2 * 8, 1 * 8]  # rank r passes on block r - 1


def test_registered_from_user_code_it_passes_the_contract_check(registered):
    """The one call a user runs on their own scheme (``zen-analysis check-scheme examples/ring_coo.py:RingCOO``)."""
    assert SCHEMES[registered] is ring_coo.RingCOO
    report = check_scheme(registered, ranks=(2, 3, 4))
    assert report["rows"] and report["cases"] > 0


def test_it_trains_with_sync_scheme_as_dense_all_reduce_does(registered):
    """``sync.scheme=ring_coo`` with ``sync.plugins`` naming the file: the embedding summed by the ring on 4 ranks,
    the losses those of dense all-reduce up to summation order."""

    def train(*overrides):
        cfg = apply_overrides(recipes.smoke(), ["dist.num_ranks=4", "train.num_steps=8", "capture.enabled=false"])
        cfg = apply_overrides(cfg, list(overrides))
        cfg.name = cfg.run_id = f"example-ring-{cfg.sync.scheme}"
        return launch(copy.deepcopy(cfg), echo=False, progress=False).metrics()

    dense = train("sync.method=dense", "sync.scheme=allreduce")
    ring = train("sync.method=natural", f"sync.scheme={registered}", f"sync.plugins={EXAMPLE}")
    torch.testing.assert_close(
        torch.tensor(ring["loss"].values), torch.tensor(dense["loss"].values), rtol=1e-4, atol=1e-5
    )
    assert len(ring) == 8 and (ring["sparse_bytes_sent_rank0"] > 0).all()  # the ring, not a dense fallback, summed it


def test_replay_measures_it_beside_zen_and_the_paper_scale_table_prices_it(registered, lstm_smoke_trace):
    from test_scheme_plugins import _random_rows

    from zen_analysis.paper.scale import paper_throughput

    sets = [torch.arange(r, 600, 3 + r) for r in range(3)]
    df = compare(sets, 600, repeats=1, topology=PRESETS["paper-tcp25"], schemes=[registered, "zen"])
    assert set(df["scheme"]) == {registered, "zen"} and df.groupby("scheme")["lossless"].all().all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a store written without its shard list says so
        run = lstm_smoke_trace("example-ring-paper-scale", _random_rows())
        table = paper_throughput(run, machines=2).set_index("scheme")
    assert registered in table.index and table.loc[registered, "sparse_comm_s"] > 0
