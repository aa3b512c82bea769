"""Row-granular sums (``CommScheme.sum_rows`` / ``run_rows``) on real gloo ranks: every scheme bit for bit equal to
``all_reduce`` of the dense tables on integer-valued rows, its byte model by rows equal to what its run passed to
collectives, dense ``.grad`` and ``nn.Embedding(sparse=True)`` gradients alike."""

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from torch import nn

from zen_analysis.comm import SCHEMES, build_scheme
from zen_analysis.ranks.procs import fork_launch
from zen_analysis.wire.rows import canonical_rows, nonzero_rows, sparse_rows

# (rows in the table, dim, how each rank picks its rows)
CASES = [(1, 3, "full"), (40, 8, "random"), (257, 4, "skewed"), (64, 16, "empty_on_0"), (33, 5, "same")]


def _rows_of(kind: str, rank: int, num_rows: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(17 * rank + num_rows)
    if kind == "full":
        return torch.arange(num_rows)
    if kind == "empty_on_0" and rank == 0:
        return torch.zeros(0, dtype=torch.long)
    if kind == "skewed":  # every rank in the first eighth of the table (one owner's range for sparse_ps)
        return torch.unique(torch.randint(0, max(1, num_rows // 8), (num_rows // 4,), generator=gen))
    if kind == "same":
        gen = torch.Generator().manual_seed(num_rows)
    return torch.unique(torch.randint(0, num_rows, (num_rows // 2,), generator=gen))


def _table(kind: str, rank: int, num_rows: int, dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    rows = _rows_of(kind, rank, num_rows)
    gen = torch.Generator().manual_seed(rank)
    vals = torch.randint(-3, 4, (rows.numel(), dim), generator=gen).to(dtype)
    vals[:, 0] = torch.where(vals[:, 0] == 0, 1, vals[:, 0])  # every row passed holds a non-zero
    x = torch.zeros(num_rows, dim, dtype=dtype)
    x[rows] = vals
    return rows, x


def _body(rank, world, dtype):
    out = []
    for case_id, (R, D, kind) in enumerate(CASES):
        rows, x = _table(kind, rank, R, D, dtype)
        ref = x.clone()
        dist.all_reduce(ref)
        for name in SCHEMES:
            scheme = build_scheme(name)
            u_rows, u_vals = scheme.sum_rows(rows, x[rows], R)
            got = torch.zeros_like(x)
            got[u_rows] = u_vals
            coo_ok = torch.equal(got, ref) and u_rows.unique().numel() == u_rows.numel()
            measured = scheme.last_measured()
            dense = x.clone()
            scheme.run_rows(dense)  # rows found by a row-wise pass
            hinted = x.clone()
            scheme.run_rows(hinted, rows=torch.cat([rows, rows[:1]]))  # a superset, a duplicate: fine
            out.append((case_id, name, coo_ok, torch.equal(dense, ref), torch.equal(hinted, ref), measured))
    return out


@pytest.mark.parametrize("world", [pytest.param(2, marks=pytest.mark.smoke), 3, 4])
def test_every_scheme_sums_rows_bit_for_bit_and_its_row_byte_model_is_exact(world):
    results = fork_launch(_body, world, torch.float32)
    for rank_results in results:
        for case_id, name, coo_ok, dense_ok, hinted_ok, _ in rank_results:
            assert coo_ok and dense_ok and hinted_ok, (name, CASES[case_id], coo_ok, dense_ok, hinted_ok)
    keys = ["rank", "phase", "kind"]
    for case_id, (R, D, kind) in enumerate(CASES):
        sets = [_rows_of(kind, r, R) for r in range(world)]
        for name in SCHEMES:
            model = build_scheme(name).traffic(sets, R, width=D)
            measured = pd.concat([m for rr in results for (c, n, *_, m) in rr if c == case_id and n == name])
            a = model.groupby(keys)[["bytes_sent", "bytes_received", "calls"]].sum().sort_index()
            b = measured.groupby(keys)[["bytes_sent", "bytes_received", "calls"]].sum().sort_index()
            pd.testing.assert_frame_equal(a, b, check_dtype=False, obj=f"{name} row traffic on {CASES[case_id]}")


def _half_body(rank, world):
    rows, x = _table("random", rank, 50, 6, torch.bfloat16)
    ref = x.float()
    dist.all_reduce(ref)
    out = {}
    for name in SCHEMES:
        u_rows, u_vals = build_scheme(name).sum_rows(rows, x[rows], 50)
        got = torch.zeros(50, 6)
        got[u_rows] = u_vals.float()
        out[name] = (u_vals.dtype == torch.bfloat16, torch.equal(got, ref))
    return out


def test_half_precision_rows_keep_their_dtype_and_sum_exactly_when_representable():
    for per_rank in fork_launch(_half_body, 3):
        assert all(dtype_ok and equal for dtype_ok, equal in per_rank.values()), per_rank


def _embedding_body(rank, world):
    """The same ids through a dense and a sparse=True embedding: the summed gradients agree, and with the dense
    gradient all-reduced."""
    torch.manual_seed(0)
    dense_emb, sparse_emb = nn.Embedding(30, 4), nn.Embedding(30, 4, sparse=True)
    sparse_emb.weight.data.copy_(dense_emb.weight.data)
    ids = torch.randint(0, 30, (2, 7), generator=torch.Generator().manual_seed(rank))
    w = torch.arange(4, dtype=torch.float32) + 1  # integer-valued gradients
    (dense_emb(ids) * w).sum().backward()
    (sparse_emb(ids) * w).sum().backward()
    ref = dense_emb.weight.grad.clone()
    dist.all_reduce(ref)
    out = {}
    for name in SCHEMES:
        rows_K, vals_KD = sparse_rows(sparse_emb.weight.grad)
        u_rows, u_vals = build_scheme(name).sum_rows(rows_K, vals_KD, 30)
        from_sparse = torch.sparse_coo_tensor(u_rows.unsqueeze(0), u_vals, (30, 4)).to_dense()
        g = dense_emb.weight.grad.clone()
        build_scheme(name).run_rows(g, rows=ids.reshape(-1))  # the batch's token ids as the rows
        out[name] = (torch.equal(from_sparse, ref), torch.equal(g, ref))
    return out


def test_dense_and_sparse_embedding_gradients_sum_by_rows_like_all_reduce():
    for per_rank in fork_launch(_embedding_body, 2):
        assert all(a and b for a, b in per_rank.values()), per_rank


def _disagree_body(rank, world):
    scheme = build_scheme("zen")
    try:
        if rank == 0:
            scheme.sum_rows(torch.tensor([1]), torch.ones(1, 4), 10)
        else:
            scheme.run(torch.zeros(40))  # same numel of elements, but not by rows
    except ValueError as exc:
        return str(exc)
    return None


def test_a_rank_summing_by_rows_and_one_by_elements_are_refused():
    for message in fork_launch(_disagree_body, 2):
        assert message is not None and "width" in message, message


def _bad_rows_body(rank, world):
    out = {}
    for name in ("zen", "sparcml"):  # a check riding on the first count exchange, and one in a call of its own
        rows = torch.tensor([12 if rank == 0 else 3])  # rank 0's row is outside the 10-row table
        try:
            build_scheme(name).sum_rows(rows, torch.ones(1, 4), 10)
            out[name] = None
        except ValueError as exc:
            out[name] = (type(exc).__name__, str(exc))
    return out


def test_invalid_rows_on_one_rank_raise_on_every_rank_and_nobody_waits():
    bad, good = fork_launch(_bad_rows_body, 2)
    for name in ("zen", "sparcml"):
        assert bad[name][0] == "ValueError" and "[0, 10)" in bad[name][1], bad
        assert good[name][0] == "RanksDisagreeError" and "(invalid rows)" in good[name][1], good


def test_row_helpers_check_their_input():
    rows, vals = canonical_rows(torch.tensor([3, 1, 3]), torch.tensor([[1.0], [2.0], [4.0]]), 5)
    assert rows.tolist() == [1, 3] and vals.tolist() == [[2.0], [5.0]]
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        canonical_rows(torch.tensor([5]), torch.ones(1, 2), 5)
    with pytest.raises(ValueError, match="one row of values each"):
        canonical_rows(torch.tensor([1, 2]), torch.ones(3, 2), 5)
    with pytest.raises(ValueError, match="2-D"):
        nonzero_rows(torch.ones(4))
    g = torch.zeros(6, 3)
    g[[1, 4], 2] = 1.0
    assert nonzero_rows(g).tolist() == [1, 4]
    assert nonzero_rows(g.to_sparse(1)).tolist() == [1, 4]


def test_the_loop_takes_rows_from_the_ids_of_an_untied_embedding_and_scans_a_tied_one():
    from zen_analysis.sync.sparse import SparseSync

    class LM(nn.Module):
        def __init__(self, tied: bool):
            super().__init__()
            self.embed = nn.Embedding(20, 4)
            self.head = nn.Linear(4, 20, bias=False)
            if tied:
                self.head.weight = self.embed.weight

        def get_input_embeddings(self):
            return self.embed

        def forward(self, ids):
            return self.head(self.embed(input=ids))  # by keyword: the pre-hook still sees the ids

    for tied, source in ((False, "ids"), (True, "scan")):
        sync = SparseSync("zen")
        model = LM(tied)
        sync.attach(model)
        assert sync.row_source == source
        model(torch.tensor([[3, 5, 3]])).sum().backward()
        rows = sync._rows_seen(torch.device("cpu"))
        assert (rows is None) if tied else rows.tolist() == [3, 5]
