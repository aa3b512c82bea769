"""``register(ddp_model, mode="natural")``'s hook (:mod:`zen_analysis.sync.ddp`): the sparse parameters'
gradients summed losslessly by the scheme over their non-zeros (a table by rows or by elements; a dense ``.grad``
or ``nn.Embedding(sparse=True)``'s sparse one), every other gradient of the bucket by DDP's own all-reduce, and what
it did counted in :class:`NaturalState`.

Shape suffixes: K non-zero rows on this rank, D values per row (the table's width), R rows of the table, V rows of the
table too (``sum_VD``: the whole summed vocabulary table), N elements of the flat gradient."""

# no ``from __future__ import annotations`` here: DDP checks the hook's annotations at runtime
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from zen_analysis.comm import build_scheme
from zen_analysis.sync.compressed import Stats
from zen_analysis.sync.lookups import LookedUp
from zen_analysis.wire.dtypes import positive_zeros
from zen_analysis.wire.exchange import ring_bytes_sent
from zen_analysis.wire.inflight import hold, outside_python_tls, then
from zen_analysis.wire.rows import nonzero_rows, sparse_rows


@dataclass
class NaturalState(Stats):
    """Per-rank state of the natural-sparsity hook: the scheme, the parameters whose gradients it sums (by
    identity), and what it did: bytes the scheme sent, buckets summed by the scheme / densely."""

    params: tuple = ()
    scheme: str = "zen"
    group: dist.ProcessGroup | None = None
    seed: int = 0
    granularity: str = "rows"
    """``rows``: a table's gradient summed by rows (one index and ``dim`` values per row touched); ``elements``: one
    index per non-zero element."""
    row_source: str = "ids"
    """By rows, for a dense ``.grad``: ``ids``, the ids the embedding's forward looked up (:mod:`.lookups`: checked
    against a row-wise pass on the first step), or ``scan``, a row-wise pass over the table every step."""
    mode: str = "natural"
    sparse_buckets: int = 0
    dense_buckets: int = 0
    names: dict = field(default_factory=dict, repr=False)
    _scheme: object = field(default=None, repr=False)
    _ids: frozenset = field(default=frozenset(), repr=False)
    _lookups: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.granularity not in ("rows", "elements"):
            raise ValueError(f"granularity must be 'rows' or 'elements', got {self.granularity!r}")
        if self.row_source not in ("ids", "scan"):
            raise ValueError(f"row_source must be 'ids' or 'scan', got {self.row_source!r}")
        if self.planner is not None and self.scheme != "auto":
            raise ValueError(f"a planner chooses the scheme: pass scheme='auto', not {self.scheme!r}")
        self._scheme = build_scheme("allreduce" if self.scheme == "auto" else self.scheme, seed=self.seed)
        self._ids = frozenset(id(p) for p in self.params)
        if not self.sparse_names:
            self.sparse_names = tuple(self.names.get(id(p), "?") for p in self.params)


def bucket_offsets(bucket: dist.GradBucket) -> list[tuple[torch.Tensor, int, int]]:
    """(parameter, start, end) of each parameter's gradient inside the bucket's flat buffer."""
    buffer = bucket.buffer()
    base, size = buffer.data_ptr(), buffer.element_size()
    out = []
    for p, g in zip(bucket.parameters(), bucket.gradients()):
        start = (g.data_ptr() - base) // size
        out.append((p, start, start + g.numel()))
    return out


