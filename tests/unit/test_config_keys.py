"""One key per meaning: ``sync.method`` (how a run trains: dense, natural, top-k or a local SGD method) and
``sync.scheme`` (the communication scheme summing what the method sends sparse); ``local_sgd.compress`` in the
methods' words. Configs written by the earlier format (``tests/data/configs_2026-12/``, dumped by the main of
2026-12-03, where ``sync.scheme`` also named methods and ``sync.compress`` / ``local_sgd.scheme`` existed) still
load, with one notice line, and mean what they meant."""

from pathlib import Path

import pytest

from zen_analysis import recipes
from zen_analysis.config import ExperimentConfig, SyncConfig, apply_overrides

OLD = Path(__file__).parents[1] / "data" / "configs_2026-12"


@pytest.mark.parametrize(
    ("name", "method", "scheme", "local_compress"),
    [
        ("dense", "dense", "allreduce", "dense"),
        ("natural-zen", "natural", "zen", "dense"),
        ("topk-agsparse", "topk", "agsparse", "dense"),
        ("edit-topk-zen", "edit", "zen", "topk"),
        ("diloco-dense", "diloco", "allreduce", "dense"),
    ],
)
def test_a_config_written_by_the_earlier_format_loads_with_one_notice(capsys, name, method, scheme, local_compress):
    path = OLD / f"{name}.json"
    text = path.read_text()
    assert '"compress"' in text and '"method"' not in text  # written in the earlier format
    cfg = ExperimentConfig.from_json(text, source=str(path))
    assert (cfg.sync.method, cfg.sync.scheme, cfg.local_sgd.compress) == (method, scheme, local_compress)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"note: {path}: earlier config keys "), err
    # today's format of the same config loads silently and round-trips
    again = ExperimentConfig.from_json(cfg.to_json())
    assert again == cfg and not capsys.readouterr().err


def test_set_with_the_earlier_keys_means_what_it_meant_with_one_notice(capsys):
    base = recipes.smoke()
    cases = {
        ("sync.scheme=zen",): ("natural", "zen", "dense"),
        ("sync.scheme=agsparse", "sync.compress=topk"): ("topk", "agsparse", "dense"),
        ("sync.scheme=edit", "local_sgd.compress=topk", "local_sgd.scheme=agsparse"): ("edit", "agsparse", "topk"),
        ("sync.scheme=diloco", "local_sgd.compress=none"): ("diloco", "allreduce", "dense"),
    }
    for items, want in cases.items():
        cfg = apply_overrides(base, list(items))
        assert (cfg.sync.method, cfg.sync.scheme, cfg.local_sgd.compress) == want, items
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("note: --set: earlier config keys"), (items, err)
    # today's keys: no notice; the earlier sync.scheme=allreduce over a natural config is dense again
    natural = apply_overrides(base, ["sync.method=natural", "sync.scheme=zen"])
    assert not capsys.readouterr().err
    assert apply_overrides(natural, ["sync.scheme=agsparse"]).sync.method == "natural"
    assert not capsys.readouterr().err
    assert apply_overrides(natural, ["sync.scheme=allreduce"]).sync.method == "dense"
    assert "sync.method=dense" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("sets", "match"),
    [
        (["sync.method=natural"], "sync.method=natural sums the embedding's sparse gradient with a sparse scheme"),
        (["sync.method=dense", "sync.scheme=zen"], "sync.method=dense sums every gradient"),
        (["sync.method=edit", "sync.scheme=zen"], "local_sgd.compress=dense sums the pseudo-gradients"),
        (["sync.method=zen"], r"sync.method='zen' is unknown"),
        (["sync.method=natural", "sync.scheme=edit"], r"edit is a method: sync.method=edit"),
        (["local_sgd.compress=none2"], "local_sgd.compress must be one of"),
    ],
)
def test_a_key_given_a_value_of_the_other_meaning_is_an_error_that_says_which(sets, match):
    with pytest.raises(ValueError, match=match):
        apply_overrides(recipes.smoke(), sets)


def test_a_config_edited_in_code_is_checked_where_the_run_starts_and_a_removed_field_cannot_be_set():
    """``cfg.sync.scheme = "zen"`` on a dense config used to mean natural Zen: today it is an error at
    ``validate()`` (which every launch runs), never a silently dense run; ``sync.compress`` is no field."""
    cfg = recipes.smoke()
    cfg.sync.scheme = "zen"
    with pytest.raises(ValueError, match="sync.method=dense"):
        cfg.validate()
    cfg.sync.method = "natural"
    cfg.validate()
    with pytest.raises(AttributeError):
        cfg.sync.compress = "topk"
    assert not hasattr(SyncConfig(), "compress") and not hasattr(cfg.local_sgd, "scheme")
