"""A Criteo-like click-through-rate dataset generated offline, and seeded batches of it: DeepFM's data.

Context: the Zen paper's recommendation workload is DeepFM on Criteo (per-GPU batch 1024; embedding gradient
density 2.80% per GPU, 5.2% once 8 GPUs are aggregated; most non-zeros in the first of 8 contiguous partitions of the
index space). Criteo cannot be downloaded here, so ``data.source=criteo-synth`` generates samples with its shape:

* **26 categorical fields**, their cardinalities Criteo Kaggle's (:data:`CRITEO_KAGGLE_CARDINALITIES`) scaled down
  proportionally to ``data.ctr_rows`` rows in all, each field at least 2 rows. Within a field, values are drawn from
  a Zipf law of exponent ``data.ctr_zipf`` and then **renumbered by descending frequency in the training split**
  (id 0 of a field is its most frequent value), as the word-level LSTM's vocabulary is ordered.
* **One global id space**: the fields follow one another (field ``f``'s ids are ``offset_f + [0, cardinality_f)``),
  so one embedding table holds every field's rows. Ids ordered by frequency inside contiguous fields are what makes
  the non-zero rows of a batch skewed across contiguous partitions of the table: each field's frequent head sits at
  its offset. Which fields come first decides which partitions get those heads: ``data.ctr_field_order=cardinality``
  (the default) lays the fields out smallest first, so the first eighth of the id space holds every small field
  whole and the heads of the first large ones, and most of a batch's distinct ids (the paper's observation);
  ``criteo`` keeps C1..C26, whose third field alone fills 30% of the space, and then the largest fields' heads land
  in several partitions. Samples and labels are the same under both orders: only the ids' layout differs. The
  paper does not say how its DeepFM lays ids out; ``cardinality`` is a choice, the layout that shows its skew.
* **13 dense features** (``data.ctr_dense``): heavy-tailed counts, ``log1p``-transformed as Criteo's usually are.
* **Labels from a fixed random teacher** (seeded): an FM-style logit = bias + a weight per id + the standardized
  dense features . u + the pairwise interactions of small random per-id vectors (:data:`TEACHER_DIM` wide), each
  part scaled to a fixed standard deviation (:data:`TEACHER_STD`) and the bias set so the training split's mean
  click probability is Criteo's :data:`POSITIVE_RATE`; label ~ Bernoulli(sigmoid(logit)). A student that learns the
  frequent ids' weights and the dense part gets below the base rate's entropy; ``meta.json`` records both that
  entropy and the teacher's own loss on the validation split (the floor).

:func:`prepare` writes ``data/ctr/criteo-synth-<params hash>/{train,val}/{ids,dense,labels}.npy`` and ``meta.json``
(written last: its presence means the rest is complete); it is idempotent and safe to call from several processes
(a file lock; every file written atomically). :class:`CTRData` reads the files as memmaps and, like
:class:`zen_analysis.workload.batches.TokenData`, draws batches as a pure function of (seed, split, step, worker).

Density: a batch of B samples looks up F = 26 rows each, so at most 26 B of the R rows have a gradient (26,624 at the
paper's B = 1,024): a per-worker density of 2.80% needs R below about 950k even if no id repeated; with Zipf ids
far fewer are distinct, and the density at the recipe's 1M rows is well under the paper's.

Shapes: N samples of a split, F fields (26), D dense features, B samples of a batch, R rows of the id space.

Shape suffixes: F categorical fields, C categories of one field (its cardinality), N examples of a split, B examples of
a batch, D dense features, K dimensions of the teacher's factor vectors.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from zen_analysis import paths
from zen_analysis.atomic import atomic_path, atomic_write_json, file_lock
from zen_analysis.config import DataConfig
from zen_analysis.workload.models import CTRInputs

CRITEO_KAGGLE_CARDINALITIES = (
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
)
"""Distinct values of the categorical fields C1..C26 in the training set of Criteo's Kaggle Display Advertising
Challenge (45,840,617 samples, no frequency threshold), as DLRM's Kaggle preprocessing counts them: 33,762,577 in
all."""
POSITIVE_RATE = 0.256
"""Criteo Kaggle's share of clicks (about 25.6%)."""
TEACHER_DIM = 4
"""Width of the teacher's per-id interaction vectors."""
TEACHER_STD = {"ids": 1.0, "pairs": 0.5, "dense": 0.7}
"""Standard deviation (over the training split) of each part of the teacher's logit, before the bias."""
GENERATOR_VERSION = 1
"""Part of the cache key: bump it when the generator changes what it writes."""