def _sum_sparse_rows(state: NaturalState, param: nn.Parameter, grad: torch.Tensor) -> torch.Tensor:
    """The average over the group of a sparse COO gradient (``nn.Embedding(sparse=True)``): its rows summed by the
    scheme by rows (:meth:`~zen_analysis.comm.schemes.base.CommScheme.sum_rows`; by elements, over a dense copy's
    non-zeros), returned as the union's rows."""
    rows_K, values_K = sparse_rows(grad)
    values_KD = values_K.reshape(rows_K.numel(), -1)
    world = dist.get_world_size(state.group)
    name = state.names.get(id(param), "?")
    if state.granularity == "rows":
        scheme = state._pick(name, indices=rows_K, numel=grad.shape[0], width=values_KD.shape[1], dtype=values_KD.dtype)
        u_rows, u_values = scheme.sum_rows(rows_K, values_KD, grad.shape[0], group=state.group)
        state.bytes_sent += int(scheme.last_measured()["bytes_sent"].sum())
        # coalesced, as stock DDP's sum is: the union's rows are distinct, so this only sorts them (the values keep
        # their bits), and an optimizer then adds sparse tensors by merging rows, not by appending them (SGD's
        # momentum buffer: appended rows are summed into the parameter one by one, another rounding)
        values = (u_values / world).reshape(-1, *grad.shape[1:])
        return torch.sparse_coo_tensor(u_rows[None], values, grad.shape, check_invariants=False).coalesce()
    flat_N = torch.zeros(grad.shape.numel(), dtype=grad.dtype, device=grad.device)  # summed in its own dtype
    flat_N.view(grad.shape[0], -1).index_copy_(0, rows_K, values_KD)  # coalesced: each row once
    scheme = state._pick(name, dense=flat_N, dtype=flat_N.dtype)
    scheme.run(flat_N, group=state.group)  # in place, over the non-zeros only
    state.bytes_sent += int(scheme.last_measured()["bytes_sent"].sum())
    sum_VD = flat_N.view(grad.shape[0], -1)
    rows = nonzero_rows(sum_VD)
    values = (sum_VD[rows] / world).reshape(-1, *grad.shape[1:])
    # sorted unique rows by construction: coalesced, nothing to check
    return torch.sparse_coo_tensor(rows[None], values, grad.shape, is_coalesced=True, check_invariants=False)


def _sum_dense(state: NaturalState, p: nn.Parameter, grad_N: torch.Tensor, world: int) -> None:
    """A sparse parameter's dense gradient (its slice of the bucket) summed and averaged in place: by rows for a
    table (the rows its forward looked up, :mod:`.lookups`, or those a row-wise pass finds), by elements
    otherwise. With the looked-up rows nothing scans or writes the whole table: the union's rows are written,
    already averaged, and every other row keeps its +0.0."""
    name = state.names.get(id(p), "?")
    if state.granularity == "rows" and p.dim() == 2:
        table = grad_N.view(p.shape)
        rows = _looked_up(state, p, table)
        if rows is None and state.planner is not None:
            rows = nonzero_rows(table)  # found once, for the sketch and the sum
        scheme = state._pick(name, indices=rows, numel=p.shape[0], width=p.shape[1], dtype=table.dtype)
        if rows is None:
            scheme.run_rows(table, group=state.group)
            table.div_(world)
        else:
            u_rows, u_values = scheme.sum_rows(rows, table[rows], p.shape[0], group=state.group)
            table.index_fill_(0, rows, 0)  # a row this rank held that the union does not carry (allreduce) is zero
            table[u_rows.to(table.device)] = positive_zeros(u_values.to(table.device) / world)
        if id(p) in state._lookups:
            state._lookups[id(p)].last_union = None if rows is None else u_rows.to(table.device)
    else:
        scheme = state._pick(name, dense=grad_N, dtype=grad_N.dtype)
        scheme.run(grad_N, group=state.group)  # in place, over the non-zeros only
        grad_N.div_(world)
    state.bytes_sent += int(scheme.last_measured()["bytes_sent"].sum())


def _looked_up(state: NaturalState, p: nn.Parameter, table_RD: torch.Tensor) -> torch.Tensor | None:
    """The rows ``p``'s gradient can be non-zero in this step, or None (scan): the ids its embedding looked up
    (checked against a row-wise pass on the first step), plus any row of the last step's union still non-zero (a
    gradient not zeroed between steps keeps it)."""
    look = state._lookups.get(id(p))
    rows = look.take(table_RD.device) if look is not None else None
    if rows is None or (not look.checked and not look.check(rows, table_RD)):
        return None
    last = look.last_union
    if last is not None and last.numel():
        stale = last[~torch.isin(last, rows)]
        kept = stale[table_RD[stale].ne(0).any(dim=1)]
        if kept.numel():
            rows = torch.unique(torch.cat([rows, kept]))
    return rows


