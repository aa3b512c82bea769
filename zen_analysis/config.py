"""Experiment configuration: one dataclass per concern, composed into :class:`ExperimentConfig`.

Configs travel as JSON (the launcher writes ``config.json`` and every rank reads it back), so every field is a
plain value. Recipes (``zen_analysis.recipes``) are functions returning complete configs; the only way to tweak
one from the command line is ``--set section.field=value`` (see :func:`apply_overrides`), never a new flag.

User mistakes raise ``ValueError`` with the fix in the message; ``assert`` is kept for internal invariants.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import typing
from dataclasses import dataclass, field
from typing import Any

from zen_analysis.paths import check_run_id

ARCHS = ("llama", "gpt2", "lstm")
DATA_SOURCES = ("stdlib", "files", "hub")
BACKENDS = ("auto", "gloo", "nccl")
LAUNCHERS = ("auto", "fork", "torchrun")
NETWORKS = ("loopback", "netlab")
SYNC_SCHEMES = (
    "allreduce", "zen", "bp_coo", "agsparse", "sparcml", "omnireduce", "sparse_ps", "auto",
    "post_local_sgd", "diloco", "edit", "a_edit",
)  # fmt: skip
"""Every ``sync.scheme`` (checked here, before any rank starts; a test keeps it equal to the registries in
``train.sync``, ``comm.schemes`` and ``local_sgd``)."""


@dataclass(kw_only=True)
class ModelConfig:
    arch: str = "llama"
    """``llama`` (LlamaForCausalLM), ``gpt2`` (GPT2LMHeadModel) or ``lstm`` (plain-torch LSTM LM)."""
    hidden_size: int = 256
    """Model width (LSTM: embedding and hidden size)."""
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 0
    """MLP width; 0 means the architecture's usual ratio (Llama 8/3 x hidden rounded to 64, GPT-2 4 x)."""
    tie_embeddings: bool = False
    """Tied input/output embeddings give every embedding row a gradient: natural sparsity disappears."""
    dropout: float = 0.0
    """0 keeps ranks bit-identical and runs reproducible."""
    adaptive_cutoffs: tuple[int, ...] = ()
    """LSTM only: adaptive-softmax cluster boundaries (e.g. 2048,8192); empty means a full softmax."""

    def __post_init__(self) -> None:
        if self.adaptive_cutoffs and self.arch != "lstm":
            raise ValueError("model.adaptive_cutoffs applies to model.arch=lstm only")
        if list(self.adaptive_cutoffs) != sorted(set(self.adaptive_cutoffs)) or any(c <= 0 for c in self.adaptive_cutoffs):
            raise ValueError("model.adaptive_cutoffs must be increasing positive ids")
        if self.arch not in ARCHS:
            raise ValueError(f"model.arch={self.arch!r} is unknown; choose one of {ARCHS}")
        if self.hidden_size <= 0 or self.num_layers <= 0:
            raise ValueError("model.hidden_size and model.num_layers must be positive")
        if self.arch != "lstm" and self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.hidden_size={self.hidden_size} must be divisible by model.num_heads={self.num_heads}"
            )