_SPLIT_IDS = {"train": 0, "val": 1}
_FILES = ("ids", "dense", "labels")  # <split>/<name>.npy
_STREAMS = {"teacher": 0, "ids": 1, "dense_law": 2, "dense": 3, "labels": 4}  # independent seeded RNG streams


def field_cardinalities(total_rows: int) -> np.ndarray:
    """(26,) int64, in Criteo's order C1..C26: each Criteo Kaggle cardinality times ``total_rows`` / 33,762,577,
    rounded, at least 2 (a field of one value carries nothing)."""
    real_F = np.asarray(CRITEO_KAGGLE_CARDINALITIES, dtype=np.float64)
    return np.maximum(2, np.rint(real_F * total_rows / real_F.sum())).astype(np.int64)


def field_layout(cards_F: np.ndarray, order: str) -> np.ndarray:
    """(F,) the Criteo field index of each column, in id-space order: smallest cardinality first (ties in Criteo's
    order) for ``cardinality``, C1..C26 for ``criteo``."""
    if order == "cardinality":
        return np.argsort(cards_F, kind="stable")
    return np.arange(len(cards_F))


def params_of(cfg: DataConfig) -> dict:
    """What the generated files depend on (their cache key)."""
    return {
        "source": cfg.source,
        "version": GENERATOR_VERSION,
        "rows": cfg.ctr_rows,
        "zipf": cfg.ctr_zipf,
        "dense": cfg.ctr_dense,
        "train_samples": cfg.ctr_train_samples,
        "val_samples": cfg.ctr_val_samples,
        "field_order": cfg.ctr_field_order,
        "seed": cfg.ctr_seed,
    }


def data_dir_for(cfg: DataConfig) -> Path:
    digest = hashlib.sha256(json.dumps(params_of(cfg), sort_keys=True).encode()).hexdigest()[:16]
    return paths.ctr_dir() / f"{cfg.source}-{digest}"


@dataclass(frozen=True)
class PreparedCTR:
    """Where a generated CTR dataset lives and what it holds (the run's ``data.json`` and the manifest's ``corpus``;
    ``corpus_*`` and ``vocab_size`` are named as a text corpus's are, so run summaries read both alike)."""

    data_dir: Path
    corpus_name: str
    corpus_sha256: str
    """sha256 over every array written (train then val: ids, dense, labels)."""
    corpus_bytes: int
    vocab_size: int
    """Embedding rows in all: the sum of the field cardinalities."""
    num_fields: int
    num_dense: int
    num_train_samples: int
    num_val_samples: int
    field_names: list[str]
    """Criteo's name of each field, in id-space order."""
    field_cardinalities: list[int]
    field_offsets: list[int]
    """First global id of each field, in id-space order."""
    positive_rate: dict[str, float]
    """Share of clicks per split."""
    val_base_rate_loss: float
    """Log-loss on the validation split of always predicting the training split's click rate (its entropy)."""
    val_teacher_loss: float
    """Log-loss on the validation split of the teacher's own probabilities (what no student can beat on average)."""
    params: dict

    def to_dict(self) -> dict:
        return {**asdict(self), "data_dir": str(self.data_dir)}

    @classmethod
    def from_dict(cls, d: dict) -> PreparedCTR:
        return cls(**{**d, "data_dir": Path(d["data_dir"])})


def prepared_for_run(cfg: DataConfig, run_dir: Path) -> PreparedCTR:
    """The data a launcher prepared for this run (``run_dir/data.json``), else :func:`prepare` it here."""
    record = run_dir / "data.json"
    if record.exists():
        prepared = PreparedCTR.from_dict(json.loads(record.read_text()))
        if (prepared.data_dir / "meta.json").exists():
            return prepared
    return prepare(cfg, progress=False)


def _zipf_ids(rng: np.random.Generator, n: int, card: int, s: float) -> np.ndarray:
    """(n,) int64 Zipf ranks in [0, card): rank k with probability proportional to (k + 1) ** -s (inverse CDF)."""
    cdf = np.cumsum(np.arange(1, card + 1, dtype=np.float64) ** -s)
    return np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"), card - 1)


def _dense(cfg: DataConfig, split: str, n: int) -> np.ndarray:
    """(n, D) float32: log1p of heavy-tailed counts, floor(exp(mu_d + sigma_d z)), one (mu, sigma) per feature."""
    law = np.random.default_rng([cfg.ctr_seed, _STREAMS["dense_law"]])
    mu_D, sigma_D = law.uniform(0.0, 3.0, cfg.ctr_dense), law.uniform(0.5, 1.5, cfg.ctr_dense)
    z_ND = np.random.default_rng([cfg.ctr_seed, _STREAMS["dense"], _SPLIT_IDS[split]]).standard_normal(
        (n, cfg.ctr_dense)
    )
    return np.log1p(np.floor(np.exp(mu_D + sigma_D * z_ND))).astype(np.float32)