@outside_python_tls
def natural_hook(state: NaturalState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook of natural sparsity: the state's parameters' gradients summed with its sparse
    scheme (lossless), the rest of the bucket all-reduced densely; averaged over the group, as DDP does."""
    buffer = bucket.buffer()
    world = dist.get_world_size(state.group)
    if buffer.is_sparse:  # nn.Embedding(sparse=True): a bucket of its own, one sparse COO gradient
        (p,) = bucket.parameters()
        if id(p) in state._ids:
            return _completed(state, bucket, [p], buffer.numel(), lambda: _sum_sparse_rows(state, p, buffer))
        parts = [(p, 0, buffer.numel())]
    else:
        parts = bucket_offsets(bucket)
    if not any(id(p) in state._ids for p, _, _ in parts):  # the stock path, asynchronous: overlaps backward
        state.dense_buckets += 1
        state._finish_bucket(
            {
                "params": [state.names.get(id(p), "?") for p, _, _ in parts],
                "numel": buffer.numel(),
                "path": "allreduce",
                "bytes_sent": None,
                "seconds": None,
            },
            bucket.is_last(),
        )
        state.allreduce_bytes_sent += _ring(buffer.numel(), buffer.element_size(), state.group)
        hold(buffer)
        work = dist.all_reduce(buffer, group=state.group, async_op=True)
        # gloo's thread runs the callback and destroys it (GIL) after DDP's wait is over: then() tracks it to exit
        return then(work.get_future(), lambda fut: fut.value()[0].div_(world))

    def mixed() -> torch.Tensor:
        # nothing is written into the bucket before its last collective, so a hook that raises leaves it as it was:
        # the dense rest is summed in a packed copy first, every sparse gradient but the last in a copy of its own
        # (a bucket rarely holds two), the last in place (a scheme writes after its own last collective)
        dense = [(s, e) for p, s, e in parts if id(p) not in state._ids]
        packed = None
        if dense:  # the bucket's other gradients: one dense all-reduce of them packed together
            packed = torch.cat([buffer[s:e] for s, e in dense])
            hold(packed)
            dist.all_reduce(packed, group=state.group)
            state.allreduce_bytes_sent += _ring(packed.numel(), packed.element_size(), state.group)
        sparse = [(p, s, e) for p, s, e in parts if id(p) in state._ids]
        summed = []
        for i, (p, s, e) in enumerate(sparse):
            grad_N = buffer[s:e] if i == len(sparse) - 1 else buffer[s:e].clone()
            _sum_dense(state, p, grad_N, world)  # averaged too: by rows, over the union's rows alone
            summed.append((s, e, grad_N))
        for s, e, grad_N in summed[:-1]:
            buffer[s:e].copy_(grad_N)
        if packed is not None:
            packed.div_(world)
        at = 0
        for s, e in dense:
            buffer[s:e].copy_(packed[at : at + e - s])
            at += e - s
        return buffer

    return _completed(state, bucket, [p for p, _, _ in parts], buffer.numel(), mixed)


def _ring(numel: int, element_bytes: int, group) -> int:
    return ring_bytes_sent(numel, element_bytes, dist.get_world_size(group), dist.get_rank(group))


def _completed(state: NaturalState, bucket, params, numel: int, fn) -> torch.futures.Future[torch.Tensor]:
    """Run ``fn`` inside the hook (a bucket holding a sparse parameter) and return its result as a done future."""
    state.sparse_buckets += 1
    sent0, t0 = state.bytes_sent, time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    state.sync_s += seconds
    state.exposed_s += seconds
    state._finish_bucket(
        {
            "params": [state.names.get(id(p), "?") for p in params],
            "numel": numel,
            "path": state._scheme.name,
            "bytes_sent": state.bytes_sent - sent0,
            "seconds": seconds,
        },
        bucket.is_last(),
    )
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(out)
    return fut


def looked_up_tables(module: nn.Module, params, names: dict) -> dict:
    """A :class:`~.lookups.LookedUp` per dense-gradient table among ``params`` that one ``nn.Embedding`` holds
    (by the parameter's id); any other table is found by a row-wise pass."""
    holders: dict[int, list] = {}
    for m in module.modules():
        for q in m.parameters(recurse=False):
            holders.setdefault(id(q), []).append(m)
    out = {}
    for p in params:
        (m, *more) = holders.get(id(p), [None])
        if not more and isinstance(m, nn.Embedding) and not m.sparse and p.dim() == 2:
            out[id(p)] = LookedUp(m, name=names.get(id(p), "embedding"))
    return out