@dataclass(kw_only=True)
class DataConfig:
    source: str = "stdlib"
    """``stdlib`` (the running interpreter's standard-library .py files, offline), ``files`` or ``hub``."""
    files: tuple[str, ...] = ()
    """With source=files: text files or directories (all files below a directory are read)."""
    hub_dataset: str = ""
    """With source=hub: a Hugging Face dataset name for ``datasets.load_dataset`` (needs network)."""
    hub_config: str = ""
    hub_split: str = "train"
    text_field: str = "text"
    max_bytes: int = 0
    """Cap on the corpus size in bytes (whole documents, in a fixed order); 0 takes everything."""
    vocab_size: int = 8192
    """Size of the byte-level BPE trained locally on the corpus (the model's vocabulary)."""
    val_fraction: float = 0.02
    """Fraction of documents held out for validation (chosen by document hash, not position)."""

    def __post_init__(self) -> None:
        if self.source not in DATA_SOURCES:
            raise ValueError(f"data.source={self.source!r} is unknown; choose one of {DATA_SOURCES}")
        if self.source == "files" and not self.files:
            raise ValueError("data.source='files' needs data.files=path[,path...]")
        if self.source == "hub" and not self.hub_dataset:
            raise ValueError("data.source='hub' needs data.hub_dataset=<name on the Hugging Face hub>")
        if self.vocab_size < 300:
            raise ValueError("data.vocab_size must be >= 300 (256 byte symbols plus merges and specials)")
        if not 0.0 < self.val_fraction < 0.5:
            raise ValueError("data.val_fraction must be in (0, 0.5)")


@dataclass(kw_only=True)
class TrainConfig:
    num_steps: int = 60
    seq_len: int = 128
    batch_per_worker: int = 4
    """Sequences per worker micro-batch (the per-GPU batch of the simulated worker)."""
    workers_per_rank: int = 8
    """Virtual workers V per rank: each is one micro-batch whose gradient is captured separately."""
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 5
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    save_params: bool = False
    """Rank 0 writes the final parameters to ``<run_dir>/params.pt`` (for parity checks between schemes)."""
    """Global-norm clipping of the synchronised gradient; 0 turns it off."""
    seed: int = 1234
    eval_every: int = 0
    """Validation loss every this many steps (and at the end); 0: only at the end."""
    eval_batches: int = 4

    def __post_init__(self) -> None:
        for name in ("num_steps", "seq_len", "batch_per_worker", "workers_per_rank"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be >= 1")
        if self.lr <= 0:
            raise ValueError("train.lr must be positive")


@dataclass(kw_only=True)
class CaptureConfig:
    enabled: bool = True
    every: int = 10
    """Capture steps 0, every, 2*every, ..."""
    natural: bool = True
    """Record the input-embedding gradient (natural sparsity) of every worker."""
    topk_tensors: tuple[str, ...] = (
        "*layers.0.self_attn.q_proj.weight",
        "*layers.0.mlp.down_proj.weight",
        "*layers.1.mlp.up_proj.weight",
    )
    """fnmatch patterns of dense parameters recorded after DGC top-k compression."""
    topk_ratio: float = 0.05
    planner_topology: str = "paper-tcp25"
    """``scheme=auto``: the topology preset (or ``local-<n>``) Zen's planner prices the candidates on."""
    gpus_per_node: int = 0
    """``scheme=zen``: > 1 turns on Zen's hierarchical mode (dense reduce-scatter inside each node of this many
    ranks, Zen across nodes, all-gather inside); 0 is flat Zen over all ranks."""
    planner_steps: int = 3
    """``scheme=auto``: steps profiled (embedding synchronised densely meanwhile) before the planner decides."""
    """Fraction of elements kept by top-k (the paper uses 5%)."""
    topk_exact_below: int = 65536
    """Tensors with fewer elements use exact ``torch.topk``; larger ones DGC's sampled threshold."""
    topk_sample_ratio: float = 0.01
    """Fraction of elements sampled to estimate the top-k threshold (DGC)."""
    error_feedback: bool = True
    """Add each worker's unsent residual to its next captured gradient before selection (DGC)."""
    steps_per_shard: int = 5
    """Captured steps per Parquet shard; a shard is written atomically once full."""

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError("capture.every must be >= 1")
        if not 0.0 < self.topk_ratio <= 1.0:
            raise ValueError("capture.topk_ratio must be in (0, 1]")
        if not 0.0 < self.topk_sample_ratio <= 1.0:
            raise ValueError("capture.topk_sample_ratio must be in (0, 1]")
        if self.steps_per_shard < 1:
            raise ValueError("capture.steps_per_shard must be >= 1")


@dataclass(kw_only=True)
class DistConfig:
    num_ranks: int = 4
    backend: str = "auto"
    """``auto``: nccl when every rank has a GPU, else gloo."""
    launcher: str = "auto"
    """``auto``: fork on CPU, a torchrun subprocess when CUDA is available."""
    timeout_s: float = 120.0
    """A collective that waits longer fails with a clear error (hung or dead peer)."""
    master_addr: str = "127.0.0.1"
    """torchrun only: the rendezvous endpoint's host. Forked CPU ranks meet through a file store instead, and
    bind gloo to the loopback interface: nothing of theirs listens beyond loopback."""
    master_port: int = 0
    """torchrun only: the endpoint's port; 0 picks a free one. torchrun's c10d store listens on it on every
    interface (as torchrun always does)."""
    network: str = "loopback"
    """``netlab``: the ranks run in the emulated network (:mod:`zen_analysis.dist.netlab`, root only), each lab node
    behind a link of ``bandwidth_gbps``; the lab is built for the launch and removed after it. Changes time, not
    numbers."""
    bandwidth_gbps: float = 1.0
    """netlab only: each node's link, Gbit/s each way."""
    ranks_per_node: int = 1
    """netlab only: ranks sharing a lab node (loopback between them, the node's link to the others). Under
    torchrun, one torchrun per node, inside its namespace, meeting at node 0's lab address."""

    def __post_init__(self) -> None:
        if self.num_ranks < 1:
            raise ValueError("dist.num_ranks must be >= 1")
        if self.backend not in BACKENDS:
            raise ValueError(f"dist.backend={self.backend!r} is unknown; choose one of {BACKENDS}")
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"dist.launcher={self.launcher!r} is unknown; choose one of {LAUNCHERS}")
        if self.timeout_s <= 0:
            raise ValueError("dist.timeout_s must be positive")
        if self.network not in NETWORKS:
            raise ValueError(f"dist.network={self.network!r} is unknown; choose one of {NETWORKS}")
        if not self.bandwidth_gbps > 0:
            raise ValueError(f"dist.bandwidth_gbps must be positive, got {self.bandwidth_gbps}")
        if self.ranks_per_node < 1 or self.num_ranks % self.ranks_per_node:
            raise ValueError(f"dist.ranks_per_node={self.ranks_per_node} must divide dist.num_ranks={self.num_ranks}")


