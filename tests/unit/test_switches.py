"""The ``auto`` switches (``model.sparse_embedding``, ``sync.overlap``): the natural-sparsity recipes turn on what is
lossless by default, every valid ``--set`` over them still builds (the switch resolves to off where it does not
apply), and an explicit ``true`` keeps its errors."""

import json

import pytest

from zen_analysis import recipes
from zen_analysis.config import AUTO, ExperimentConfig, apply_overrides

NATURAL = ("lstm", "lstm-smoke", "lstm-words", "lstm-words-smoke", "deepfm", "deepfm-smoke")


@pytest.mark.parametrize("name", NATURAL)
def test_natural_sparsity_recipes_turn_on_the_sparse_gradient_and_overlap(name):
    cfg = recipes.get(name)
    assert cfg.model.sparse_embedding == AUTO and cfg.sync.overlap == AUTO
    assert cfg.train.embedding_update == "dense"  # lazy changes the numbers: never a default
    on = cfg.resolved()
    assert on.model.sparse_embedding is True and on.sync.overlap is True
    assert cfg.model.sparse_embedding == AUTO  # resolved() is a copy: the config keeps what was given


@pytest.mark.parametrize("name", ["default", "smoke", "gpt2", "workers128"])
def test_other_recipes_keep_both_off(name):
    on = recipes.get(name).resolved()
    assert on.model.sparse_embedding is False and on.sync.overlap is False


@pytest.mark.parametrize(
    "override, sparse, overlap",
    [
        ("sync.method=edit", True, False),  # local SGD: no per-step sum to overlap
        ("sync.method=a_edit", True, False),
        ("sync.method=topk", False, True),  # the top-k sync compresses dense buckets
        ("perturb.bandwidth_gbps=1", True, False),  # the emulated link sleeps after backward
        ("sync.method=natural,sync.scheme=zen", True, True),
        ("model.sparse_embedding=false", False, True),
        ("sync.overlap=off", True, False),
    ],
)
def test_a_valid_override_of_a_recipe_resolves_auto_instead_of_failing(override, sparse, overlap):
    sets = override.split(",") + (["capture.enabled=false"] if "a_edit" in override else [])
    on = apply_overrides(recipes.lstm_words(), sets).resolved()
    assert (on.model.sparse_embedding, on.sync.overlap) == (sparse, overlap)


def test_tied_embeddings_resolve_the_sparse_gradient_off():
    cfg = apply_overrides(recipes.smoke(), ["model.sparse_embedding=auto", "capture.natural=false"])
    assert cfg.resolved().model.sparse_embedding is True
    tied = apply_overrides(cfg, ["model.tie_embeddings=true"])
    assert tied.resolved().model.sparse_embedding is False


@pytest.mark.parametrize(
    "sets, message",
    [
        (["sync.method=topk", "model.sparse_embedding=true"], "set sync.method=dense or natural"),
        (["sync.method=edit", "sync.overlap=true"], "not with a local SGD method"),
        (["perturb.bandwidth_gbps=1", "sync.overlap=true"], "perturb.bandwidth_gbps"),
    ],
)
def test_an_explicit_true_keeps_its_errors(sets, message):
    with pytest.raises(ValueError, match=message):
        apply_overrides(recipes.lstm_words_smoke(), sets)


def test_a_sparse_embedding_goes_with_adamw_and_the_capture():
    """Lifted: a sparse gradient with ``train.embedding_update=dense`` (made dense for AdamW) and with the capture
    on (read coalesced); ``make reproduce`` captures these recipes."""
    cfg = apply_overrides(recipes.smoke(), ["model.sparse_embedding=true"])
    assert cfg.train.embedding_update == "dense" and cfg.capture.enabled
    assert cfg.resolved().model.sparse_embedding is True


def test_switches_parse_and_round_trip_as_given():
    cfg = apply_overrides(recipes.smoke(), ["sync.overlap=AUTO", "model.sparse_embedding= auto"])
    assert cfg.sync.overlap == AUTO and cfg.model.sparse_embedding == AUTO
    stored = json.loads(cfg.to_json())
    assert stored["sync"]["overlap"] == "auto" and stored["model"]["sparse_embedding"] == "auto"
    assert ExperimentConfig.from_json(cfg.to_json()).to_dict() == cfg.to_dict()
    assert apply_overrides(cfg, ["sync.overlap=yes"]).sync.overlap is True
    stored["sync"]["overlap"] = False  # an older run's stored bool still loads
    assert ExperimentConfig.from_dict(stored).sync.overlap is False


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_a_switch_names_its_three_values(value):
    with pytest.raises(ValueError, match=r"sync.overlap: expected true, false or 'auto', got"):
        apply_overrides(recipes.smoke(), [f"sync.overlap={value}"])
    stored = json.loads(recipes.smoke().to_json())
    stored["model"]["sparse_embedding"] = value
    with pytest.raises(ValueError, match=r"model.sparse_embedding: expected true, false or 'auto'"):
        ExperimentConfig.from_dict(stored)
