"""The edges of the schemes' contract, on real gloo ranks (issue 41, findings 1 and 2):

* a tensor made under ``torch.inference_mode()`` and summed outside it is summed as ``dist.all_reduce`` sums it;
* a scheme that raises leaves its input exactly as it was, on every rank (every write comes after the last
  collective; ``allreduce`` is ``dist.all_reduce``, whose collective is the write);
* every rank ends with the same bits, signed zeros included: a zero sum is ``+0.0`` in a sparse scheme
  (``wire.dtypes.positive_zeros``), equal to ``all_reduce`` in every other bit.
"""

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist

from zen_analysis.comm import SCHEMES, build_scheme
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.wire import exchange
from zen_analysis.wire.dtypes import positive_zeros
from zen_analysis.zen.sparse_allreduce import NodeGroups, zen_sum_hierarchical


def _values(rank: int, numel: int = 600) -> torch.Tensor:
    """Integer-valued floats, sparse and partly overlapping across ranks, with zeros of both signs: -0.0 where
    every rank holds it, and where only some ranks do."""
    x = torch.zeros(numel)
    x[::3] = -0.0  # every rank: all_reduce gives -0.0 there
    x[1::11] = -0.0 if rank == 0 else 0.0  # one rank only
    x[rank::5] = float(rank + 1)
    x[7::50] = -float(rank + 1)
    return x


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.detach().reshape(-1).contiguous().view(torch.int32).clone()


def _inference_and_signs(rank, world):
    out = {}
    for name in SCHEMES:
        with torch.inference_mode():
            x = _values(rank)
            t = _values(rank).view(60, 10)
        ref = _values(rank).clone()
        dist.all_reduce(ref)
        build_scheme(name).run(x)  # outside inference mode
        build_scheme(name).run_rows(t)
        signs = _values(rank)
        build_scheme(name).run(signs)
        rows = _values(rank).view(60, 10)
        build_scheme(name).run_rows(rows)
        strided = torch.zeros(1200)
        strided[::2] = _values(rank)
        build_scheme(name).run(strided[::2])
        out[name] = {
            "inference": _bits(x),
            "inference_rows": _bits(t),
            "signs": _bits(signs),
            "rows": _bits(rows),
            "strided": _bits(strided[::2]),
            "all_reduce": _bits(ref),
            "all_reduce_positive": _bits(positive_zeros(ref.clone())),
        }
    hier = _values(rank)
    zen_sum_hierarchical(hier, NodeGroups(2), seed=3)
    out["zen hierarchical"] = {"signs": _bits(hier), "all_reduce_positive": out["zen"]["all_reduce_positive"]}
    return out


def test_inference_tensors_and_signed_zeros_sum_alike_on_every_rank():
    """Every scheme sums inference-mode tensors (flat and by rows); every rank ends with the same bits, signed zeros
    included, equal to ``all_reduce`` but for the sign of a zero sum (``+0.0`` in the sparse schemes)."""
    results = fork_launch(_inference_and_signs, 4)
    for name in [*SCHEMES, "zen hierarchical"]:
        per_rank = [r[name] for r in results]
        for key in per_rank[0]:
            assert all(torch.equal(r[key], per_rank[0][key]) for r in per_rank), f"{name} {key}: ranks differ"
        dense = name == "allreduce"
        want = per_rank[0]["all_reduce" if dense else "all_reduce_positive"]
        for key in ("inference", "inference_rows", "signs", "rows", "strided"):
            if key in per_rank[0]:
                assert torch.equal(per_rank[0][key], want), f"{name} {key}: not all_reduce's bits"
    ar = results[0]["allreduce"]
    assert not torch.equal(ar["all_reduce"], ar["all_reduce_positive"])  # the case is there: some -0.0 sums


class Injected(RuntimeError):
    pass


@contextlib.contextmanager
def failing_after(k: int) -> Iterator[list[int]]:
    """Inside it, ``Exchange._count`` (called once after each collective) raises :class:`Injected` after this
    rank's ``k``-th collective (never for ``k`` 0): a peer lost mid-sum, as every rank sees it at the same call.
    Yields ``[collectives so far]``."""
    original, seen = exchange.Exchange._count, [0]

    def count(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen[0] += 1
        if seen[0] == k:
            raise Injected(f"after collective {k}")

    exchange.Exchange._count = count
    try:
        yield seen
    finally:
        exchange.Exchange._count = original


def _failures(rank, world):
    out = {}
    for name in SCHEMES:
        for how in ("run", "run_rows"):
            x = _values(rank).view(60, 10)

            def call(t, name=name, how=how):
                scheme = build_scheme(name)
                return scheme.run(t) if how == "run" else scheme.run_rows(t)

            with failing_after(0) as seen:
                call(x.clone())  # a dry run: how many collectives this rank makes
            calls = seen[0]
            counts = torch.tensor([calls])
            every = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
            dist.all_gather(every, counts)
            same = len({int(c) for c in every}) == 1
            # every collective when every rank makes as many; else the first and this rank's last (no rank waits)
            ks = range(1, calls + 1) if same else sorted({1, calls})
            for k in ks:
                before = _bits(x)
                try:
                    with failing_after(k):
                        call(x)
                    raised = False
                except Injected:
                    raised = True
                out[(name, how, k, calls)] = (raised, torch.equal(_bits(x), before))
                x.copy_(_values(rank).view(60, 10))
    return out


def test_a_scheme_that_raises_leaves_its_input_as_it_was():
    results = fork_launch(_failures, 3)
    checked = 0
    for rank, res in enumerate(results):
        for (name, how, k, calls), (raised, untouched) in res.items():
            assert raised, f"{name}.{how} on rank {rank}: the injected failure after collective {k} did not raise"
            if name == "allreduce" and k == calls:
                continue  # dist.all_reduce writes as it sums: its failures are torch's own
            assert untouched, f"{name}.{how} on rank {rank}: a failure after collective {k} of {calls} wrote the input"
            checked += 1
    assert checked >= len(SCHEMES) * 2 * 3 * 2
