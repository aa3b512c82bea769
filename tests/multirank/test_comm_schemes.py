"""Every scheme on real gloo ranks: lossless (bit for bit equal to all_reduce on integer-valued inputs) and
its traffic model equal to the bytes its run passed to collectives, over hypothesis-generated cases."""

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zen_analysis.comm import SCHEMES, build_scheme
from zen_analysis.comm.scheme_contract import KINDS, index_set
from zen_analysis.ranks.procs import fork_launch


@st.composite
def cases(draw, world: int):
    numel = draw(st.one_of(st.sampled_from([1, 2, 7, 255, 256, 257, 1000]), st.integers(1, 3000)))
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=world, max_size=world))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 10_000)))
    sets: list[list[int]] = []
    for rank, kind in enumerate(kinds):
        sets.append(index_set(kind, rank, world, numel, gen, sets[0] if sets else []))
    return numel, sets


def _body(rank, world, batch):
    out = []
    for case_id, (numel, sets) in enumerate(batch):
        gen = torch.Generator().manual_seed(case_id * 7 + rank)
        x = torch.zeros(numel)
        idx = torch.tensor(sets[rank], dtype=torch.long)
        vals = torch.randint(1, 4, (idx.numel(),), generator=gen).float()
        x[idx] = vals * (1 - 2 * torch.randint(0, 2, (idx.numel(),), generator=gen)).float()  # +-1..3, never 0
        ref = x.clone()
        dist.all_reduce(ref)
        for name in SCHEMES:
            scheme = build_scheme(name)
            z = x.clone()
            y = scheme.run(z)  # in place, like all_reduce: z holds the sum
            out.append((case_id, name, y is z and torch.equal(z, ref), scheme.last_measured()))
    return out


def _check(world, batch):
    results = fork_launch(_body, world, batch)
    for rank_results in results:
        for case_id, name, equal, _ in rank_results:
            assert equal, f"{name} differs from all_reduce on case {batch[case_id]}"
    for case_id, (numel, sets) in enumerate(batch):
        for name in {r[1] for r in results[0]}:
            model = build_scheme(name).traffic([torch.tensor(s, dtype=torch.long) for s in sets], numel)
            measured = pd.concat([m for rr in results for (c, n, _, m) in rr if c == case_id and n == name])
            keys = ["rank", "phase", "kind"]
            a = model.groupby(keys)[["bytes_sent", "bytes_received", "calls"]].sum().sort_index()
            b = measured.groupby(keys)[["bytes_sent", "bytes_received", "calls"]].sum().sort_index()
            assert set(a.index) == set(b.index), f"{name}: modelled and measured (rank, phase, kind) differ"
            pd.testing.assert_frame_equal(a, b, check_dtype=False, obj=f"{name} traffic on case {case_id}")
            assert len(a) > 0


@pytest.mark.parametrize("world, examples", [(2, 3), pytest.param(3, 2, marks=pytest.mark.smoke), (4, 3), (8, 1)])
def test_schemes_are_lossless_and_their_traffic_model_is_exact(world, examples):
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(st.lists(cases(world), min_size=10, max_size=10))
    def run_batch(batch):
        _check(world, batch)

    run_batch()


def test_all_ranks_empty_and_all_ranks_dense():
    _check(4, [(300, [[]] * 4), (300, [list(range(300))] * 4), (1, [[0], [], [0], []])])


def test_sparcml_folds_non_power_of_two_worlds_and_unknown_schemes_are_errors():
    frame = build_scheme("sparcml").traffic([torch.tensor([1]), torch.tensor([2]), torch.tensor([3, 4])], 10)
    fold = frame[frame["phase"] == "fold"].groupby("rank")[["bytes_sent", "bytes_received"]].sum()
    assert fold.to_dict("index") == {
        0: {"bytes_sent": 0, "bytes_received": 8 + 16},
        2: {"bytes_sent": 8 + 16, "bytes_received": 0},
    }
    assert set(frame[frame["phase"] == "stage0"]["rank"]) == {0, 1}  # rank 2 waits for the unfold
    with pytest.raises(ValueError, match="unknown scheme"):
        build_scheme("nope")
    with pytest.raises(ValueError, match="zen"):
        build_scheme("zen", bogus=1)


def test_local_calibration_fits_alpha_and_bandwidth_from_the_schemes_phases():
    from zen_analysis.evaluation.calibrate import calibrate, calibration_path, preset

    small = {"numel": 200_000, "densities": (0.01, 0.1), "repeats": 2, "row_cases": ((2_000, 8, 0.05),)}
    topo = calibrate(**small)
    assert topo.intra_bandwidth > 1e7 and topo.intra_alpha_s >= 0  # loopback moves well over 10 MB/s
    assert calibration_path().exists() and preset("local") == topo
    three = calibrate(3, **small)
    assert {p for p, _, _ in three.calibrated} == {"p2p", "all_to_all", "all_reduce"}
    assert all(bw > 1e7 for _, _, bw in three.calibrated) and preset("local-3") == three