@dataclass(kw_only=True)
class SyncConfig:
    scheme: str = "allreduce"
    """Gradient synchronization plugged into the training loop: ``allreduce`` (dense) or a sparse scheme for
    the input embedding's gradient (``zen``, ``bp_coo``, ``agsparse``, ``sparcml``, ``omnireduce``,
    ``sparse_ps``; see ``zen_analysis.train.sync``), or ``auto``: Zen's planner picks zen, sparcml or dense
    all-reduce after profiling (``zen_analysis.zen.planner``)."""
    bucket_mb: float = 25.0
    """Dense gradients are flattened into buckets of about this size per collective."""
    hash_seed: int = 0
    """Seed of Zen's h0 for ``zen`` / ``bp_coo`` (rank 0's value is broadcast at start-up)."""
    compress: str = "none"
    """``none`` (natural sparsity: only the embedding is sparse) or ``topk``: DGC top-k with error feedback on
    every gradient bucket, then the scheme (compression sparsity, ``zen_analysis.zen.ddp``)."""
    topk_ratio: float = 0.05
    planner_topology: str = "paper-tcp25"
    """``scheme=auto``: the topology preset (or ``local-<n>``) Zen's planner prices the candidates on."""
    gpus_per_node: int = 0
    """``scheme=zen``: > 1 turns on Zen's hierarchical mode (dense reduce-scatter inside each node of this many
    ranks, Zen across nodes, all-gather inside); 0 is flat Zen over all ranks."""
    planner_steps: int = 3
    """``scheme=auto``: steps profiled (embedding synchronised densely meanwhile) before the planner decides."""
    zen_cache_mb: float = 2048.0
    """Zen's static hash sets (with their position tables and accumulators) kept per process, least recently
    used dropped first: 8 + 4 / world bytes per element of each synchronised tensor size."""

    def __post_init__(self) -> None:
        if self.zen_cache_mb <= 0:
            raise ValueError("sync.zen_cache_mb must be positive")
        if self.scheme not in SYNC_SCHEMES:
            raise ValueError(f"sync.scheme={self.scheme!r} is unknown; choose one of {SYNC_SCHEMES}")
        if self.compress == "topk" and self.scheme in ("auto", "post_local_sgd", "diloco", "edit", "a_edit"):
            raise ValueError(f"sync.compress=topk needs a scheme that sums tensors, not {self.scheme!r}")
        if self.bucket_mb <= 0:
            raise ValueError("sync.bucket_mb must be positive")
        if self.compress not in ("none", "topk"):
            raise ValueError(f"sync.compress must be 'none' or 'topk', got {self.compress!r}")
        if not 0 < self.topk_ratio <= 1:
            raise ValueError("sync.topk_ratio must be in (0, 1]")


