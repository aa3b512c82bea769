import pytest
import torch

from zen_analysis.config import ModelConfig
from zen_analysis.workload.models import build_model, input_embedding_name, lm_loss


@pytest.mark.parametrize("arch", ["llama", "gpt2", "lstm"])
def test_models_are_untied_and_their_embedding_gradient_is_row_sparse(arch):
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch=arch, hidden_size=32, num_heads=2), vocab_size=400, max_seq_len=16)
    emb = model.get_input_embeddings().weight
    assert emb is not model.get_output_embeddings().weight if arch != "lstm" else emb is not model.lm_head.weight
    x = torch.randint(0, 50, (2, 16))  # only token ids < 50 appear
    lm_loss(model, x, x).backward()
    rows = emb.grad.abs().sum(1) != 0
    assert set(torch.nonzero(rows).flatten().tolist()) == set(x.unique().tolist())
    assert dict(model.named_parameters())[input_embedding_name(model)] is emb


def test_tied_embeddings_give_every_row_a_gradient():
    model = build_model(
        ModelConfig(arch="gpt2", hidden_size=32, num_heads=2, tie_embeddings=True), vocab_size=400, max_seq_len=16
    )
    x = torch.randint(0, 50, (2, 16))
    lm_loss(model, x, x).backward()
    assert bool((model.get_input_embeddings().weight.grad.abs().sum(1) != 0).all())


def test_same_seed_same_weights():
    def build():
        torch.manual_seed(3)
        return build_model(ModelConfig(hidden_size=32, num_heads=2), vocab_size=400, max_seq_len=16)

    a, b = build(), build()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
