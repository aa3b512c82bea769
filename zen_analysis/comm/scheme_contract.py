"""The scheme contract as one call: :func:`check_scheme` runs a scheme on forked gloo ranks and checks what every
built-in meets (the package's own tests check the built-ins the same way, over more cases).

* **Lossless**: ``run`` equals ``dist.all_reduce`` bit for bit on integer-valued float32 inputs, over seeded index
  sets of every shape the ranks can hold (empty, full, the same set on every rank, disjoint, skewed to one end,
  random), and in every dtype of :data:`~zen_analysis.wire.dtypes.SUPPORTED`, which it keeps.
* **Its model is exact**: the bytes sent and received and the calls per (rank, phase, kind) that ``run`` passed to
  collectives equal ``traffic()``'s, computed from the index sets alone, for that dtype.
* **By rows**, when the scheme sums rows (it overrides ``_sum_rows``): ``sum_rows`` returns each row once with the
  dense sum's values, and its row model (``traffic(width=D)``) is exact too.

A failure raises :class:`SchemeContractError` saying what broke, on how many ranks and on which case, and the call
that reproduces it (the cases are drawn from ``seed`` alone). From the command line:
``zen-analysis check-scheme my_pkg.schemes:MyScheme`` (or ``path/to/file.py:MyScheme``, or a registered name).

Shape suffixes: N elements of the flat tensor, K rows a rank holds, R rows of a table, D values per row.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist

from zen_analysis.comm.schemes import SCHEMES, CommScheme, sums_rows
from zen_analysis.ranks.blame import RankFailedError
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.wire.dtypes import SUPPORTED

__all__ = ["KINDS", "SchemeContractError", "check_scheme", "index_set"]

KINDS = ("random", "empty", "full", "same_as_0", "disjoint", "first_part", "endpoints")
"""How a rank picks its index set in a case (``same_as_0``: rank 0's set, an overlap on every rank)."""
NUMELS = (1, 7, 256, 1000)
"""Tensor sizes the cases draw from: one element, an odd few, a power of two, and a larger one."""
ROW_CASES = ((1, 3, "full"), (40, 8, "random"), (257, 4, "first_part"), (64, 5, "empty"), (33, 6, "same_as_0"))
"""(rows, width, kind of rank 1's rows and up; rank 0's are random) of the by-rows cases."""
KEYS = ["rank", "phase", "kind"]
COUNTED = ["bytes_sent", "bytes_received", "calls"]


class SchemeContractError(AssertionError):
    """A scheme broke the contract :func:`check_scheme` checks; the message says what, where and how to rerun it,
    ``world`` and ``seed`` the rank count and seed that rerun it."""

    def __init__(self, message: str, *, world: int, seed: int) -> None:
        super().__init__(message)
        self.world, self.seed = world, seed


def check_scheme(
    scheme: str | type[CommScheme] | CommScheme,
    *,
    ranks: Sequence[int] = (2, 3, 4),
    seed: int = 0,
    cases: int = 8,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Check ``scheme`` (a registered name, a class, or an instance, copied for every sum) on ``ranks`` forked gloo
    ranks each: ``cases`` seeded cases of float32 index sets (plus all empty, all full and all the same), one case per
    supported dtype, and the by-rows cases when it sums rows; see the module docstring. Returns what was checked;
    raises :class:`SchemeContractError` on the first rank count where something broke (every failure of that
    count listed), naming how to reproduce it."""
    make, label = _factory(scheme)
    report = {"scheme": label, "ranks": list(ranks), "cases": 0, "dtypes": [str(d) for d in SUPPORTED]}
    report["rows"] = sums_rows(make())
    for world in ranks:
        flat = _flat_cases(world, seed, cases)
        rows = [_row_case(world, seed, *c) for c in ROW_CASES] if report["rows"] else []
        try:
            results = fork_launch(_body, world, make, flat, rows, timeout_s=timeout_s)
        except RankFailedError as exc:
            _fail(label, world, seed, [f"a rank raised or hung:\n{_tail(str(exc))}"])
        failures = _compare(make, flat, rows, results)
        if failures:
            _fail(label, world, seed, failures)
        report["cases"] += len(flat) + len(rows)
    return report


def _factory(scheme: str | type[CommScheme] | CommScheme) -> tuple[Callable[[], CommScheme], str]:
    """A function making a fresh instance of ``scheme`` each call, and how to name it in messages."""
    if isinstance(scheme, str):
        if scheme not in SCHEMES:
            raise ValueError(f"no scheme {scheme!r} is registered; registered: {sorted(SCHEMES)}")
        cls = SCHEMES[scheme]
        return cls, repr(scheme)
    if isinstance(scheme, type) and issubclass(scheme, CommScheme):
        return scheme, f"{scheme.__module__}.{scheme.__qualname__}"
    if isinstance(scheme, CommScheme):
        return (lambda: copy.deepcopy(scheme)), f"{type(scheme).__qualname__} instance"
    raise TypeError(f"check_scheme takes a scheme name, a CommScheme subclass or an instance, got {scheme!r}")


def index_set(kind: str, rank: int, world: int, numel: int, gen: torch.Generator, first: list[int]) -> list[int]:
    """The sorted non-zero indices of rank ``rank`` of ``world`` in a tensor of ``numel`` elements, picked as
    ``kind`` (one of :data:`KINDS`) says: none, all, both ends, every ``world``-th from ``rank``, ``first`` (rank 0's
    set; rank 0 draws at random) again, a random half of the first ``1/world`` (one owner's range: the skew of the
    paper's C3), or a random subset of a random size. Random kinds draw from ``gen``, so a case is reproduced from
    its seed."""
    if kind not in KINDS:
        raise ValueError(f"index set kinds are {', '.join(KINDS)}; got {kind!r}")
    if kind == "empty":
        return []
    if kind == "full":
        return list(range(numel))
    if kind == "endpoints":
        return sorted({0, numel - 1})
    if kind == "disjoint":
        return list(range(rank, numel, world))
    if kind == "same_as_0" and rank > 0:
        return list(first)
    if kind == "first_part":  # every index inside the first 1/world of the tensor: one owner's range
        hi = max(1, numel // world)
        return sorted(set(torch.randint(0, hi, (max(1, hi // 2),), generator=gen).tolist()))
    k = int(torch.randint(0, numel + 1, (1,), generator=gen))
    return sorted(torch.randperm(numel, generator=gen)[:k].tolist())


def _flat_cases(world: int, seed: int, n: int) -> list[tuple[str, torch.dtype, int, list[list[int]]]]:
    """(name, dtype, numel, the ranks' index sets): every rank empty, full, the same; ``n`` random mixes of
    :data:`KINDS` at sizes of :data:`NUMELS`; then one case per supported dtype. Drawn from ``seed`` alone."""
    gen = torch.Generator().manual_seed(seed * 1009 + world)
    plans = [("all empty", 256, ["empty"] * world), ("all full", 256, ["full"] * world)]
    plans.append(("all the same", 1000, ["random"] + ["same_as_0"] * (world - 1)))
    for i in range(n):
        numel = NUMELS[int(torch.randint(0, len(NUMELS), (1,), generator=gen))]
        kinds = [KINDS[int(k)] for k in torch.randint(0, len(KINDS), (world,), generator=gen)]
        plans.append((f"case {i}", numel, kinds))
    out = []
    for name, numel, kinds in plans:
        sets: list[list[int]] = []
        for r, kind in enumerate(kinds):
            sets.append(index_set(kind, r, world, numel, gen, sets[0] if sets else []))
        out.append((f"{name} (numel {numel}, sets {kinds})", torch.float32, numel, sets))
    mixed = ["random", "same_as_0", "full", "empty"]
    for dtype in SUPPORTED:
        sets = []
        for r in range(world):
            sets.append(index_set(mixed[r % len(mixed)], r, world, 300, gen, sets[0] if sets else []))
        out.append((f"{dtype} (numel 300, sets {[mixed[r % 4] for r in range(world)]})", dtype, 300, sets))
    return out


def _row_case(world: int, seed: int, num_rows: int, width: int, kind: str) -> tuple[str, int, int, list[list[int]]]:
    """(name, rows, width, the ranks' row sets) of one by-rows case."""
    gen = torch.Generator().manual_seed(seed * 2003 + world * 31 + num_rows)
    sets: list[list[int]] = []
    for r in range(world):
        sets.append(index_set("random" if r == 0 else kind, r, world, num_rows, gen, sets[0] if sets else []))
    return f"rows {num_rows} x {width} (sets random then {kind})", num_rows, width, sets


def _values(n: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """``n`` integer values of 1..3, signed where the dtype is: never 0, and every sum over 4 ranks exact."""
    v = torch.randint(1, 4, (n,), generator=gen)
    if dtype != torch.uint8:
        v = v * (1 - 2 * torch.randint(0, 2, (n,), generator=gen))
    return v.to(dtype)


def _body(rank: int, world: int, make, flat, rows) -> dict[str, list]:
    """One rank's sums: each flat case by ``run`` beside ``all_reduce``, each row case by ``sum_rows`` beside the
    dense tables' ``all_reduce``; what differed (the first element) and what was measured."""
    out: dict[str, list] = {"flat": [], "rows": []}
    for i, (name, dtype, numel, sets) in enumerate(flat):
        gen = torch.Generator().manual_seed(i * 7 + rank)
        x_N = torch.zeros(numel, dtype=dtype)
        idx = torch.tensor(sets[rank], dtype=torch.long)
        x_N[idx] = _values(idx.numel(), dtype, gen)
        ref_N = x_N.clone()
        dist.all_reduce(ref_N)
        scheme = make()
        try:
            y = scheme.run(x_N)
        except Exception as exc:
            raise RuntimeError(f"run raised on rank {rank} of {world}, on {name}") from exc
        out["flat"].append((_differs(y, ref_N, x_N), scheme.last_measured()))
    for i, (name, R, D, sets) in enumerate(rows):
        gen = torch.Generator().manual_seed(i * 11 + rank)
        rows_K = torch.tensor(sets[rank], dtype=torch.long)
        x_RD = torch.zeros(R, D)
        x_RD[rows_K] = _values(rows_K.numel() * D, torch.float32, gen).view(-1, D)
        ref_RD = x_RD.clone()
        dist.all_reduce(ref_RD)
        scheme = make()
        try:
            u_rows, u_vals = scheme.sum_rows(rows_K, x_RD[rows_K], R)
        except Exception as exc:
            raise RuntimeError(f"sum_rows raised on rank {rank} of {world}, on {name}") from exc
        got_RD = torch.zeros(R, D)
        got_RD[u_rows] = u_vals.float()
        twice = u_rows.unique().numel() != u_rows.numel()
        out["rows"].append(("a row returned twice" if twice else _differs(got_RD, ref_RD), scheme.last_measured()))
    return out


def _differs(y: torch.Tensor, ref: torch.Tensor, x: torch.Tensor | None = None) -> str:
    """Why ``y`` is not ``ref`` bit for bit ("" when it is); ``x``: the tensor ``run`` was given, to be returned."""
    if x is not None and y is not x:
        return "run returned another tensor than the one it was given (it sums in place and returns it)"
    if y.dtype != ref.dtype or y.shape != ref.shape:
        return f"the sum is {y.dtype} {tuple(y.shape)}, the input {ref.dtype} {tuple(ref.shape)}"
    if torch.equal(y, ref):
        return ""
    bad = torch.nonzero(y.reshape(-1) != ref.reshape(-1)).view(-1)
    at = int(bad[0])
    return (
        f"{bad.numel()} element(s) differ from dist.all_reduce, the first at {at}: "
        f"{y.reshape(-1)[at].item()} where all_reduce gives {ref.reshape(-1)[at].item()}"
    )


def _compare(make, flat, rows, results: list[dict]) -> list[str]:
    """Every failure of one rank count: a sum that differs on some rank, a model that differs from the bytes and
    calls measured on all of them."""
    failures = []
    for part, cases in (("flat", flat), ("rows", rows)):
        for i, case in enumerate(cases):
            name = case[0]
            wrong = [f"rank {r}: {rr[part][i][0]}" for r, rr in enumerate(results) if rr[part][i][0]]
            if wrong:
                failures.append(f"{'run' if part == 'flat' else 'sum_rows'} on {name}: {'; '.join(wrong)}")
                continue
            sets = [torch.tensor(s, dtype=torch.long) for s in case[-1]]
            try:
                if part == "flat":
                    model = make().traffic(sets, case[2], dtype=case[1])
                else:
                    model = make().traffic(sets, case[1], width=case[2])
            except Exception as exc:  # noqa: BLE001 - reported as the contract's failure
                failures.append(f"traffic() raised on {name}: {type(exc).__name__}: {exc}")
                continue
            measured = pd.concat([rr[part][i][1] for rr in results])
            diff = _model_diff(model, measured)
            if diff:
                failures.append(f"the traffic model differs from what run measured on {name}: {diff}")
    return failures


def _model_diff(model: pd.DataFrame, measured: pd.DataFrame) -> str:
    """The first (rank, phase, kind) whose modelled bytes or calls differ from the measured ("" when none)."""
    a = model.groupby(KEYS)[COUNTED].sum()
    b = measured.groupby(KEYS)[COUNTED].sum()
    both = a.merge(b, left_index=True, right_index=True, how="outer", suffixes=("_model", "_measured")).fillna(0)
    for key, row in both.iterrows():
        for col in COUNTED:
            if row[f"{col}_model"] != row[f"{col}_measured"]:
                rank, phase, kind = key
                return (
                    f"rank {rank}, phase {phase!r}, {kind}: {col} modelled {int(row[f'{col}_model'])}, measured "
                    f"{int(row[f'{col}_measured'])}"
                )
    return ""


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _fail(label: str, world: int, seed: int, failures: list[str]) -> None:
    shown = "\n".join(f"  - {f}" for f in failures[:10])
    more = f"\n  ... and {len(failures) - 10} more" if len(failures) > 10 else ""
    raise SchemeContractError(
        f"scheme {label} breaks the contract on {world} ranks ({len(failures)} failure(s)):\n{shown}{more}\n"
        f"Reproduce: zen_analysis.comm.scheme_contract.check_scheme({label}, ranks=({world},), seed={seed})",
        world=world,
        seed=seed,
    )