@dataclass(kw_only=True)
class PerturbConfig:
    """Real perturbations for the local SGD experiments (EDiT issue): stragglers sleep inside the step."""

    straggler: str = "none"
    """none | consistent (rank ``straggler_rank`` always ``straggler_factor`` x slower) | random (each step, with
    probability ``straggler_prob``, one random rank sleeps ``straggler_kappa`` x its step time)."""
    straggler_rank: int = 0
    straggler_factor: float = 2.0
    straggler_prob: float = 0.1
    straggler_kappa: float = 1.0
    bandwidth_gbps: float = 0.0
    """> 0: every cross-worker all-reduce also sleeps latency_s + ring bytes / bandwidth (a slow network)."""
    latency_s: float = 0.0
    spikes: str = "none"
    """none | shuffle (tokens of each sequence permuted) | random (uniform random tokens) | repeat (each sequence
    one random token repeated, a degenerate off-domain batch): the batches rank ``spike_rank`` trains on every
    ``spike_every`` steps, to provoke loss spikes."""
    spike_rank: int = 0
    spike_every: int = 10
    spike_len: int = 1
    """Consecutive corrupted steps per period (a burst; e.g. one whole sync interval)."""
    spike_start: int = 0
    """First corrupted step (0: ``spike_every``); then every ``spike_every`` steps."""

    def __post_init__(self) -> None:
        if self.spikes not in ("none", "shuffle", "random", "repeat") or self.spike_every < 1:
            raise ValueError("perturb.spikes must be none, shuffle, random or repeat, and perturb.spike_every >= 1")
        if not 1 <= self.spike_len <= self.spike_every or self.spike_start < 0:
            raise ValueError("need 1 <= perturb.spike_len <= perturb.spike_every and perturb.spike_start >= 0")
        if self.bandwidth_gbps < 0 or self.latency_s < 0:
            raise ValueError("perturb.bandwidth_gbps and perturb.latency_s must be >= 0")
        if self.straggler not in ("none", "consistent", "random"):
            raise ValueError(f"perturb.straggler must be none, consistent or random, got {self.straggler!r}")
        if self.straggler_factor < 1 or not 0 <= self.straggler_prob <= 1 or self.straggler_kappa < 0:
            raise ValueError("need perturb.straggler_factor >= 1, 0 <= straggler_prob <= 1, straggler_kappa >= 0")


