"""The Zen paper's three LLM families (Llama, OPT, Gemma 2) as small models from config: untied, no padding row,
deterministic, trainable in one process, and their smoke recipes train and capture on 4 gloo ranks."""

import math
import subprocess
import sys

import pytest
import torch

from zen_analysis import recipes
from zen_analysis.capture.hooks import match_tensors
from zen_analysis.config import ModelConfig, apply_overrides
from zen_analysis.runs.launch import launch
from zen_analysis.workload.models import build_model, input_embedding_name, lm_loss

SMOKE = {"llama": recipes.smoke, "opt": recipes.opt_smoke, "gemma2": recipes.gemma2_smoke}
EMBEDDING = {
    "llama": "model.embed_tokens.weight",
    "opt": "model.decoder.embed_tokens.weight",
    "gemma2": "model.embed_tokens.weight",
}


def _smoke_model(arch):
    cfg = SMOKE[arch]()
    assert cfg.model.arch == arch
    torch.manual_seed(0)
    return cfg, build_model(cfg.model, vocab_size=cfg.data.vocab_size, max_seq_len=cfg.train.seq_len)


# ---- (a) the models, in one process


@pytest.mark.parametrize("arch", list(SMOKE))
def test_smoke_model_is_untied_has_no_padding_row_and_its_tensors_exist(arch):
    cfg, model = _smoke_model(arch)
    emb = model.get_input_embeddings()
    assert emb.weight is not model.get_output_embeddings().weight
    assert emb.padding_idx is None
    params = dict(model.named_parameters())
    assert input_embedding_name(model) == EMBEDDING[arch] and params[EMBEDDING[arch]] is emb.weight
    for pattern in cfg.capture.topk_tensors:  # each names one dense matrix, as the per-tensor capture needs
        hits = match_tensors(model, (pattern,))
        assert len(hits) == 1, (pattern, hits)
        assert params[hits[0]].dim() == 2 and hits[0] != EMBEDDING[arch]


@pytest.mark.parametrize("arch", list(SMOKE))
def test_embedding_gradient_rows_are_exactly_the_batch_tokens_including_ids_0_and_1(arch):
    """A padding row (OPT's config says 1, Gemma 2's 0) would miss its gradient; a tied head would fill every row."""
    _, model = _smoke_model(arch)
    x = torch.randint(2, 40, (2, 64), generator=torch.Generator().manual_seed(0))
    x[0, :3] = torch.tensor([0, 1, 0])  # 0 is EOS: real tokens
    lm_loss(model, x, x).backward()
    rows = torch.nonzero(model.get_input_embeddings().weight.grad.abs().sum(1)).flatten()
    assert set(rows.tolist()) == set(x.unique().tolist())


@pytest.mark.parametrize("arch", list(SMOKE))
def test_smoke_model_is_deterministic_in_training_mode_and_its_loss_decreases(arch):
    cfg, model = _smoke_model(arch)
    model.train()
    x = torch.randint(0, cfg.data.vocab_size, (2, cfg.train.seq_len + 1), generator=torch.Generator().manual_seed(1))
    inputs, targets = x[:, :-1], x[:, 1:]
    with torch.no_grad():  # no dropout anywhere: two training-mode passes agree bit for bit
        assert torch.equal(lm_loss(model, inputs, targets), lm_loss(model, inputs, targets))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(6):
        loss = lm_loss(model, inputs, targets)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert all(math.isfinite(v) for v in losses)
    assert abs(losses[0] - math.log(cfg.data.vocab_size)) < 1.0  # starts near uniform
    assert losses[-1] < losses[0] - 0.5, losses


@pytest.mark.parametrize("arch", ["opt", "gemma2"])
def test_tie_embeddings_is_honoured_both_ways(arch):
    """build_model asserts it; this checks the assert is not vacuous for the new families."""
    tied = build_model(
        ModelConfig(arch=arch, hidden_size=32, num_heads=2, tie_embeddings=True), vocab_size=100, max_seq_len=8
    )
    assert tied.get_input_embeddings().weight is tied.get_output_embeddings().weight


def test_gemma2_heads_follow_the_width_not_gemma2_2b():
    _, model = _smoke_model("gemma2")
    hf = model.config
    assert hf.head_dim == 64 // 2 == hf.query_pre_attn_scalar
    assert hf.num_key_value_heads == hf.num_attention_heads == 2
    assert hf.intermediate_size == 4 * 64 and hf.sliding_window >= 64
    assert hf.final_logit_softcapping is not None  # lm_loss goes through the softcapped logits
    assert model.config._attn_implementation == "eager"


