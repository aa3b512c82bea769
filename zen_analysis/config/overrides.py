"""Configs as JSON-like dicts: typed loading (:func:`from_dict`), ``--set section.field=value``
(:func:`apply_overrides`), and the JSON text run directories store (:func:`to_json` / :func:`from_json`).

Generic over the dataclasses: nothing here names :class:`~zen_analysis.config.experiment.ExperimentConfig` (it
calls these), so the two modules do not import each other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import math
import numbers
import types
import typing
from typing import Any, TypeVar

from zen_analysis.config.capture import LEGACY_FIELDS as CAPTURE_LEGACY_FIELDS
from zen_analysis.config.capture import CaptureConfig
from zen_analysis.config.legacy import upgrade, upgrade_overrides
from zen_analysis.config.sync import LEGACY_FIELDS as SYNC_LEGACY_FIELDS
from zen_analysis.config.sync import SyncConfig

C = TypeVar("C")

LEGACY_FIELDS: dict[type, tuple[str, ...]] = {CaptureConfig: CAPTURE_LEGACY_FIELDS, SyncConfig: SYNC_LEGACY_FIELDS}
"""Keys a stored config may hold that are fields no more, per section class: dropped on load, so the config of an
older run still loads (they were never read; any other unknown key is an error)."""


def to_json(cfg: Any) -> str:
    """The JSON text of a config dataclass (sorted keys: stored files compare and diff cleanly)."""
    return json.dumps(dataclasses.asdict(cfg), indent=2, sort_keys=True)


def from_json(cls: type[C], text: str, source: str = "") -> C:
    return from_dict(cls, json.loads(text), source=source)


def from_dict(cls: type[C], d: Any, prefix: str = "", source: str = "") -> C:
    """Build ``cls`` from JSON-like ``d``, checking every value's type against the field's annotation (a config
    file saying ``"num_steps": "ten"`` is an error naming ``train.num_steps``, not a TypeError later). A whole
    config in the earlier key format is mapped first (:func:`~zen_analysis.config.legacy.upgrade`, with a notice
    naming ``source``)."""
    if not prefix:
        d = upgrade(d, source)
    if not isinstance(d, dict):
        raise ValueError(
            f"{prefix.rstrip('.') or 'the config'}: expected an object of {cls.__name__} fields, got {d!r}"
        )
    legacy = LEGACY_FIELDS.get(cls, ())
    d = {k: v for k, v in d.items() if k not in legacy}
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields {sorted(unknown)}; known: {sorted(known)}")
    kwargs = {}
    for name, value in d.items():
        tp, key = hints[name], prefix + name
        if dataclasses.is_dataclass(tp):
            kwargs[name] = from_dict(tp, value, key + ".")
        elif typing.get_origin(tp) is tuple:
            item = typing.get_args(tp)[0]
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"{key}: expected a list of {item.__name__}, got {value!r}")
            kwargs[name] = tuple(_typed(v, item, key) for v in value)
        else:
            kwargs[name] = _typed(value, tp, key)
    return cls(**kwargs)


def _choices(tp: Any) -> tuple[tuple, list] | None:
    """A union's (literal values, other types), e.g. :data:`~zen_analysis.config.names.Switch`'s ``(("auto",),
    [bool])``; None for a plain type."""
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return None
    args = typing.get_args(tp)
    literals = tuple(v for a in args if typing.get_origin(a) is typing.Literal for v in typing.get_args(a))
    return literals, [a for a in args if typing.get_origin(a) is not typing.Literal]


def _enum_values(tp: Any) -> dict[str, enum.Enum] | None:
    """An enum field's (or a union of enums') members by value, e.g. ``sync.method``'s
    :data:`~zen_analysis.config.names.SyncMethod`; None for any other type."""
    parts = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    if not all(isinstance(t, type) and issubclass(t, enum.Enum) for t in parts):
        return None
    return {m.value: m for t in parts for m in t}


def _member(value: Any, members: dict[str, enum.Enum], key: str) -> enum.Enum:
    """``value`` as its enum member, else the one message of an unknown name: what it is and what to choose."""
    if isinstance(value, str) and value in members:
        return members[value]
    raise ValueError(f"{key}={value!r} is unknown; choose one of {tuple(members)}")


def _expected(tp: Any) -> str:
    """What a value of ``tp`` looks like, for messages: ``bool``, or ``true, false or 'auto'`` for a switch."""
    choices = _choices(tp)
    if choices is None:
        return tp.__name__
    literals, others = choices
    words = ["true, false" if t is bool else t.__name__ for t in others] + [repr(v) for v in literals]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _typed(value: Any, tp: type, key: str) -> Any:
    """``value`` as ``tp`` if it is a value of that type (numpy scalars too; an int is a float, a whole float an
    int; a float finite), else a ValueError naming ``key``. Booleans are never numbers here. A union
    (:data:`~zen_analysis.config.names.Switch`) takes one of its literal values or a value of one of its types; an
    enum (or a union of enums) one of its members' values, as the member (a ``StrEnum`` member is that string)."""
    members = _enum_values(tp)
    if members is not None:
        return _member(value, members, key)
    choices = _choices(tp)
    if choices is not None:
        literals, others = choices
        if isinstance(value, str) and value in literals:
            return value
        for other in others:
            with contextlib.suppress(ValueError):
                return _typed(value, other, key)
        raise ValueError(f"{key}: expected {_expected(tp)}, got {value!r}")
    is_bool = isinstance(value, bool) or type(value).__name__ == "bool_"
    if tp is bool and is_bool:
        return bool(value)
    if tp is int and not is_bool:
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real) and float(value).is_integer():
            return int(value)
    if tp is float and not is_bool and isinstance(value, numbers.Real):
        if not math.isfinite(value):
            raise ValueError(not_finite(key, value))
        return float(value)
    if tp not in (bool, int, float) and isinstance(value, tp):
        return value
    raise ValueError(f"{key}: expected {tp.__name__}, got {value!r}")


