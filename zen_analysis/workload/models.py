"""Models built from config, never downloaded: small Llama, OPT, Gemma 2 and GPT-2, an LSTM language model and DeepFM.

The model code knows nothing about distribution; gradient sync and capture attach to it afterwards.

Context: natural sparsity lives in the input-embedding gradient: only rows of tokens present in the batch get a
gradient. Tied input/output embeddings would hand every row a gradient through the LM head, so natural-sparsity
runs use untied embeddings (Llama's default; GPT-2, OPT and Gemma 2 need ``tie_word_embeddings=False``). The LSTM
LM stands in for the Zen paper's AWD-LSTM, its most skewed natural-sparsity workload.

Llama, OPT and Gemma 2 are the paper's three LLM families (its compression workloads are Llama 3.2-3B, OPT-2.7B
and Gemma2-2B). Those real checkpoints all *tie* their input embedding to the LM head, so in them the shared
embedding/head matrix gets a dense gradient every step (every vocabulary row is touched through the softmax):
they have no natural sparsity there. The small models here untie it, which is what natural sparsity needs; the
untied embedding is a model of an LLM's input embedding, not of those checkpoints' shared matrix.

No embedding row is a padding row (``pad_token_id=None``): OPT's and Gemma 2's configs default to
``pad_token_id`` 1 and 0, which becomes ``nn.Embedding(padding_idx=...)``, a row that never gets a gradient; our
ids 0 and 1 are real tokens (0 is EOS), so such a row would understate the natural sparsity's density.

DeepFM (Guo et al., IJCAI'17) is the paper's recommendation workload (on Criteo; here on
:mod:`zen_analysis.workload.ctr`'s synthetic data). Its natural-sparsity tensor is its one embedding table: each sample
looks up one row per field, so the rows with a gradient are exactly the batch's ids.

Shape suffixes: B examples (sequences) in a batch, T token positions, N tokens of the batch flattened (B x T), D the
LSTM's hidden width (its embedding's) in ``h_BTD`` and ``h_ND`` but the dense features in ``dense_BD``, V vocabulary
entries (one logit each), F categorical fields, E factor dimensions of an embedding row, C the whole row (E factors and
one linear weight).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from zen_analysis.config import AUTO, ExperimentConfig, ModelConfig


class LSTMLanguageModel(nn.Module):
    """Embedding -> multi-layer LSTM -> untied output layer.

    With ``adaptive_cutoffs`` the output layer is an adaptive softmax (Grave et al., 2017), what large-vocabulary
    LSTM LMs such as the One Billion Word models use: frequent ids get the full width, rare ids cheaper clusters.
    It keeps a 32k-vocabulary LSTM affordable on a CPU; the input embedding (the natural-sparsity tensor) is
    unchanged.
    """

    def __init__(
        self, *, vocab_size: int, hidden_size: int, num_layers: int, dropout: float = 0.0, adaptive_cutoffs=()
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden_size)
        self.lstm = nn.LSTM(hidden_size, hidden_size, num_layers=num_layers, batch_first=True, dropout=dropout)
        nn.init.normal_(self.embed.weight, std=0.02)
        if adaptive_cutoffs:
            self.adaptive_head = nn.AdaptiveLogSoftmaxWithLoss(
                hidden_size, vocab_size, list(adaptive_cutoffs), div_value=4.0
            )
            self.lm_head = None
        else:
            self.adaptive_head = None
            self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)
            nn.init.normal_(self.lm_head.weight, std=0.02)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed

    def forward(self, input_ids_BT: torch.Tensor) -> torch.Tensor:
        """Hidden states (B, T, D)."""
        h_BTD, _ = self.lstm(self.embed(input_ids_BT))
        return h_BTD

    def loss(self, inputs_BT: torch.Tensor, targets_BT: torch.Tensor) -> torch.Tensor:
        h_ND = self(inputs_BT).reshape(-1, self.embed.embedding_dim)
        if self.adaptive_head is not None:
            return self.adaptive_head(h_ND, targets_BT.reshape(-1)).loss
        return nn.functional.cross_entropy(self.lm_head(h_ND), targets_BT.reshape(-1))


class CTRInputs(NamedTuple):
    """One batch of click-through-rate samples: what :class:`DeepFM` takes (B samples, F fields, D dense features)."""

    ids_BF: torch.Tensor
    """(B, F) int64 global row ids, one per field (the fields' ids follow one another in one id space)."""
    dense_BD: torch.Tensor
    """(B, D) float32 dense features."""


class DeepFM(nn.Module):
    """DeepFM (Guo et al., IJCAI'17): an FM and a DNN sharing the field embeddings, their logits summed.

    One ``nn.Embedding(num_rows, dim + 1)`` holds both of the FM's per-id parameters: columns ``[:dim]`` are the
    second-order vectors (shared with the DNN), the last column the first-order weight. So the natural-sparsity tensor
    is a single table whose touched rows are exactly the ids in the batch, every element of such a row non-zero.
    The dense features enter the FM's linear part (with the global bias) and, beside the flattened field embeddings,
    the DNN; they have no second-order vectors.
    """

    def __init__(
        self,
        *,
        num_rows: int,
        num_fields: int,
        num_dense: int,
        dim: int,
        mlp_sizes: tuple[int, ...],
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.dim = dim
        self.embed = nn.Embedding(num_rows, dim + 1)
        self.linear = nn.Linear(num_dense, 1)  # the FM's first order of the dense features, and the global bias
        layers: list[nn.Module] = []
        width = num_fields * dim + num_dense
        for size in mlp_sizes:
            layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(dropout)]
            width = size
        self.dnn = nn.Sequential(*layers, nn.Linear(width, 1))
        nn.init.normal_(self.embed.weight, std=0.01)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed

    def forward(self, inputs: CTRInputs) -> torch.Tensor:
        """The click logits (B,)."""
        ids_BF, dense_BD = inputs
        e_BFC = self.embed(ids_BF)  # (B, F, dim + 1), one lookup: the table's gradient rows are the batch's ids
        v_BFE, w_BF = e_BFC[..., : self.dim], e_BFC[..., self.dim]
        first_B = w_BF.sum(1) + self.linear(dense_BD).squeeze(1)
        second_B = 0.5 * (v_BFE.sum(1).square() - v_BFE.square().sum(1)).sum(1)  # sum over field pairs of <v_f, v_g>
        deep_B = self.dnn(torch.cat([v_BFE.flatten(1), dense_BD], dim=1)).squeeze(1)
        return first_B + second_B + deep_B

    def loss(self, inputs: CTRInputs, targets_B: torch.Tensor) -> torch.Tensor:
        """Mean binary cross-entropy of the click logits."""
        return nn.functional.binary_cross_entropy_with_logits(self(inputs), targets_B)


def resolve_pretrained(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` with a pretrained checkpoint's settings made explicit (:func:`zen_analysis.workload.pretrained.resolve`:
    its tie, objective and tokenizer), so the stored config says what ran; ``cfg`` itself without one."""
    if not cfg.model.pretrained:
        return cfg
    from zen_analysis.workload import pretrained  # deferred: transformers, pretrained checkpoints only

    return pretrained.resolve(cfg)


def preload(arch: str, pretrained: str = "") -> None:
    """Import the model classes of ``arch`` (or a pretrained checkpoint's loader) now (a launcher does this before
    forking: ranks inherit them)."""
    if pretrained:
        from zen_analysis.workload import pretrained as _  # noqa: F401 # deferred: transformers, checkpoints only
    elif arch == "llama":
        from transformers import LlamaForCausalLM  # noqa: F401 # deferred: slow import, HF models only
    elif arch == "gpt2":
        from transformers import GPT2LMHeadModel  # noqa: F401 # deferred: slow import, HF models only
    elif arch == "opt":
        from transformers import OPTForCausalLM  # noqa: F401 # deferred: slow import, HF models only
    elif arch == "gemma2":
        from transformers import Gemma2ForCausalLM  # noqa: F401 # deferred: slow import, HF models only


def _llama(cfg: ModelConfig, vocab_size: int, max_seq_len: int) -> nn.Module:
    """A small Llama from its transformers config."""
    from transformers import LlamaConfig, LlamaForCausalLM  # deferred: slow import, HF models only

    inter = cfg.intermediate_size or 64 * round(8 * cfg.hidden_size / 3 / 64)
    hf = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=inter,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=max_seq_len,
        tie_word_embeddings=cfg.tie_embeddings is True,  # auto: untied, built from config
        attention_dropout=cfg.dropout,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=None,
    )
    return LlamaForCausalLM(hf)


def _gpt2(cfg: ModelConfig, vocab_size: int, max_seq_len: int) -> nn.Module:
    """A small GPT-2 from its transformers config."""
    from transformers import GPT2Config, GPT2LMHeadModel  # deferred: slow import, HF models only

    hf = GPT2Config(
        vocab_size=vocab_size,
        n_positions=max_seq_len,
        n_embd=cfg.hidden_size,
        n_layer=cfg.num_layers,
        n_head=cfg.num_heads,
        n_inner=cfg.intermediate_size or None,
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout,
        tie_word_embeddings=cfg.tie_embeddings is True,  # auto: untied, built from config
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(hf)


def _opt(cfg: ModelConfig, vocab_size: int, max_seq_len: int) -> nn.Module:
    """A small OPT from its transformers config."""
    from transformers import OPTConfig, OPTForCausalLM  # deferred: slow import, HF models only

    # OPT-2.7B's shape: pre-LayerNorm, ReLU MLP of 4 x hidden (fc1/fc2), learned positions, biases. transformers
    # 5.24's OPT has no activation dropout; layerdrop (skipping whole layers at random) stays off: it is not a
    # dropout rate and would change the network from step to step.
    hf = OPTConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        ffn_dim=cfg.intermediate_size or 4 * cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        max_position_embeddings=max_seq_len,
        word_embed_proj_dim=cfg.hidden_size,
        do_layer_norm_before=True,
        dropout=cfg.dropout,
        attention_dropout=cfg.dropout,
        layerdrop=0.0,
        tie_word_embeddings=cfg.tie_embeddings is True,  # auto: untied, built from config
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=None,
    )
    return OPTForCausalLM(hf)


def _gemma2(cfg: ModelConfig, vocab_size: int, max_seq_len: int) -> nn.Module:
    """A small Gemma 2 from its transformers config."""
    from transformers import Gemma2Config, Gemma2ForCausalLM  # deferred: slow import, HF models only

    # Gemma2-2B's shape: gated GELU MLP of 4 x hidden, sandwich RMSNorms, attention and final logit
    # softcapping, sliding-window layers alternating with global ones. The config's head_dim (256) and
    # query_pre_attn_scalar are Gemma2-2B's absolute values: here both follow hidden / heads. Full multi-head
    # attention (as the Llama here), not Gemma2-2B's grouped-query (8 heads, 4 kv heads), so the families
    # differ in their own features only. A window of max_seq_len makes the sliding layers see the whole
    # sequence. Eager attention: transformers has no sdpa path with softcapping for Gemma 2.
    head_dim = cfg.hidden_size // cfg.num_heads
    hf = Gemma2Config(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size or 4 * cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        head_dim=head_dim,
        query_pre_attn_scalar=head_dim,
        max_position_embeddings=max_seq_len,
        sliding_window=max_seq_len,
        attention_dropout=cfg.dropout,
        tie_word_embeddings=cfg.tie_embeddings is True,  # auto: untied, built from config
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=None,
        attn_implementation="eager",
    )
    return Gemma2ForCausalLM(hf)


def build_model(
    cfg: ModelConfig, *, vocab_size: int, max_seq_len: int, num_fields: int = 0, num_dense: int = 0
) -> nn.Module:
    """A freshly initialised model; seed torch beforehand for identical weights on every rank. With
    ``cfg.sparse_embedding`` the input embedding's backward gives sparse COO gradients (the same weights); ``auto``,
    read here without the rest of its experiment (a training run resolves it first:
    :meth:`~zen_analysis.config.experiment.ExperimentConfig.resolved`), builds the dense one: only backward differs.

    DeepFM's ``num_fields`` and ``num_dense`` come from its data (``CTRData.input_dims``), the one place they are
    known; ``vocab_size`` is then the rows of its table."""
    sparse = cfg.sparse_embedding != AUTO and bool(cfg.sparse_embedding)
    if cfg.pretrained:  # the checkpoint's architecture and weights (resolved: its tie and objective explicit)
        from zen_analysis.workload import pretrained  # deferred: transformers, pretrained checkpoints only

        model = pretrained.load_model(cfg)
        model.get_input_embeddings().sparse = sparse
        return model
    if cfg.arch == "deepfm":
        if num_fields < 1 or num_dense < 1:
            raise ValueError(
                "model.arch=deepfm needs num_fields and num_dense from its data (data.source=criteo-synth)"
            )
        model = DeepFM(
            num_rows=vocab_size,
            num_fields=num_fields,
            num_dense=num_dense,
            dim=cfg.hidden_size,
            mlp_sizes=tuple(cfg.mlp_sizes),
            dropout=cfg.dropout,
        )
        model.embed.sparse = sparse
        return model
    if cfg.arch == "lstm":
        model = LSTMLanguageModel(
            vocab_size=vocab_size,
            hidden_size=cfg.hidden_size,
            num_layers=cfg.num_layers,
            dropout=cfg.dropout,
            adaptive_cutoffs=cfg.adaptive_cutoffs,
        )
        model.embed.sparse = sparse
        return model
    builders = {"llama": _llama, "gpt2": _gpt2, "opt": _opt, "gemma2": _gemma2}
    model = builders[cfg.arch](cfg, vocab_size, max_seq_len)  # ModelConfig validates arch
    model.get_input_embeddings().sparse = sparse  # nn.Embedding reads it in every forward
    tied = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert tied == (cfg.tie_embeddings is True), f"{cfg.arch}: tie_embeddings={cfg.tie_embeddings} but tied={tied}"
    pad = model.get_input_embeddings().padding_idx
    assert pad is None, f"{cfg.arch}: embedding row {pad} is a padding row (never gets a gradient)"
    return model


def model_loss(model: nn.Module, inputs, targets: torch.Tensor) -> torch.Tensor:
    """The training loss of any model here: its own ``loss`` for the models that define one (the LSTM LM, DeepFM),
    else the HF causal LM's mean next-token cross-entropy (:func:`lm_loss`)."""
    if isinstance(model, (LSTMLanguageModel, DeepFM)):
        return model.loss(inputs, targets)
    return lm_loss(model, inputs, targets)


def to_device(inputs, device: torch.device):
    """``inputs`` on ``device``: a tensor (token ids), or a NamedTuple of tensors (:class:`CTRInputs`) field by
    field."""
    if isinstance(inputs, torch.Tensor):
        return inputs.to(device)
    return type(inputs)(*(t.to(device) for t in inputs))


def lm_loss(model: nn.Module, inputs_BT: torch.Tensor, targets_BT: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every target position: next-token, or a masked LM's chosen positions."""
    if isinstance(model, LSTMLanguageModel):
        return model.loss(inputs_BT, targets_BT)
    logits_BTV = model(input_ids=inputs_BT, use_cache=False).logits
    # a masked LM's targets are -100 off the chosen positions: cross_entropy's ignore_index leaves them out
    return nn.functional.cross_entropy(logits_BTV.reshape(-1, logits_BTV.size(-1)).float(), targets_BT.reshape(-1))


def input_embedding_name(model: nn.Module) -> str:
    """Parameter name of the input-embedding weight (the natural-sparsity tensor)."""
    weight = model.get_input_embeddings().weight
    for name, p in model.named_parameters():
        if p is weight:
            return name
    raise AssertionError("input embedding weight not among named_parameters")