def test_preload_imports_the_new_families():
    code = (
        "import sys\n"
        "from zen_analysis.workload.models import preload\n"
        "mods = ('transformers.models.opt.modeling_opt', 'transformers.models.gemma2.modeling_gemma2')\n"
        "assert not any(m in sys.modules for m in mods)\n"
        "preload('opt'); preload('gemma2')\n"
        "assert all(m in sys.modules for m in mods), [m for m in mods if m not in sys.modules]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ---- (b) the smoke recipes on 4 ranks


@pytest.mark.parametrize("arch", list(SMOKE))
def test_smoke_recipe_trains_and_captures_on_four_ranks(arch):
    cfg = SMOKE[arch]()
    cfg.dist.num_ranks = 4
    cfg.train.num_steps = 3
    cfg.validate()
    result = launch(cfg, progress=False, echo=False)
    assert len(result.results) == 4 and len({s["param_sha256"] for s in result.results.values()}) == 1
    losses = result.metrics()["loss"].to_numpy()
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    reader = result.traces()
    assert reader.manifest["finished"] and reader.manifest["config"]["model"]["arch"] == arch
    assert reader.manifest["num_workers"] == 8 and reader.workers() == list(range(8))
    assert reader.steps() == [0, 2]
    kinds = {t: info["kind"] for t, info in reader.manifest["tensors"].items()}
    assert [t for t, k in kinds.items() if k == "natural"] == [EMBEDDING[arch]]
    num_topk = sum(k == "topk" for k in kinds.values())  # the recipe's 3 matrices, or DDP-style buckets
    assert num_topk >= 1
    per_worker = reader.summary().groupby(["step", "worker", "kind"])["tensor"].nunique().unstack("kind")
    assert len(per_worker) == 2 * 8, per_worker  # every (step, worker)
    assert (per_worker["natural"] == 1).all() and (per_worker["topk"] == num_topk).all(), per_worker
    for rec in reader.records(step=2, tensor=EMBEDDING[arch]):
        assert rec.rank == rec.worker // 2 and 0 < rec.indices_K.numel() < rec.numel


@pytest.mark.parametrize("arch", ["opt", "gemma2"])
def test_four_ranks_train_like_one_rank_on_the_same_global_batch(arch):
    def run(num_ranks, workers_per_rank):
        cfg = SMOKE[arch]()
        cfg.dist.num_ranks, cfg.train.workers_per_rank = num_ranks, workers_per_rank
        cfg.train.num_steps = 3
        cfg.capture.enabled = False
        cfg.validate()
        return launch(cfg, progress=False, echo=False).metrics()["loss"].to_numpy()

    one, four = run(1, 8), run(4, 2)
    assert len(one) == len(four) == 3 and abs(one[-1] - one[0]) > 1e-3
    torch.testing.assert_close(torch.tensor(four), torch.tensor(one), rtol=1e-4, atol=1e-5)


# ---- (c) config


@pytest.mark.parametrize("arch", ["opt", "gemma2"])
def test_new_arch_names_are_valid_and_their_recipes_match_the_default_sizes(arch):
    assert apply_overrides(recipes.smoke(), [f"model.arch={arch}"]).model.arch == arch
    big, smoke, ref, ref_smoke = recipes.get(arch), recipes.get(f"{arch}-smoke"), recipes.default(), recipes.smoke()
    assert big.model == ModelConfig(arch=arch, hidden_size=256, num_layers=2, num_heads=4)
    assert (big.data, big.train, big.dist) == (ref.data, ref.train, ref.dist)
    assert smoke.model.arch == arch and (smoke.data, smoke.train, smoke.dist) == (
        ref_smoke.data,
        ref_smoke.train,
        ref_smoke.dist,
    )
    topk = {"opt": recipes.OPT_TOPK, "gemma2": recipes.GEMMA2_TOPK}[arch]
    assert big.capture.topk_tensors == smoke.capture.topk_tensors == topk


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.arch=gemma", "model.arch='gemma' is unknown.*gemma2"),
        ("model.arch=OPT", "model.arch='OPT' is unknown.*'opt'"),
        ("model.tie_embeddings=true", "untied embeddings"),
        ("model.num_heads=3", "divisible by model.num_heads=3"),
    ],
)
@pytest.mark.parametrize("recipe", ["opt-smoke", "gemma2-smoke"])
def test_bad_new_family_configs_raise_value_error(recipe, override, message):
    with pytest.raises(ValueError, match=message):
        apply_overrides(recipes.get(recipe), [override])