@dataclass(kw_only=True)
class LocalSGDSection:
    """Overrides of the local SGD method's defaults (``sync.scheme`` = post_local_sgd | diloco | edit; see
    ``zen_analysis.local_sgd``). Negative numbers and empty strings mean "the method's default"."""

    warmup_steps: int = -1
    """Synchronous steps before local training (edit, post_local_sgd: 10; diloco: 0)."""
    interval: int = 0
    """Steps between syncs, tau / H (default 8)."""
    outer_lr: float = -1.0
    outer_momentum: float = -1.0
    clip: float = -1.0
    """EDiT's pseudo-gradient clip (default 10; 0 = off)."""
    penalty: str = "default"
    """EDiT's penalty parts: ``default`` (the method's), ``none``, or a comma list of anomaly, weighting, clip."""
    granularity: str = ""
    """module | tensor | global (edit default: module)."""
    layerwise: bool = True
    """Sync each unit just before its forward (EDiT); false: all units before the model's forward."""
    prefetch: bool = True
    """Layer-wise: start the next unit's all-reduce (asynchronous) before this unit's forward runs."""
    ewma_warmup: int = -1
    """Syncs before the anomaly detector tests (default 10)."""
    sync_time_s: float = -1.0
    """A-EDiT (``a_edit``): seconds of wall-clock time between syncs (default 5)."""
    min_total_steps: int = -1
    """A-EDiT: a due sync is skipped (timer reset) if all workers together made fewer steps since the last."""
    step_weight: float = -1.0
    """A-EDiT: mix of step-count weights into the norm weights, w = (1 - r) w_norm + r K_m / sum K (default 0)."""

    def __post_init__(self) -> None:
        if self.granularity not in ("", "module", "tensor", "global"):
            raise ValueError(f"local_sgd.granularity must be module, tensor or global, got {self.granularity!r}")
        parts = {p.strip() for p in self.penalty.split(",") if p.strip()}
        if self.penalty not in ("default", "none") and not parts <= {"anomaly", "weighting", "clip"}:
            raise ValueError(f"local_sgd.penalty must be default, none or a list of anomaly, weighting, clip; got {self.penalty!r}")

    def overrides(self) -> dict[str, Any]:
        """The fields to pass to ``method_config``."""
        out: dict[str, Any] = {"layerwise": self.layerwise, "prefetch": self.prefetch}
        for name in ("warmup_steps", "ewma_warmup", "min_total_steps"):
            if getattr(self, name) >= 0:
                out[name] = getattr(self, name)
        if self.interval > 0:
            out["interval"] = self.interval
        if self.sync_time_s >= 0:
            out["time_interval_s"] = self.sync_time_s
        if self.step_weight >= 0:
            out["step_weight"] = self.step_weight
        for name in ("outer_lr", "outer_momentum", "clip"):
            if getattr(self, name) >= 0:
                out[name] = getattr(self, name)
        if self.granularity:
            out["granularity"] = self.granularity
        if self.penalty != "default":
            parts = set() if self.penalty == "none" else {p.strip() for p in self.penalty.split(",")}
            out["anomaly"], out["weighting"] = "anomaly" in parts, "weighting" in parts
            if "clip" not in parts:
                out["clip"] = 0.0
            elif self.clip < 0:
                out["clip"] = 10.0  # EDiT's default, also for methods whose own default is no clipping
        return out


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
        for sub in (self.model, self.data, self.train, self.capture, self.dist, self.sync, self.local_sgd, self.perturb):
            sub.__post_init__()
        if self.capture.enabled and self.capture.natural and self.model.tie_embeddings:
            raise ValueError(
                "capture.natural needs untied embeddings: with tied input/output embeddings the LM head "
                "gives every embedding row a gradient. Set model.tie_embeddings=false or capture.natural=false."
            )
        time_based = self.sync.scheme == "a_edit" or (self.sync.scheme in ("edit", "diloco", "post_local_sgd") and self.local_sgd.sync_time_s > 0)
        if time_based and (self.train.eval_every or self.capture.enabled):
            raise ValueError("time-based syncs (a_edit, local_sgd.sync_time_s): workers run different numbers of steps; "
                             "set train.eval_every=0 and capture.enabled=false")  # fmt: skip
        if self.capture.enabled and not self.capture.natural and not self.capture.topk_tensors:
            raise ValueError("capture is enabled but records nothing: set capture.natural or capture.topk_tensors")

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
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ExperimentConfig:
        return _from_dict(cls, d)

    @classmethod
    def from_json(cls, text: str) -> ExperimentConfig:
        return cls.from_dict(json.loads(text))