def _calls(rank, world):
    x = torch.zeros(1000)
    x[rank::7] = 1.0
    out = {}
    for check in (True, False):
        for name in SCHEMES:
            scheme = build_scheme(name)
            scheme.check_ranks = check
            scheme.run(x.clone())
            out[name, check] = int(scheme.last_measured()["calls"].sum())
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_collective_calls_per_sync(world):
    """Indices and values travel in one message: Zen makes 4 calls (counts, push, bitmaps, values). The ranks'
    agreement check rides on the first count exchange where a scheme has one, else it costs one call."""
    stages = world.bit_length() - 1
    unchecked = {
        "allreduce": 1,
        "agsparse": 2,
        "sparse_ps": 4,
        "bp_coo": 4,
        "zen": 4,
        "omnireduce": 4,
        "sparcml": 2 * stages,
    }
    folded = {"agsparse", "sparse_ps", "bp_coo", "zen"}
    expected = {(n, False): c for n, c in unchecked.items()}
    expected |= {(n, True): c + (n not in folded) for n, c in unchecked.items()}
    for per_rank in fork_launch(_calls, world):
        assert per_rank == expected


_FACTORIES = {
    "zeros",
    "empty",
    "full",
    "ones",
    "arange",
    "tensor",
    "eye",
    "linspace",
    "randperm",
    "rand",
    "randn",
    "randint",
}


def _device_audit(rank, world):
    """Every tensor a scheme creates names its device: a factory call without ``device=`` lands on the CPU even
    when the input lives on a GPU (SparCML's merge buffer did, failing on NCCL at every stage)."""
    import inspect

    from torch.overrides import TorchFunctionMode

    found = set()

    class Audit(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") in _FACTORIES and "device" not in kwargs:
                caller = inspect.stack(context=0)[1]
                if "/zen_analysis/" in caller.filename:
                    found.add(f"{func.__name__} at {caller.filename.split('/zen_analysis/')[1]}:{caller.lineno}")
            return func(*args, **kwargs)

    x = torch.zeros(3000)
    x[rank::5] = 1.0
    x[2000 + rank :: 3] = 2.0
    for name in SCHEMES:
        scheme = build_scheme(name)
        scheme.run(x.clone())  # warm-up: caches built outside the audit
        with Audit():
            scheme.run(x.clone())
    return sorted(found)


def test_every_scheme_names_the_device_of_every_tensor_it_creates():
    for per_rank in fork_launch(_device_audit, 3):
        assert per_rank == [], "tensors created without a device (CPU by default, wrong under NCCL):\n" + "\n".join(
            per_rank
        )


def _floats_and_strides(rank, world):
    gen = torch.Generator().manual_seed(rank)
    x = torch.zeros(4000)
    idx = torch.randperm(4000, generator=gen)[:600]
    x[idx] = torch.randn(600, generator=gen) * 1e3  # float values: the summation order shows in the bits
    out = {}
    for name in SCHEMES:
        out[name] = build_scheme(name).run(x.clone())
    holder = torch.zeros(8000)
    holder[::2] = x
    strided = holder[::2]  # a view: run() must work on a contiguous copy and write the sum back
    build_scheme("allreduce").run(strided)
    zen_strided = torch.zeros(8000)
    zen_strided[::2] = x
    build_scheme("zen").run(zen_strided[::2])
    return out, holder, zen_strided


def test_every_rank_gets_the_same_bits_and_strided_inputs_are_summed_in_place():
    results = fork_launch(_floats_and_strides, 3)
    for name in SCHEMES:
        first = results[0][0][name]
        for r in range(1, 3):
            assert torch.equal(results[r][0][name], first), f"{name}: rank {r}'s sum differs from rank 0's"
    for _, holder, zen_strided in results:
        dense = results[0][0]["allreduce"]
        assert torch.equal(holder[::2], dense) and not holder[1::2].any()
        assert torch.equal(zen_strided[::2], results[0][0]["zen"]) and not zen_strided[1::2].any()


def _times_body(rank: int, world: int) -> dict:
    from zen_analysis.comm import build_scheme

    x = torch.zeros(50_000)
    x[rank::7] = 1.0
    scheme = build_scheme("zen")
    scheme.sync_collectives = True
    scheme.run(x)
    return scheme.last_times()


def test_a_run_splits_its_time_into_wire_barrier_and_local_work():
    for t in fork_launch(_times_body, 2):
        assert min(t.values()) >= 0 and t["local"] > 0 and t["wait"] > 0
        assert t["wire"] + t["wait"] + t["local"] == pytest.approx(t["total"], rel=1e-9)