def _teacher_parts(
    cfg: DataConfig,
    cards_F: np.ndarray,
    local_NF: np.ndarray,
    dense_ND: np.ndarray,
    dense_stats: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """(3, N) float64: the teacher's unscaled logit parts per sample (ids' weights, pairwise interactions, dense),
    from the Zipf ranks ``local_NF`` (Criteo field order) before any renumbering; its parameters come from the seed."""
    n = local_NF.shape[0]
    ids_N, sum_NK, sq_N = np.zeros(n), np.zeros((n, TEACHER_DIM)), np.zeros(n)
    for f, card in enumerate(cards_F):
        rng = np.random.default_rng([cfg.ctr_seed, _STREAMS["teacher"], f])
        w_C, v_CK = rng.standard_normal(card), rng.standard_normal((card, TEACHER_DIM))
        ids_N += w_C[local_NF[:, f]]
        v_NK = v_CK[local_NF[:, f]]
        sum_NK += v_NK
        sq_N += (v_NK * v_NK).sum(1)
    pairs_N = 0.5 * ((sum_NK * sum_NK).sum(1) - sq_N)  # sum over field pairs of <v_f, v_g> (the FM identity)
    u_D = np.random.default_rng([cfg.ctr_seed, _STREAMS["teacher"], len(cards_F)]).standard_normal(dense_ND.shape[1])
    mean_D, std_D = dense_stats
    return np.stack([ids_N, pairs_N, ((dense_ND - mean_D) / std_D) @ u_D])


def _log_loss(p_N: np.ndarray, y_N: np.ndarray) -> float:
    p_N = np.clip(p_N, 1e-12, 1 - 1e-12)
    return float(-np.mean(y_N * np.log(p_N) + (1 - y_N) * np.log1p(-p_N)))


def generate(cfg: DataConfig, *, progress: bool = False) -> tuple[dict[str, dict[str, np.ndarray]], dict]:
    """The two splits' arrays (``ids`` (N, F) int32 global ids in id-space order, ``dense`` (N, D) float32,
    ``labels`` (N,) uint8) and their meta, as a pure function of the config's ``ctr_*`` fields."""

    cards_F = field_cardinalities(cfg.ctr_rows)
    sizes = {"train": cfg.ctr_train_samples, "val": cfg.ctr_val_samples}
    local = {}  # split -> (N, F) Zipf ranks, Criteo field order
    for split, n in sizes.items():
        local[split] = np.empty((n, len(cards_F)), dtype=np.int64)
        for f, card in enumerate(tqdm(cards_F, desc=f"ctr {split} ids", disable=not progress, leave=False)):
            local[split][:, f] = _zipf_ids(
                np.random.default_rng([cfg.ctr_seed, _STREAMS["ids"], _SPLIT_IDS[split], f]), n, int(card), cfg.ctr_zipf
            )
    dense = {split: _dense(cfg, split, n) for split, n in sizes.items()}
    stats = (dense["train"].mean(0, dtype=np.float64), dense["train"].std(0, dtype=np.float64) + 1e-12)
    parts = {split: _teacher_parts(cfg, cards_F, local[split], dense[split], stats) for split in sizes}
    scale_3 = np.array([TEACHER_STD[k] for k in ("ids", "pairs", "dense")]) / parts["train"].std(1)
    logits = {split: scale_3 @ p for split, p in parts.items()}
    lo, hi = -30.0, 30.0  # the bias that makes the training split's mean click probability POSITIVE_RATE
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.mean(1 / (1 + np.exp(-(logits["train"] + mid)))) < POSITIVE_RATE else (lo, mid)
    prob = {split: 1 / (1 + np.exp(-(z + (lo + hi) / 2))) for split, z in logits.items()}
    draws = {
        s: np.random.default_rng([cfg.ctr_seed, _STREAMS["labels"], _SPLIT_IDS[s]]).random(len(p))
        for s, p in prob.items()
    }
    labels = {s: (draws[s] < p).astype(np.uint8) for s, p in prob.items()}
    # renumber each field's values by descending training frequency (ties by Zipf rank), then lay the fields out
    order_F = field_layout(cards_F, cfg.ctr_field_order)
    offsets_F = np.concatenate([[0], np.cumsum(cards_F[order_F])[:-1]])
    out = {
        split: {"ids": np.empty((n, len(cards_F)), dtype=np.int32), "dense": dense[split], "labels": labels[split]}
        for split, n in sizes.items()
    }
    for col, f in enumerate(order_F):
        counts_C = np.bincount(local["train"][:, f], minlength=cards_F[f])
        new_of_old_C = np.empty(cards_F[f], dtype=np.int64)
        new_of_old_C[np.argsort(-counts_C, kind="stable")] = np.arange(cards_F[f])
        for split in sizes:
            out[split]["ids"][:, col] = offsets_F[col] + new_of_old_C[local[split][:, f]]
    rate = float(labels["train"].mean())
    meta = {
        "num_rows": int(cards_F.sum()),
        "num_fields": len(cards_F),
        "num_dense": cfg.ctr_dense,
        "field_names": [f"C{f + 1}" for f in order_F],
        "field_cardinalities": [int(c) for c in cards_F[order_F]],
        "field_offsets": [int(o) for o in offsets_F],
        "positive_rate": {split: float(labels[split].mean()) for split in sizes},
        "val_base_rate_loss": _log_loss(np.full(sizes["val"], rate), labels["val"]),
        "val_teacher_loss": _log_loss(prob["val"], labels["val"]),
        "params": params_of(cfg),
    }
    return out, meta


def prepare(cfg: DataConfig, *, progress: bool = True) -> PreparedCTR:
    """Generate the dataset of ``cfg`` under ``data/ctr/`` unless it is there already; returns where it is."""
    out = data_dir_for(cfg)
    meta_path = out / "meta.json"
    with file_lock(out / ".lock"):
        if not meta_path.exists():
            arrays, meta = generate(cfg, progress=progress)
            h, size = hashlib.sha256(), 0
            for split, named in arrays.items():
                for name, a in named.items():
                    h.update(np.ascontiguousarray(a).tobytes())
                    with atomic_path(out / split / f"{name}.npy") as tmp, open(tmp, "wb") as f:
                        np.save(f, a)
                    size += (out / split / f"{name}.npy").stat().st_size
            atomic_write_json(meta_path, {**meta, "corpus_sha256": h.hexdigest(), "corpus_bytes": size})
    meta = json.loads(meta_path.read_text())
    return PreparedCTR(
        data_dir=out,
        corpus_name=cfg.source,
        corpus_sha256=meta["corpus_sha256"],
        corpus_bytes=meta["corpus_bytes"],
        vocab_size=meta["num_rows"],
        num_fields=meta["num_fields"],
        num_dense=meta["num_dense"],
        num_train_samples=meta["params"]["train_samples"],
        num_val_samples=meta["params"]["val_samples"],
        field_names=meta["field_names"],
        field_cardinalities=meta["field_cardinalities"],
        field_offsets=meta["field_offsets"],
        positive_rate=meta["positive_rate"],
        val_base_rate_loss=meta["val_base_rate_loss"],
        val_teacher_loss=meta["val_teacher_loss"],
        params=meta["params"],
    )


class CTRData:
    """Seeded batches from a generated CTR dataset: the training loop's data for ``model.arch=deepfm``."""

    def __init__(self, prepared: PreparedCTR, *, seed: int) -> None:
        self.prepared = prepared
        self.vocab_size = prepared.vocab_size
        self.seed = seed
        self._splits = {
            split: tuple(np.load(prepared.data_dir / split / f"{name}.npy", mmap_mode="r") for name in _FILES)
            for split in _SPLIT_IDS
        }

    @property
    def input_dims(self) -> dict[str, int]:
        """What :func:`zen_analysis.workload.models.build_model` needs from the data besides ``vocab_size``."""
        return {"num_fields": self.prepared.num_fields, "num_dense": self.prepared.num_dense}

    def batch(self, split: str, *, step: int, worker: int, batch_size: int) -> tuple[CTRInputs, torch.Tensor]:
        """(inputs, targets): ``CTRInputs(ids (B, F) int64, dense (B, D) float32)`` and the click labels (B,)
        float32 of ``batch_size`` samples drawn with replacement by (seed, split, step, worker)."""
        ids_NF, dense_ND, labels_N = self._splits[split]
        rng = np.random.default_rng([self.seed, _SPLIT_IDS[split], step, worker])
        rows_B = np.sort(rng.integers(0, len(labels_N), size=batch_size))  # sorted: the memmap reads go forward
        ids_BF, dense_BD = ids_NF[rows_B].astype(np.int64), np.asarray(dense_ND[rows_B])
        inputs = CTRInputs(torch.from_numpy(ids_BF), torch.from_numpy(dense_BD))
        return inputs, torch.from_numpy(labels_N[rows_B].astype(np.float32))