def _from_dict(cls: type, d: Any, prefix: str = "") -> Any:
    """Build ``cls`` from JSON-like ``d``, checking every value's type against the field's annotation (a config
    file saying ``"num_steps": "ten"`` is an error naming ``train.num_steps``, not a TypeError later)."""
    if not isinstance(d, dict):
        raise ValueError(f"{prefix.rstrip('.') or 'the config'}: expected an object of {cls.__name__} fields, got {d!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields {sorted(unknown)}; known: {sorted(known)}")
    kwargs = {}
    for name, value in d.items():
        tp, key = hints[name], prefix + name
        if dataclasses.is_dataclass(tp):
            kwargs[name] = _from_dict(tp, value, key + ".")
        elif typing.get_origin(tp) is tuple:
            item = typing.get_args(tp)[0]
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"{key}: expected a list of {item.__name__}, got {value!r}")
            kwargs[name] = tuple(_typed(v, item, key) for v in value)
        else:
            kwargs[name] = _typed(value, tp, key)
    return cls(**kwargs)


def _typed(value: Any, tp: type, key: str) -> Any:
    """``value`` as ``tp`` if it is a value of that type (numpy scalars too; an int is a float, a whole float an
    int), else a ValueError naming ``key``. Booleans are never numbers here."""
    is_bool = isinstance(value, bool) or type(value).__name__ == "bool_"
    if tp is bool and is_bool:
        return bool(value)
    if tp is int and not is_bool:
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real) and float(value).is_integer():
            return int(value)
    if tp is float and not is_bool and isinstance(value, numbers.Real):
        return float(value)
    if tp not in (bool, int, float) and isinstance(value, tp):
        return value
    raise ValueError(f"{key}: expected {tp.__name__}, got {value!r}")


def _parse_value(text: str, tp: Any, key: str) -> Any:
    if tp is bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{key}: expected a boolean (true/false), got {text!r}")
    if typing.get_origin(tp) is tuple:
        item = typing.get_args(tp)[0]
        return tuple(_parse_value(s, item, key) for s in (p.strip() for p in text.split(",")) if s)
    try:
        return tp(text)
    except ValueError:
        raise ValueError(f"{key}: expected {tp.__name__}, got {text!r}") from None


def apply_overrides(cfg: ExperimentConfig, overrides: list[str] | tuple[str, ...]) -> ExperimentConfig:
    """Return a copy of ``cfg`` with ``section.field=value`` overrides applied and validated.

    Tuples take comma-separated values (``capture.topk_tensors=*q_proj.weight,lm_head.weight``).
    """
    d = cfg.to_dict()
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} must look like section.field=value")
        key, text = item.split("=", 1)
        parts = key.strip().split(".")
        node_cls: type = ExperimentConfig
        node = d
        for depth, part in enumerate(parts):
            hints = typing.get_type_hints(node_cls)
            if part not in hints:
                raise ValueError(f"unknown config key {key!r}: {part!r} is not one of {sorted(hints)}")
            tp = hints[part]
            if depth == len(parts) - 1:
                if dataclasses.is_dataclass(tp):
                    raise ValueError(f"{key!r} is a section; set one of its fields, e.g. {key}.<field>=...")
                node[part] = _parse_value(text, tp, key)
            else:
                if not dataclasses.is_dataclass(tp):
                    raise ValueError(f"{'.'.join(parts[: depth + 1])!r} is a field, not a section")
                node_cls, node = tp, node[part]
    return ExperimentConfig.from_dict(d)
