"""``ExperimentConfig``: the sections composed into one experiment, and the checks that span sections."""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
import typing
from dataclasses import dataclass, field
from typing import Any

from zen_analysis.config import overrides
from zen_analysis.config.capture import CaptureConfig
from zen_analysis.config.data import CTR_SOURCES, DataConfig
from zen_analysis.config.dist import DistConfig
from zen_analysis.config.local_sgd import LocalSGDSection
from zen_analysis.config.model import ModelConfig
from zen_analysis.config.names import AUTO, METHODS, MethodName, StepMethod
from zen_analysis.config.perturb import PerturbConfig
from zen_analysis.config.sync import SyncConfig
from zen_analysis.config.train import TrainConfig
from zen_analysis.paths import check_run_id


def _on(switch: object) -> bool:
    """Whether a :data:`~zen_analysis.config.names.Switch` is set on explicitly (``auto`` is not: it resolves)."""
    return switch != AUTO and bool(switch)


@dataclass(kw_only=True)
class ExperimentConfig:
    name: str = "custom"
    """Recipe name; the run id starts with it."""
    run_id: str = ""
    """Directory name under data/runs and data/traces; empty: ``<name>-<timestamp>`` at launch."""
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)
    local_sgd: LocalSGDSection = field(default_factory=LocalSGDSection)
    perturb: PerturbConfig = field(default_factory=PerturbConfig)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Cross-section checks; re-run after editing fields of a built config."""
        if self.run_id:
            check_run_id(self.run_id)
        self._check_finite()
        for sub in (
            self.model,
            self.data,
            self.train,
            self.capture,
            self.dist,
            self.sync,
            self.local_sgd,
            self.perturb,
        ):
            sub.__post_init__()
        if self.capture.enabled and self.capture.natural and _on(self.model.tie_embeddings):
            raise ValueError(
                "capture.natural needs untied embeddings: with tied input/output embeddings the LM head "
                "gives every embedding row a gradient. Set model.tie_embeddings=false or capture.natural=false."
            )
        self._check_ctr()
        self._check_sharding()
        missing = self._sparse_embedding_missing()
        if _on(self.model.sparse_embedding) and missing:
            raise ValueError(
                f"model.sparse_embedding=true gives the embedding a sparse gradient: set {', '.join(missing)}, or "
                "model.sparse_embedding=auto (on where it applies)"
            )
        if _on(self.sync.overlap) and not self._overlap_applies():
            raise ValueError(
                "sync.overlap overlaps a per-step sum with backward on a real link: not with a local SGD "
                "method (no per-step sum) nor perturb.bandwidth_gbps (its emulated delay sleeps after "
                "backward); use dist.network=netlab for a slow link, or sync.overlap=auto (on where it applies)"
            )
        method = self.sync.method  # a_edit, or another local SGD method given a sync time
        time_based = method == MethodName.A_EDIT or (method in METHODS and self.local_sgd.sync_time_s > 0)
        if time_based and (self.train.eval_every or self.capture.enabled):
            raise ValueError(
                "time-based syncs (a_edit, local_sgd.sync_time_s): workers run different numbers of steps; "
                "set train.eval_every=0 and capture.enabled=false"
            )
        c = self.capture
        if c.enabled and c.pseudo != "off" and method not in METHODS:
            raise ValueError(
                f"capture.pseudo records the pseudo-gradients of local SGD: set sync.method to one of "
                f"{list(METHODS)} (got {method!r}), or capture.pseudo=off"
            )
        if method in METHODS and self.local_sgd.compress == StepMethod.DENSE and self.sync.scheme != "allreduce":
            raise ValueError(
                f"local_sgd.compress=dense sums the pseudo-gradients with a dense all-reduce, so "
                f"sync.scheme={self.sync.scheme!r} has nothing to sum: set local_sgd.compress=natural or topk"
            )
        if (
            c.enabled
            and not c.natural
            and c.pseudo == "off"
            and (c.topk_scope == "none" or (c.topk_scope == "tensor" and not c.topk_tensors))
        ):
            raise ValueError(
                "capture is enabled but records nothing: set capture.natural, capture.topk_scope=bucket, "
                "capture.topk_scope=tensor with capture.topk_tensors, or capture.pseudo (local SGD)"
            )

    def _check_sharding(self) -> None:
        """``dist.sharding=fsdp``: FSDP2 shards the LLM families' transformers, sums every step (a dense or Zen
        reduce-scatter: no top-k, no local SGD) and holds no sparse gradient; what it cannot go with is an error
        saying what to set."""
        if self.dist.sharding != "fsdp":
            return
        s, m = self.sync, self.model
        refusals = {
            f"model.arch={m.arch} (FSDP2 shards the LLM families: llama, gpt2, opt, gemma2)": m.arch
            not in ("llama", "gpt2", "opt", "gemma2"),
            f"sync.method={s.method} (dense is stock FSDP2; natural sums the embedding by Zen's reduce-scatter)": (
                s.method not in (StepMethod.DENSE, StepMethod.NATURAL)
            ),
            f"sync.scheme={s.scheme} (the embedding unit's reduce-scatter is zen or auto)": s.scheme
            not in ("allreduce", "zen", "auto"),
            # a tied table is one parameter in two FSDP2 units (the embedding's and the head's), which torch
            # refuses at the first step on every rank; a pretrained checkpoint's own tie is resolved before this
            "model.tie_embeddings=true, or a checkpoint that ties them (FSDP2 shards the embedding and the output "
            "layer in separate units, which cannot share a parameter): set model.tie_embeddings=false, which gives "
            "the output layer its own copy": _on(m.tie_embeddings),
            "model.sparse_embedding=true (FSDP2 shards dense gradients)": m.sparse_embedding is True,
            "sync.overlap=true (FSDP2 overlaps its own collectives)": s.overlap is True,
            "train.embedding_update=lazy (the sharded table steps with the rest)": self.train.embedding_update
            == "lazy",
            "perturb.bandwidth_gbps (use dist.network=netlab for a slow link)": self.perturb.bandwidth_gbps > 0,
            "sync.granularity=elements (the reduce-scatter sums rows)": s.granularity != "rows",
            "sync.gpus_per_node > 1 (Zen's hierarchical mode is DDP's)": s.gpus_per_node > 1,
            "capture.topk_scope (top-k capture is of DDP buckets; FSDP captures the natural gradient): set "
            "capture.topk_scope=none": self.capture.enabled and self.capture.topk_scope != "none",
        }
        bad = [what for what, refused in refusals.items() if refused]
        if bad:
            raise ValueError(f"dist.sharding=fsdp cannot go with {'; '.join(bad)}")

    def _sparse_embedding_missing(self) -> list[str]:
        """The settings a sparse embedding gradient needs that this config lacks (empty: it applies). Tied embeddings
        give every row a gradient through the LM head; the top-k sync compresses dense buckets."""
        needs = {
            "model.tie_embeddings=false": not _on(self.model.tie_embeddings),
            "sync.method=dense or natural": self.sync.method != StepMethod.TOPK,
            "dist.sharding=none": self.dist.sharding == "none",
        }
        return [k for k, ok in needs.items() if not ok]

    def _overlap_applies(self) -> bool:
        """Whether there is a per-step sum to start during backward on a real link: not under a local SGD method,
        not with ``perturb.bandwidth_gbps`` (its emulated delay sleeps after backward)."""
        return self.sync.method not in METHODS and self.perturb.bandwidth_gbps <= 0 and self.dist.sharding == "none"

    def resolved(self) -> ExperimentConfig:
        """A copy with every ``auto`` switch (:data:`~zen_analysis.config.names.Switch`) made the bool it comes to:
        ``model.sparse_embedding`` on with untied embeddings and no top-k (``sync.method`` not ``topk``),
        ``sync.overlap`` on where a per-step sum runs on a real link; a model built from config untied
        (``model.tie_embeddings``) and trained next-token (``model.objective``); a pretrained checkpoint's own tie
        and objective are read from it by :func:`zen_analysis.workload.pretrained.resolve`, before this. What a run
        builds its model and sync from (:func:`zen_analysis.train.loop.train`); the config itself keeps ``auto``,
        so ``--set`` over a recipe, a stored config, a resume and a reused run all see the setting as given. Both
        switches are lossless (the same numbers up to summation order), so ``auto`` turns on only what keeps the
        run's meaning."""
        out = copy.deepcopy(self)
        if not out.model.pretrained:  # a checkpoint's own are read by zen_analysis.workload.pretrained.resolve
            out.model.tie_embeddings = _on(out.model.tie_embeddings)
            out.model.objective = "causal" if out.model.objective == AUTO else out.model.objective
        if out.model.sparse_embedding == AUTO:
            out.model.sparse_embedding = not self._sparse_embedding_missing()
        if out.sync.overlap == AUTO:
            out.sync.overlap = self._overlap_applies()
        return out

    def _check_finite(self) -> None:
        """Every float setting of every section is a finite number, checked before the sections' own range checks
        (a NaN passes those: each comparison with it is false) and before any rank starts; generic over the
        sections' fields, so a new float field is covered without a line here. Loading and ``--set`` check the
        same as they parse (:func:`overrides.from_dict`); this catches fields edited on a built config."""
        for section in dataclasses.fields(self):
            sub = getattr(self, section.name)
            if not dataclasses.is_dataclass(sub):
                continue
            hints = typing.get_type_hints(type(sub))
            for f in dataclasses.fields(sub):
                value, tp = getattr(sub, f.name), hints[f.name]
                if tp is float and isinstance(value, numbers.Real) and not math.isfinite(value):
                    raise ValueError(overrides.not_finite(f"{section.name}.{f.name}", value))

    def _check_ctr(self) -> None:
        """DeepFM trains on CTR samples and only on them; a sample is one "token" (``train.seq_len=1``); the loss
        spikes of ``perturb.spikes`` corrupt token sequences and are refused for it."""
        deepfm, ctr = self.model.arch == "deepfm", self.data.source in CTR_SOURCES
        if deepfm != ctr:
            raise ValueError(
                f"model.arch={self.model.arch} cannot train on data.source={self.data.source}: "
                "model.arch=deepfm goes with data.source=criteo-synth, and only with it"
            )
        if not deepfm:
            return
        if self.train.seq_len != 1:
            raise ValueError(
                f"model.arch=deepfm trains on samples, not sequences: set train.seq_len=1 (got "
                f"{self.train.seq_len}), so the tokens counted per step are the samples"
            )
        if self.perturb.spikes != "none":
            raise ValueError(
                "perturb.spikes corrupts token sequences (the EDiT loss-spike ablation); it has no "
                "meaning for CTR samples: set perturb.spikes=none with model.arch=deepfm"
            )

    @property
    def num_workers(self) -> int:
        """Total simulated workers W = ranks x workers per rank."""
        return self.dist.num_ranks * self.train.workers_per_rank

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step over all ranks."""
        return self.num_workers * self.train.batch_per_worker

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return overrides.to_json(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "") -> ExperimentConfig:
        """``d`` checked and typed; a config in the earlier key format is mapped, with a notice naming ``source``."""
        return overrides.from_dict(cls, d, source=source)

    @classmethod
    def from_json(cls, text: str, source: str = "") -> ExperimentConfig:
        return overrides.from_json(cls, text, source=source)
