"""``model``: the architecture and its size."""

from __future__ import annotations

from dataclasses import dataclass

ARCHS = ("llama", "opt", "gemma2", "gpt2", "lstm")


@dataclass(kw_only=True)
class ModelConfig:
    arch: str = "llama"
    """``llama`` (LlamaForCausalLM), ``opt`` (OPTForCausalLM), ``gemma2`` (Gemma2ForCausalLM): the Zen paper's three
    LLM families; ``gpt2`` (GPT2LMHeadModel) or ``lstm`` (plain-torch LSTM LM)."""
    hidden_size: int = 256
    """Model width (LSTM: embedding and hidden size)."""
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 0
    """MLP width; 0 means the architecture's usual ratio (Llama 8/3 x hidden rounded to 64; OPT, GPT-2 and Gemma 2
    4 x, Gemma 2's gated, as Gemma2-2B's 9216 = 4 x 2304)."""
    tie_embeddings: bool = False
    """Tied input/output embeddings give every embedding row a gradient: natural sparsity disappears."""
    sparse_embedding: bool = False
    """``nn.Embedding(sparse=True)`` for the input embedding: backward gives the rows touched as a sparse COO
    gradient, with no dense (vocabulary x hidden) gradient to zero and fill every step. Needs
    ``train.embedding_update=lazy`` (AdamW takes no sparse gradient), untied embeddings and the capture off."""
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