def not_finite(key: str, value: Any) -> str:
    """The one message for a float setting that is NaN or infinite: a NaN learning rate or bandwidth passes every
    range check (each comparison with it is false) and fails later inside the ranks, or trains to a NaN loss."""
    return f"{key} must be a finite number, got {value!r}: give a finite value (no nan or inf)"


def split_set(item: str, example: str = "section.field=value") -> tuple[str, str]:
    """``key=value`` -> ``(key, value)``, the one grammar of every ``--set`` (configs and benchmarks alike): the key
    is what comes before the first ``=``, the value everything after it (commas separate list items)."""
    if "=" not in item:
        raise ValueError(f"--set {item!r} must look like {example}")
    key, value = item.split("=", 1)
    return key.strip(), value


def split_list(text: str) -> list[str]:
    """A list value: comma-separated items, blanks dropped (an empty value is an empty list)."""
    return [p for p in (p.strip() for p in text.split(",")) if p]


def _parse_value(text: str, tp: Any, key: str) -> Any:
    members = _enum_values(tp)
    if members is not None:
        return _member(text.strip(), members, key)
    choices = _choices(tp)
    if choices is not None:  # a switch: ``auto`` as written, else true/false
        literals, others = choices
        low = text.strip().lower()
        if low in literals:
            return low
        for other in others:
            with contextlib.suppress(ValueError):
                return _parse_value(text, other, key)
        raise ValueError(f"{key}: expected {_expected(tp)}, got {text!r}")
    if tp is bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{key}: expected a boolean (true/false), got {text!r}")
    if typing.get_origin(tp) is tuple:
        item = typing.get_args(tp)[0]
        return tuple(_parse_value(s, item, key) for s in split_list(text))
    try:
        return tp(text)
    except ValueError:
        raise ValueError(f"{key}: expected {tp.__name__}, got {text!r}") from None


def apply_overrides(cfg: C, overrides: list[str] | tuple[str, ...]) -> C:
    """Return a copy of ``cfg`` (an ``ExperimentConfig``) with ``section.field=value`` overrides applied and
    validated.

    Tuples take comma-separated values (``capture.topk_tensors=*q_proj.weight,lm_head.weight``).
    """
    d = dataclasses.asdict(cfg)
    sync = getattr(cfg, "sync", None)
    if sync is not None:
        overrides = upgrade_overrides(overrides, sync.method)
    for item in overrides:
        key, text = split_set(item)
        parts = key.split(".")
        node_cls: type = type(cfg)
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
    return from_dict(type(cfg), d)
