"""The synthetic CTR data (``data.source=criteo-synth``) and DeepFM: deterministic, cached generation; batches seeded by
(seed, split, step, worker); ids inside their fields, ranked by frequency and skewed to the first eighth of the id
space; the click rate; the table's gradient rows; the config's checks."""

import json
import multiprocessing as mp

import numpy as np
import pytest
import torch

from zen_analysis import recipes
from zen_analysis.config import DataConfig, ExperimentConfig, ModelConfig, apply_overrides
from zen_analysis.workload import ctr
from zen_analysis.workload.batches import open_data, prepare
from zen_analysis.workload.models import CTRInputs, DeepFM, build_model, input_embedding_name, model_loss

SMALL = DataConfig(source="criteo-synth", ctr_rows=50_000, ctr_train_samples=20_000, ctr_val_samples=2_000)


def test_generation_is_deterministic_and_prepare_is_cached(tmp_path, monkeypatch):
    p1 = prepare(SMALL, progress=False)
    mtime = (p1.data_dir / "train" / "ids.npy").stat().st_mtime_ns
    p2 = prepare(SMALL, progress=False)
    assert p2 == p1 and (p2.data_dir / "train" / "ids.npy").stat().st_mtime_ns == mtime
    assert p1.vocab_size == sum(p1.field_cardinalities) and p1.num_fields == 26 and p1.num_dense == 13
    assert p1.vocab_size == int(ctr.field_cardinalities(50_000).sum()) >= 50_000
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path))  # generated again elsewhere: the same bytes
    p3 = prepare(SMALL, progress=False)
    assert p3.data_dir != p1.data_dir and p3.corpus_sha256 == p1.corpus_sha256
    other = prepare(DataConfig(**{**SMALL.__dict__, "ctr_seed": 1}), progress=False)
    assert other.corpus_sha256 != p1.corpus_sha256


def _prepare_in_child(cfg: DataConfig, queue) -> None:
    queue.put(prepare(cfg, progress=False).corpus_sha256)


def test_prepare_is_safe_from_several_processes():
    cfg = DataConfig(**{**SMALL.__dict__, "ctr_seed": 7})
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_prepare_in_child, args=(cfg, queue)) for _ in range(3)]
    for p in procs:
        p.start()
    digests = {queue.get(timeout=60) for _ in procs}
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert digests == {prepare(cfg, progress=False).corpus_sha256}
    assert not [f for f in ctr.data_dir_for(cfg).rglob("*.tmp")]


def test_batches_are_a_pure_function_of_seed_split_step_worker():
    p = prepare(SMALL, progress=False)
    d = open_data(p, seq_len=1, seed=7)
    (x1, y1), (x2, y2) = (
        open_data(p, seq_len=1, seed=7).batch("train", step=3, worker=5, batch_size=64) for _ in range(2)
    )
    assert isinstance(x1, CTRInputs) and x1.ids_BF.shape == (64, 26) and x1.dense_BD.shape == (64, 13)
    assert x1.ids_BF.dtype == torch.int64 and x1.dense_BD.dtype == torch.float32 and y1.dtype == torch.float32
    assert all(torch.equal(a, b) for a, b in zip(x1, x2)) and torch.equal(y1, y2)
    for other in ({"step": 4, "worker": 5}, {"step": 3, "worker": 6}):
        assert not torch.equal(d.batch("train", batch_size=64, **other)[0].ids_BF, x1.ids_BF)
    assert not torch.equal(d.batch("val", step=3, worker=5, batch_size=64)[0].ids_BF, x1.ids_BF)
    x8, _ = open_data(p, seq_len=1, seed=8).batch("train", step=3, worker=5, batch_size=64)
    assert not torch.equal(x8.ids_BF, x1.ids_BF)
    assert set(y1.unique().tolist()) <= {0.0, 1.0} and d.input_dims == {"num_fields": 26, "num_dense": 13}


def test_ids_lie_in_their_fields_ranked_by_training_frequency():
    p = prepare(SMALL, progress=False)
    ids_NF = np.load(p.data_dir / "train" / "ids.npy")
    offsets_F, cards_F = np.array(p.field_offsets), np.array(p.field_cardinalities)
    assert offsets_F[0] == 0 and np.array_equal(offsets_F[1:], np.cumsum(cards_F)[:-1])  # one after another
    local_NF = ids_NF - offsets_F
    assert (local_NF >= 0).all() and (local_NF < cards_F).all()
    assert list(cards_F) == sorted(cards_F) and cards_F.min() >= 2  # data.ctr_field_order=cardinality
    for f in range(26):
        counts = np.bincount(local_NF[:, f], minlength=cards_F[f])
        assert (np.diff(counts) <= 0).all(), f"field {p.field_names[f]}: id 0 is not the most frequent value"
    assert sorted(p.field_names, key=lambda n: int(n[1:])) == [f"C{i}" for i in range(1, 27)]


