import json

import pytest

from zen_analysis import recipes
from zen_analysis.config import ExperimentConfig, apply_overrides


@pytest.mark.parametrize("name", list(recipes.RECIPES))
def test_every_recipe_builds_and_round_trips_through_json(name):
    cfg = recipes.get(name)
    back = ExperimentConfig.from_json(cfg.to_json())
    assert back == cfg
    assert json.loads(back.to_json()) == json.loads(cfg.to_json())


def test_overrides_parse_by_field_type():
    cfg = apply_overrides(
        recipes.smoke(),
        [
            "train.num_steps=17",
            "train.lr=0.01",
            "capture.natural=false",
            "capture.topk_tensors=*q_proj.weight, lm_head.weight",
        ],
    )
    assert cfg.train.num_steps == 17 and cfg.train.lr == 0.01
    assert cfg.capture.natural is False
    assert cfg.capture.topk_tensors == ("*q_proj.weight", "lm_head.weight")
    assert recipes.smoke().train.num_steps == 6  # the recipe itself is untouched


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.nope=1", "unknown config key"),
        ("nope.x=1", "unknown config key"),
        ("train=1", "is a section"),
        ("train.num_steps=abc", "expected int"),
        ("capture.natural=maybe", "expected a boolean"),
        ("train.num_steps", "must look like"),
        ("train.num_steps=0", "train.num_steps must be >= 1"),
        ("model.arch=transformer", "model.arch"),
    ],
)
def test_bad_overrides_raise_value_error_naming_the_problem(override, message):
    with pytest.raises(ValueError, match=message):
        apply_overrides(recipes.smoke(), [override])


def test_tied_embeddings_are_rejected_when_capturing_natural_sparsity():
    with pytest.raises(ValueError, match="untied embeddings"):
        apply_overrides(recipes.smoke(), ["model.tie_embeddings=true"])
    cfg = apply_overrides(recipes.smoke(), ["model.tie_embeddings=true", "capture.natural=false"])
    assert cfg.model.tie_embeddings


def test_pseudo_gradient_capture_needs_a_local_sgd_method():
    with pytest.raises(ValueError, match="capture.pseudo must be one of"):
        apply_overrides(recipes.smoke(), ["capture.pseudo=both"])
    with pytest.raises(ValueError, match="pseudo-gradients of local SGD"):
        apply_overrides(recipes.smoke(), ["capture.pseudo=sent"])  # sync.method=dense: no pseudo-gradient
    only = ["sync.method=diloco", "capture.natural=false", "capture.topk_scope=none"]
    with pytest.raises(ValueError, match="records nothing"):
        apply_overrides(recipes.smoke(), only)
    assert apply_overrides(recipes.smoke(), [*only, "capture.pseudo=sent"]).capture.pseudo == "sent"


def test_unknown_recipe_lists_the_known_ones():
    with pytest.raises(ValueError, match="smoke"):
        recipes.get("nonexistent")


def test_worker_counts():
    cfg = recipes.default()
    assert cfg.num_workers == cfg.dist.num_ranks * cfg.train.workers_per_rank == 32
    assert recipes.workers128().num_workers == 128


def test_a_stored_config_with_the_removed_capture_fields_still_loads():
    """``capture.planner_topology``, ``gpus_per_node`` and ``planner_steps`` (unread copies of ``sync``'s) were
    removed; the config.json of an older run still holds them."""
    d = recipes.smoke().to_dict()
    d["capture"].update(planner_topology="paper-tcp25", gpus_per_node=0, planner_steps=3)
    assert ExperimentConfig.from_json(json.dumps(d)) == recipes.smoke()
    d["capture"]["nope"] = 1
    with pytest.raises(ValueError, match=r"unknown CaptureConfig fields \['nope'\]"):
        ExperimentConfig.from_dict(d)
    with pytest.raises(ValueError, match="unknown config key"):
        apply_overrides(recipes.smoke(), ["capture.planner_steps=3"])


def test_the_config_package_is_the_bottom_layer():
    """``zen_analysis.config`` imports the standard library, ``zen_analysis.paths`` and itself only."""
    import ast
    import sys
    from pathlib import Path

    import zen_analysis.config

    outside = []
    for path in sorted(Path(zen_analysis.config.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                ok = name == "zen_analysis.paths" or name.startswith("zen_analysis.config") or name == "__future__"
                if not ok and name.split(".")[0] not in sys.stdlib_module_names:
                    outside.append(f"{path.name}: {name}")
    assert not outside, outside


def _float_fields() -> list[str]:
    """Every float setting of every section, read from the dataclasses (a new one is covered without a line here)."""
    import dataclasses
    import typing

    cfg = recipes.smoke()
    return [
        f"{section.name}.{f.name}"
        for section in dataclasses.fields(cfg)
        if dataclasses.is_dataclass(getattr(cfg, section.name))
        for f in dataclasses.fields(getattr(cfg, section.name))
        if typing.get_type_hints(type(getattr(cfg, section.name)))[f.name] is float
    ]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_setting_refuses_nan_and_inf_before_any_rank_starts(value):
    keys = _float_fields()
    assert "train.lr" in keys and "dist.timeout_s" in keys and len(keys) > 20
    for key in keys:  # --set, a config file's JSON (NaN, Infinity), and a field edited on a built config
        with pytest.raises(ValueError, match=rf"{key} must be a finite number, got -?(nan|inf)"):
            apply_overrides(recipes.smoke(), [f"{key}={value}"])
        d = recipes.smoke().to_dict()
        section, name = key.split(".")
        d[section][name] = float(value)
        with pytest.raises(ValueError, match=rf"{key} must be a finite number"):
            ExperimentConfig.from_json(json.dumps(d))
        cfg = recipes.smoke()
        setattr(getattr(cfg, section), name, float(value))
        with pytest.raises(ValueError, match=rf"{key} must be a finite number"):
            cfg.validate()


def test_sync_method_is_typed_by_its_enums_and_the_stored_json_is_unchanged():
    """``sync.method`` holds a :data:`~zen_analysis.config.names.SyncMethod` member however it was given (code,
    ``--set``, JSON), equal to its string, and writes the same JSON a string did; an unknown name is refused with
    the choices."""
    import typing

    from zen_analysis.config.names import MethodName, StepMethod, SyncMethod
    from zen_analysis.config.overrides import from_json, to_json
    from zen_analysis.config.sync import SyncConfig

    assert typing.get_type_hints(SyncConfig)["method"] == SyncMethod
    cfg = recipes.get("smoke")
    edited = apply_overrides(cfg, ["sync.method=edit"])
    assert edited.sync.method is MethodName.EDIT and edited.sync.method == "edit"
    assert SyncConfig(method="natural", scheme="zen").method is StepMethod.NATURAL
    text = to_json(edited)
    assert '"method": "edit"' in text and from_json(ExperimentConfig, text).sync.method is MethodName.EDIT
    with pytest.raises(ValueError, match=r"sync.method='edt' is unknown; choose one of \('dense'"):
        apply_overrides(cfg, ["sync.method=edt"])
