"""characterize(): tables equal the metric functions applied by hand, caching, granularity switch."""

import pandas as pd
import pytest
import torch

from zen_analysis import paths
from zen_analysis.capture.traces import SparseGrad, TraceWriter, write_manifest
from zen_analysis.sparsity import densification_ratio, imbalance_ratios, jaccard, overlap_ratio, skewness_ratio
from zen_analysis.sparsity.characterize import CharacterizeOptions, characterize, load_tables, worker_counts
from zen_analysis.zen import hash_owner

R, D = 64, 4  # embedding rows x width
W, STEPS = 4, 3


def _rows(step, worker):
    gen = torch.Generator().manual_seed(100 * step + worker)
    return torch.unique(torch.randint(0, R // 2, (9,), generator=gen))  # skewed towards low rows


def _topk(step, worker):
    gen = torch.Generator().manual_seed(7 + 100 * step + worker)
    return torch.unique(torch.randint(0, 50, (6,), generator=gen))


@pytest.fixture
def run_id():
    rid = "synthetic-characterize"
    tdir = paths.trace_dir(rid)
    writers = {r: TraceWriter(tdir, rank=r, run_id=rid, world_size=2, steps_per_shard=2) for r in range(2)}
    for step in range(STEPS):
        for w in range(W):
            rank = w // 2
            emb = torch.zeros(R, D)
            emb[_rows(step, w)] = 1.0
            writers[rank].add(SparseGrad.from_dense(emb, step=step, worker=w, rank=rank, tensor="emb", kind="natural"))
            idx = _topk(step, w)
            writers[rank].add(SparseGrad(step, w, rank, "lin", "topk", (10, 5), idx, torch.ones(idx.numel())))
        for wr in writers.values():
            wr.end_step()
    for wr in writers.values():
        wr.close()
    tensors = {
        "emb": {"kind": "natural", "shape": [R, D], "numel": R * D},
        "lin": {"kind": "topk", "shape": [10, 5], "numel": 50},
    }
    write_manifest(tdir, {"run_id": rid, "tensors": tensors})
    return rid


def test_worker_counts():
    assert worker_counts(1) == [] and worker_counts(8) == [2, 4, 8] and worker_counts(12) == [2, 4, 8, 12]


def test_tables_match_the_metrics_by_hand(run_id):
    t = load_tables(run_id)
    assert set(t) == {"density", "overlap", "densification", "skew", "drift", "imbalance"}
    emb = {w: _rows(1, w) for w in range(W)}
    lin = {w: _topk(1, w) for w in range(W)}

    d = t["density"].query("step == 1 and tensor == 'emb'").set_index("worker")
    assert (d["granularity"] == "row").all() and (d["numel"] == R).all()
    assert d.loc[2, "nnz"] == emb[2].numel()

    o = t["overlap"].query("step == 1 and tensor == 'lin' and worker_a == 0 and worker_b == 3")
    assert o["overlap"].item() == pytest.approx(overlap_ratio(lin[0], lin[3]))
    assert len(t["overlap"].query("step == 1 and tensor == 'lin'")) == W * (W - 1) // 2

    g = t["densification"].query("step == 1 and tensor == 'emb'").set_index("n")["gamma"]
    assert list(g.index) == [2, 4]
    assert g[4] == pytest.approx(densification_ratio(list(emb.values())))
    assert g[2] == pytest.approx(densification_ratio([emb[0], emb[1]]))

    s = t["skew"].query("step == 1 and tensor == 'lin' and num_partitions == 8").set_index("worker")
    assert s.loc[1, "skewness"] == pytest.approx(skewness_ratio(lin[1], 50, 8))
    assert sum(s.loc[1, "shares"]) == pytest.approx(1.0)
    union = torch.unique(torch.cat(list(lin.values())))
    assert s.loc[-1, "skewness"] == pytest.approx(skewness_ratio(union, 50, 8))

    i = t["imbalance"].query("step == 1 and tensor == 'emb' and n == 4").set_index("owner")
    assert tuple(i.loc["hash", ["push", "pull"]]) == pytest.approx(
        imbalance_ratios(list(emb.values()), R, hash_owner(4), 4)
    )

    dr = t["drift"].query("tensor == 'emb' and step == 1 and next_step == 2").set_index("worker")
    assert dr.loc[0, "jaccard"] == pytest.approx(jaccard(emb[0], _rows(2, 0)))
    assert sorted(t["drift"]["step"].unique()) == [0, 1]


def test_element_granularity_for_natural_tensors(run_id):
    out = characterize(run_id, options=CharacterizeOptions(natural_granularity="element"), progress=False)
    d = pd.read_parquet(out / "density.parquet").query("tensor == 'emb' and step == 0")
    assert (d["granularity"] == "element").all() and (d["numel"] == R * D).all()
    o = pd.read_parquet(out / "overlap.parquet").query("tensor == 'emb' and step == 0")
    assert not o.empty and o["overlap"].between(0, 1).all()
    # a touched row is fully non-zero: element-level overlap equals row-level overlap
    assert o.query("worker_a == 0 and worker_b == 1")["overlap"].item() == pytest.approx(
        overlap_ratio(_rows(0, 0), _rows(0, 1))
    )


def test_results_are_reused_until_the_traces_change(run_id):
    out = characterize(run_id, progress=False)
    mtime = (out / "overlap.parquet").stat().st_mtime_ns
    assert characterize(run_id, progress=False) == out
    assert (out / "overlap.parquet").stat().st_mtime_ns == mtime
    shard = sorted(paths.trace_dir(run_id).glob("*.parquet"))[0]
    shard.touch()
    characterize(run_id, progress=False)
    assert (out / "overlap.parquet").stat().st_mtime_ns != mtime


def test_claims_table_judges_each_claim(run_id):
    from zen_analysis.sparsity.report import claims_table, to_markdown
    from zen_analysis.sparsity.workloads import combined_tables

    claims = claims_table(combined_tables([run_id]))
    assert set(claims["claim"].str[:2]) == {"C1", "C2", "C3"}
    assert set(claims["workload"]) == {
        "synthetic-characterize: synthetic-characterize embedding",
        "synthetic-characterize: synthetic-characterize top-5%",
    }
    c2 = claims[claims["claim"].str.startswith("C2")]
    assert c2["holds"].map(lambda h: h in (True, False)).all()
    skew = claims[claims["claim"] == "C3 skewness at 128 partitions"]
    assert (skew["holds"] == "n/a").all()  # no LSTM among these workloads
    md = to_markdown(claims)
    assert md.count("\n") == len(claims) + 1 and md.startswith("| claim |")


def test_a_pretrained_workload_is_set_beside_the_random_init_llama(run_id):
    from zen_analysis.sparsity.report import AGAINST, claims_table
    from zen_analysis.sparsity.workloads import combined_tables

    tables = combined_tables([run_id])
    natural = "synthetic-characterize: synthetic-characterize embedding"

    def labelled(workload):
        return {n: t[t["workload"] == natural].assign(workload=workload) for n, t in tables.items()}

    pretrained, llama = labelled("minilm: pretrained embedding"), labelled("default: llama embedding")
    for t in llama.values():  # the random-init Llama's overlap a little higher, its skew a little lower
        for column, shift in (("overlap", 0.1), ("gamma", 0.5), ("skewness", -1.0)):
            if column in t:
                t[column] = t[column] + shift
    both = {n: pd.concat([pretrained[n], llama[n]], ignore_index=True) for n in tables}
    claims = claims_table(both).set_index(["claim", "workload"])[AGAINST]
    ours = claims.xs("minilm: pretrained embedding", level="workload")
    assert ours["C1 overlap roughly normal, wide"].endswith("workers share less of their non-zeros")
    assert ours["C2 gamma grows with n, stays < n"].endswith("the sum densifies less")
    assert ours["C3 >60% of non-zeros in partition 1 of 8"].endswith(": the same")
    assert ours["C3 skewness at 128 partitions"].endswith("the busiest partition holds more over its fair share")
    assert (claims.xs("default: llama embedding", level="workload") == "").all()
    assert AGAINST not in claims_table(combined_tables([run_id])).columns  # only beside a pretrained workload


def test_a_small_difference_from_the_random_init_llama_is_called_about_the_same():
    from zen_analysis.sparsity.report import _against

    c3 = "C3 >60% of non-zeros in partition 1 of 8"

    def against(value, ref, base="default: llama "):
        rows = [{"claim": c3, "workload": base + "embedding", "_value": ref}]
        return _against({"claim": c3, "workload": "minilm-smoke: pretrained embedding", "_value": value}, rows)

    assert against(0.58, 0.57) == "58% against 57% in partition 1: about the same (within 5%)"
    assert against(0.29, 0.24).endswith(": more skewed to the first ids")
    assert against(0.29, 0.24, base="smoke: llama ").endswith(": more skewed to the first ids")  # the fallback
    assert against(0.29, 0.24, base="opt: opt ") == ""  # no random-init Llama to set it beside


def test_bucket_views_name_the_parameters_that_hold_the_non_zeros():
    """A bucket of two parameters, a: [0, 100) and b: [100, 400): every worker's non-zeros fall 3 in a, 1 in b,
    so a holds 75% of the non-zeros on 25% of the elements; with 4 partitions of 100, partition 0 is a."""
    from zen_analysis.sparsity.workloads import bucket_parameter_shares, bucket_partition_shares

    rid = "synthetic-bucket"
    tdir = paths.trace_dir(rid)
    writer = TraceWriter(tdir, rank=0, run_id=rid, world_size=1, steps_per_shard=2)
    for step in range(2):
        for w in range(3):
            idx = torch.tensor([w, 10 + w, 50 + w, 200 + w])
            writer.add(SparseGrad(step, w, 0, "bucket00", "topk", (400,), idx, torch.ones(4)))
        writer.end_step()
    writer.close()
    write_manifest(
        tdir,
        {
            "run_id": rid,
            "world_size": 1,
            "workers_per_rank": 3,
            "num_workers": 3,
            "finished": True,
            "config": {"name": "syn", "model": {"arch": "llama"}, "capture": {"topk_ratio": 0.05}},
            "tensors": {
                "bucket00": {"kind": "topk", "shape": [400], "numel": 400, "params": [["a", 0, 100], ["b", 100, 400]]}
            },
        },
    )
    per_param = bucket_parameter_shares(rid).set_index("parameter")
    assert per_param.loc["a", "size_share"] == 0.25 and per_param.loc["a", "nnz_share"] == 0.75
    assert per_param.loc["b", "nnz_share"] == 0.25
    shares = bucket_partition_shares([rid], num_partitions=4)
    assert len(shares) == 1 and shares.loc[0, "workload"] == "syn: llama top-5% of buckets"
    assert shares.loc[0, "holds"] == "a .. b (2 tensors)"
    assert [round(shares.loc[0, f"p{i}"], 6) for i in range(4)] == [0.75, 0.0, 0.25, 0.0]