def test_the_first_eighth_of_the_id_space_holds_most_of_a_batchs_distinct_ids():
    """With the recipe's 1M rows, smallest field first: each field's frequent head sits at its offset; Criteo's own
    order puts the large fields' heads in several partitions, over the same samples."""
    shares = {}
    for order in ("cardinality", "criteo"):
        cfg = DataConfig(
            source="criteo-synth",
            ctr_rows=recipes.deepfm().data.ctr_rows,
            ctr_train_samples=20_000,
            ctr_val_samples=1_000,
            ctr_field_order=order,
        )
        p = prepare(cfg, progress=False)
        ids_K = open_data(p, seq_len=1, seed=0).batch("train", step=0, worker=0, batch_size=1024)[0].ids_BF.unique()
        shares[order] = float((ids_K < p.vocab_size // 8).float().mean())
    assert shares["cardinality"] > 0.5 and shares["criteo"] < 0.3, shares


def test_labels_click_at_criteos_rate_and_carry_signal():
    p = prepare(SMALL, progress=False)
    for split, rate in p.positive_rate.items():
        assert abs(rate - ctr.POSITIVE_RATE) < 0.02, (split, rate)
    assert p.val_teacher_loss < p.val_base_rate_loss - 0.05  # something to learn below the base rate's entropy
    meta = json.loads((p.data_dir / "meta.json").read_text())
    assert meta["params"] == ctr.params_of(SMALL) and meta["corpus_bytes"] == p.corpus_bytes


def _deepfm(sparse: bool = False) -> tuple[DeepFM, object]:
    data = open_data(prepare(SMALL, progress=False), seq_len=1, seed=0)
    cfg = ModelConfig(arch="deepfm", hidden_size=8, mlp_sizes=(32, 32), sparse_embedding=sparse)
    torch.manual_seed(0)
    return build_model(cfg, vocab_size=data.vocab_size, max_seq_len=1, **data.input_dims), data


@pytest.mark.parametrize("sparse", [False, True])
def test_the_tables_gradient_rows_are_exactly_the_batch_ids(sparse):
    model, data = _deepfm(sparse)
    assert input_embedding_name(model) == "embed.weight" and model.embed.weight.shape == (data.vocab_size, 9)
    x, y = data.batch("train", step=0, worker=0, batch_size=256)
    model_loss(model, x, y).backward()
    grad = model.embed.weight.grad
    assert grad.is_sparse == sparse
    grad = grad.to_dense()
    rows = grad.abs().sum(1).nonzero().squeeze(1)
    assert torch.equal(rows, x.ids_BF.unique())
    assert (grad[rows] != 0).all()  # every element of a touched row: the FM vector and the first-order weight


def test_deepfm_is_initialised_from_the_torch_seed_alone():
    (a, _), (b, _) = _deepfm(), _deepfm()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.arch=llama"], "model.arch=deepfm goes with data.source=criteo-synth"),
        (["data.source=stdlib"], "model.arch=deepfm goes with data.source=criteo-synth"),
        (["train.seq_len=4"], "set train.seq_len=1"),
        (["perturb.spikes=shuffle"], "set perturb.spikes=none"),
        (["model.tie_embeddings=true", "capture.natural=false"], "no output embedding to tie"),
        (["model.mlp_sizes=400,0"], "model.mlp_sizes must be"),
        (["data.ctr_zipf=0"], "data.ctr_zipf"),
        (["data.ctr_rows=10"], "data.ctr_rows"),
        (["data.ctr_field_order=random"], "data.ctr_field_order"),
    ],
)
def test_deepfm_configs_are_checked(overrides, message):
    with pytest.raises(ValueError, match=message):
        apply_overrides(recipes.deepfm(), overrides)  # (the smoke's data.ctr_* would be refused with stdlib first)


def test_deepfm_only_fields_are_refused_elsewhere():
    with pytest.raises(ValueError, match="model.mlp_sizes applies to model.arch=deepfm only"):
        apply_overrides(recipes.smoke(), ["model.mlp_sizes=64"])
    with pytest.raises(ValueError, match="data.ctr_rows apply to data.source=criteo-synth only"):
        apply_overrides(recipes.smoke(), ["data.ctr_rows=1000"])
    back = ExperimentConfig.from_json(recipes.deepfm().to_json())
    assert back == recipes.deepfm() and back.model.mlp_sizes == (400, 400, 400) and back.train.seq_len == 1
