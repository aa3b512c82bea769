"""The dtype contract and the ranks' agreement, on real gloo ranks: every scheme sums every supported dtype as
``all_reduce`` does (bit for bit on integer-valued inputs, overflow wrapping as it wraps; to the dtype's rounding on
random floats), in any layout, and refuses the rest; its bytes equal its traffic model for that dtype; ranks that
pass different numels, dtypes or seeds all raise the same error and none returns."""

import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from zen_analysis.comm import SCHEMES, build_scheme
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.wire.dtypes import SUPPORTED

UNSUPPORTED = (torch.complex64, torch.bool, torch.int16)
LAYOUTS = ("flat", "2d", "transposed", "strided", "channels_last", "one", "empty")
KEYS = ["rank", "phase", "kind"]


def _shape(layout: str, size: int) -> tuple[int, ...]:
    return {
        "flat": (size,),
        "2d": (max(1, size // 7), 7),
        "transposed": (7, max(1, size // 7)),
        "strided": (size,),
        "channels_last": (1, 3, max(1, size // 15), 5),
        "one": (1,),
        "empty": (0, 3),
    }[layout]


def _values(dtype: torch.dtype, kind: str, numel: int, rank: int, seed: int) -> torch.Tensor:
    """Rank ``rank``'s flat values: integer-valued with zeros (sparse) and, for integers, near the dtype's top so
    sums overflow; or random floats."""
    gen = torch.Generator().manual_seed(seed * 31 + rank)
    keep = torch.rand(numel, generator=gen) < 0.3
    if kind == "random" and dtype.is_floating_point:
        v = torch.randn(numel, generator=gen, dtype=torch.float64) * 100
    elif dtype in (torch.int64, torch.int32):
        top = torch.iinfo(dtype).max
        v = torch.randint(-3, 4, (numel,), generator=gen, dtype=torch.int64).to(dtype)
        v[: numel // 3] = top - torch.randint(0, 3, (numel // 3,), generator=gen).to(dtype)  # wraps when summed
        if dtype == torch.int64 and numel:
            v[-1] = 16_777_217  # above float32's exact integers
    elif dtype in (torch.int8, torch.uint8):
        lo = 0 if dtype == torch.uint8 else -128
        v = torch.randint(lo, lo + 255, (numel,), generator=gen, dtype=torch.int64)
    else:
        v = torch.randint(-3, 4, (numel,), generator=gen, dtype=torch.int64)
    return (v * keep).to(dtype)


def _lay_out(flat: torch.Tensor, layout: str, shape: tuple[int, ...]) -> torch.Tensor:
    """``flat``'s values in ``shape``, stored as ``layout`` says (a fresh tensor the scheme may sum in place)."""
    if layout == "transposed":
        out = torch.empty(shape[::-1], dtype=flat.dtype).t()
        return out.copy_(flat.reshape(shape))
    if layout == "strided":
        holder = torch.zeros(2 * flat.numel(), dtype=flat.dtype)
        holder[::2] = flat
        return holder[::2]
    if layout == "channels_last":
        return flat.reshape(shape).contiguous(memory_format=torch.channels_last)
    return flat.reshape(shape).clone()


def _body(rank, world, batch):
    out = []
    for case_id, (dtype, layout, size, kind, seed) in enumerate(batch):
        shape = _shape(layout, size)
        numel = torch.Size(shape).numel()
        flat = _values(dtype, kind, numel, rank, seed)
        nz = torch.nonzero(flat.reshape(-1), as_tuple=True)[0]
        ref = None
        if dtype in SUPPORTED:
            ref = flat.clone()
            dist.all_reduce(ref)
        for name in SCHEMES:
            x = _lay_out(flat, layout, shape)
            scheme = build_scheme(name)
            try:
                y = scheme.run(x)
            except TypeError as e:
                out.append((case_id, name, "refused", str(e), None, nz))
                continue
            ok = y is x and x.dtype == dtype and x.shape == shape
            if kind == "random" and dtype.is_floating_point:
                # a ring all-reduce rounds after every add, a scheme's server once: equal to the dtype's rounding
                # (a few units in the last place of the partial sums, which reach a few hundred here)
                eps = torch.finfo(dtype).eps
                torch.testing.assert_close(x, ref.reshape(shape), rtol=4 * eps, atol=4 * eps * 400)
            else:
                ok = ok and torch.equal(x, ref.reshape(shape))
            out.append((case_id, name, "summed" if ok else "differs", None, scheme.last_measured(), nz))
    return out


@st.composite
def cases(draw):
    dtype = draw(st.sampled_from(SUPPORTED + UNSUPPORTED))
    layout = draw(st.sampled_from(LAYOUTS))
    size = draw(st.sampled_from([1, 7, 255, 600, 2000]))
    kind = draw(st.sampled_from(["integer", "integer", "random"]))
    return dtype, layout, size, kind, draw(st.integers(0, 1000))


def _check(world, batch):
    import pandas as pd

    results = fork_launch(_body, world, batch)
    for case_id, (dtype, layout, size, kind, _) in enumerate(batch):
        for name in SCHEMES:
            rows = [next(r for r in rr if r[0] == case_id and r[1] == name) for rr in results]
            verdicts = {r[2] for r in rows}
            what = f"{name} on {dtype} {layout} ({kind}, world {world})"
            if dtype in UNSUPPORTED:
                assert verdicts == {"refused"}, what
                assert all("supported: float32" in r[3] for r in rows), rows[0][3]
                continue
            assert verdicts == {"summed"}, f"{what}: {verdicts}"
            numel = torch.Size(_shape(layout, size)).numel()
            model = build_scheme(name).traffic([r[5] for r in rows], numel, dtype=dtype)
            measured = pd.concat([r[4] for r in rows])
            a = model.groupby(KEYS)[["bytes_sent", "bytes_received", "calls"]].sum().sort_index()
            b = measured.groupby(KEYS)[["bytes_sent", "bytes_received", "calls"]].sum().sort_index()
            pd.testing.assert_frame_equal(a, b, check_dtype=False, obj=f"{what}: traffic")


@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_scheme_sums_every_dtype_and_layout_as_all_reduce_or_refuses_it(world):
    @settings(
        max_examples=2,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
    )  # no shrinking: each example forks ranks
    @given(st.lists(cases(), min_size=14, max_size=14))
    def run_batch(batch):
        _check(world, batch)

    run_batch()


@pytest.mark.smoke
def test_every_dtype_and_layout_at_least_once():
    """The hypothesis draws above may miss a combination; this batch has each dtype and each layout."""
    dtypes = SUPPORTED + UNSUPPORTED
    batch = [(d, LAYOUTS[i % len(LAYOUTS)], 600, "integer", i) for i, d in enumerate(dtypes)]
    batch += [(torch.bfloat16, layout, 255, "integer", 7) for layout in LAYOUTS]
    _check(2, batch)


def _half_bytes(rank, world):
    out = {}
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        x = torch.zeros(1000, dtype=dtype)
        x[rank::5] = 1
        for name in SCHEMES:
            scheme = build_scheme(name)
            scheme.check_ranks = False
            scheme.run(x.clone())
            m = scheme.last_measured()
            out[dtype, name] = int(m[m["kind"] == "payload"]["bytes_sent"].sum())
            if name == "zen":
                out[dtype, "zen steps"] = set(scheme.last_local())
    return out


def test_half_precision_values_travel_at_two_bytes():
    """The issue's probe: allreduce sent 4,000 bytes for 1,000 fp16 elements on 2 ranks (ring: 2 x 500 x 2 = 2,000)."""
    for per_rank in fork_launch(_half_bytes, 2):
        for name in SCHEMES:
            assert per_rank[torch.float16, name] == per_rank[torch.bfloat16, name]
        assert per_rank[torch.float16, "allreduce"] == 2000 and per_rank[torch.float32, "allreduce"] == 4000
        # COO schemes: an int32 index and a 2-byte value (6 bytes) against 8 for float32
        assert per_rank[torch.float16, "agsparse"] * 8 == per_rank[torch.float32, "agsparse"] * 6
        # Zen sums half precision in its compiled float32 loops, widened and narrowed around them
        from zen_analysis.zen import native

        if native.available():
            assert {"widen", "extract+pack", "narrow"} <= per_rank[torch.bfloat16, "zen steps"]


def _disagree(rank, world, name, what):
    numel = 1000 + (rank if what == "numel" else 0)
    dtype = torch.float64 if what == "dtype" and rank == world - 1 else torch.float32
    scheme = build_scheme(name, seed=rank if what == "seed" else 0)
    x = torch.zeros(numel, dtype=dtype)
    x[rank::3] = 1.0
    x[-1] = 5.0  # a non-zero in the tail only the larger rank has
    try:
        scheme.run(x)
    except ValueError as e:
        return type(e).__name__, str(e)
    return "returned", None


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_ranks_that_disagree_all_raise_the_same_error(name):
    whats = ["numel", "dtype"] + (["seed"] if SCHEMES[name].hashed else [])
    for what in whats:
        results = fork_launch(_disagree, 3, name, what, timeout_s=60)
        assert {r[0] for r in results} == {"RanksDisagreeError"}, (name, what, results)
        assert len({r[1] for r in results}) == 1  # the same message on every rank
        message = results[0][1]
        if what == "numel":
            assert "rank 0 passed numel 1000, rank 1 passed numel 1001, rank 2 passed numel 1002" in message
        elif what == "dtype":
            assert "rank 0 passed dtype float32" in message and "rank 2 passed dtype float64" in message
        else:
            assert "rank 1 passed seed 1" in message


def _version(rank, world):
    out = {}
    w = torch.ones(50, requires_grad=True)
    for name in (*SCHEMES, "dist.all_reduce"):
        y = (w * (rank + 1)).exp()  # exp saves its output for backward
        before = y._version
        if name == "dist.all_reduce":
            dist.all_reduce(y.detach())
        else:
            build_scheme(name).run(y.detach())
        try:
            y.sum().backward()
            raised = False
        except RuntimeError as e:
            raised = "modified by an inplace operation" in str(e)
        out[name] = (y._version > before, raised)
    return out


def test_every_scheme_bumps_the_version_counter_so_autograd_refuses_a_stale_backward():
    """One convention for all seven: the in-place sum bumps the version counter, as every in-place torch op does,
    so a backward through a tensor that was saved and then summed raises. dist.all_reduce does not bump it: the
    same backward then silently multiplies by the summed values (the last entry pins that difference)."""
    for per_rank in fork_launch(_version, 2):
        for name in SCHEMES:
            assert per_rank[name] == (True, True), name
        assert per_rank["dist.all_reduce"] == (False, False)


def _empty(rank, world):
    out = {}
    for name in SCHEMES:
        x = torch.zeros(0)
        out[name] = build_scheme(name).run(x).numel()
    return out


def test_every_scheme_sums_an_empty_tensor():
    for per_rank in fork_launch(_empty, 2):
        assert per_rank == {name: 0 for name in SCHEMES}


def _mixed(rank, world, what, name):
    if what == "scheme":  # a scheme whose check rides on its counts against one whose check is a call of its own
        scheme, dtype = build_scheme(name if rank == 0 else "allreduce"), torch.float32
    else:  # one rank passes a dtype no scheme sums: it must still meet the others' check
        scheme, dtype = build_scheme(name), (torch.int16 if rank == 0 else torch.int32)
    x = torch.zeros(500, dtype=dtype)
    x[rank::4] = 1
    try:
        scheme.run(x)
    except (ValueError, TypeError) as e:
        return type(e).__name__, str(e)
    return "returned", None


@pytest.mark.parametrize(
    "what, name", [("scheme", "zen"), ("scheme", "sparcml"), ("unsupported", "zen"), ("unsupported", "omnireduce")]
)
def test_ranks_passing_different_schemes_or_an_unsupported_dtype_all_raise(what, name):
    results = fork_launch(_mixed, 3, what, name, timeout_s=60)
    assert {r[0] for r in results} == {"RanksDisagreeError"}, results
    assert len({r[1] for r in results}) == 1
    if what == "scheme" and name == "zen":
        assert "rank 0 passed scheme zen, rank 1 passed scheme allreduce" in results[0][1]
    if what == "unsupported":
        assert "rank 0 passed dtype int16, rank 1 passed dtype int32" in results[0][1]
