"""One ``--set`` grammar for benchmarks and configs: plain keys are a benchmark's options, dotted keys config fields."""

import pytest

from zen_analysis import recipes
from zen_analysis.config import apply_overrides
from zen_analysis.config.options import CONFIG, ints, names
from zen_experiments.bench_options import parse_sets


def test_plain_keys_are_options_and_dotted_keys_config_fields_in_order():
    sets = ["ranks=4,8", "train.num_steps=7", "capture.topk_tensors=a.weight, b.weight", "train.num_steps=9"]
    opts = parse_sets("x", sets, {"ranks": [2], "mode": "a"}, {"ranks": ints}, config=True)
    assert opts["ranks"] == [4, 8] and opts["mode"] == "a"
    assert opts[CONFIG] == sets[1:]
    cfg = apply_overrides(recipes.smoke(), opts[CONFIG])  # the last of a key wins, lists split the same way
    assert cfg.train.num_steps == 9 and cfg.capture.topk_tensors == ("a.weight", "b.weight")
    assert names(" a, ,b ") == ["a", "b"]


@pytest.mark.parametrize(
    "items, config, match",
    [
        (["train.num_steps=3"], False, r"bench x takes --set ranks=\.\.\.; got 'train.num_steps=3'"),
        (["rank=3"], True, r"takes --set ranks, section.field=\.\.\.; got 'rank=3'"),
        (["ranks=four"], False, r"got 'ranks=four' \(invalid literal"),
        (["ranks"], False, r"--set 'ranks' must look like key=value"),
    ],
)
def test_a_bad_set_names_what_the_benchmark_takes(items, config, match):
    with pytest.raises(ValueError, match=match):
        parse_sets("x", items, {"ranks": [2]}, {"ranks": ints}, config=config)
    with pytest.raises(ValueError, match="bench y takes no --set options; got 'a=1'"):
        parse_sets("y", ["a=1"], {})


def test_a_boolean_option_reads_false_as_false():
    """A bool default converts by :func:`~zen_analysis.config.options.flag`, not ``bool("false")`` (True)."""
    assert parse_sets("x", ["fast=false"], {"fast": True})["fast"] is False
    assert parse_sets("x", ["fast=yes"], {"fast": False})["fast"] is True
    with pytest.raises(ValueError, match="'fast=maybe'"):
        parse_sets("x", ["fast=maybe"], {"fast": False})
