"""Configs in the earlier key format, mapped to today's keys with a one-line notice.

Until 2026-12 one key, ``sync.scheme``, named three kinds of thing (a communication scheme, ``auto``, or a local SGD
method), ``sync.compress`` (``none`` | ``topk``) said whether every bucket was top-k'd, and ``local_sgd.scheme``
named the scheme summing pseudo-gradients, whose ``local_sgd.compress`` said ``none`` for dense. Today
``sync.method`` is the training method and ``sync.scheme`` the scheme, and ``local_sgd.compress`` uses the
methods' words (``dense``). The ``hub`` data source, read through ``datasets``, became ``hf`` with its keys in the
``hf_`` family (:data:`DATA_KEYS`). :func:`upgrade` maps a stored config (``runs/<id>/config.json``, a config file) and
:func:`upgrade_overrides` the ``--set`` items, so runs and commands written before still work.
"""

from __future__ import annotations

import sys
from typing import Any

from zen_analysis.config.names import METHODS

DATA_KEYS = {"hub_dataset": "hf_builder", "hub_config": "hf_config", "hub_split": "hf_split", "text_field": "hf_column"}
"""The earlier ``data.source=hub`` keys and today's names."""
DATA_DEFAULTS = {"hub_dataset": "", "hub_config": "", "hub_split": "train", "text_field": "text"}
"""The earlier keys' defaults: a stored config holds them all."""
OLD_KEYS = ("sync.compress", "local_sgd.scheme", *(f"data.{k}" for k in DATA_KEYS))
"""Keys that are fields no more: mapped on load and in ``--set``."""


def _notice(source: str, old: list[str], new: list[str]) -> None:
    where = f"{source}: " if source else ""
    print(f"note: {where}earlier config keys {', '.join(old)} mapped to {', '.join(new)}", file=sys.stderr)


def _method(scheme: str, compress: str) -> tuple[str, str]:
    """The (method, scheme) an earlier per-step ``sync.scheme`` / ``sync.compress`` pair meant."""
    if compress == "topk":
        return "topk", scheme
    return ("dense", "allreduce") if scheme == "allreduce" else ("natural", scheme)


def _upgrade_data(d: Any, source: str) -> Any:
    """``d``'s ``data`` section with the ``hub`` source's keys renamed (:data:`DATA_KEYS`) and ``source=hub`` made
    ``hf``. A stored config holds every key, so the notice names only what was set (``source=hub``, a key off its
    default); keys at their defaults are renamed silently."""
    data = d.get("data") if isinstance(d, dict) else None
    if not isinstance(data, dict) or not (set(data) & set(DATA_KEYS) or data.get("source") == "hub"):
        return d
    renamed = {k: v for k, v in data.items() if k in DATA_KEYS or (k == "source" and v == "hub")}
    data = {DATA_KEYS.get(k, k): ("hf" if k in renamed and k == "source" else v) for k, v in data.items()}
    was_set = {k: v for k, v in renamed.items() if k == "source" or v != DATA_DEFAULTS[k]}
    if was_set:
        new = [f"data.{DATA_KEYS.get(k, k)}={'hf' if k == 'source' else v}" for k, v in was_set.items()]
        _notice(source, [f"data.{k}={v}" for k, v in was_set.items()], new)
    return {**d, "data": data}


def upgrade(d: Any, source: str = "") -> Any:
    """``d`` (a whole config as a JSON-like dict) in today's keys; unchanged, and silent, if it already is. An
    earlier config is recognised by its keys: ``sync.compress`` or ``local_sgd.scheme``, a local SGD method in
    ``sync.scheme``, ``local_sgd.compress=none``, or a sparse ``sync.scheme`` without ``sync.method``; the ``hub``
    data source's keys."""
    d = _upgrade_data(d, source)
    if not isinstance(d, dict) or not isinstance(d.get("sync"), dict):
        return d
    sync = dict(d["sync"])
    lsgd = dict(d["local_sgd"]) if isinstance(d.get("local_sgd"), dict) else None
    scheme = sync.get("scheme", "allreduce")
    earlier = (
        "compress" in sync
        or scheme in METHODS
        or (lsgd is not None and ("scheme" in lsgd or lsgd.get("compress") == "none"))
        or ("method" not in sync and scheme != "allreduce")
    )
    if not earlier:
        return d
    old = [f"sync.{k}={sync[k]}" for k in ("scheme", "compress") if k in sync]
    compress = sync.pop("compress", "none")
    lscheme = lsgd.pop("scheme", "zen") if lsgd is not None else "zen"
    if lsgd is not None:
        old += [f"local_sgd.{k}={v}" for k, v in (("scheme", lscheme), ("compress", lsgd.get("compress")))]
        if lsgd.get("compress", "none") == "none":
            lsgd["compress"] = "dense"
    if "method" not in sync:
        if scheme in METHODS:
            dense = lsgd is None or lsgd.get("compress") == "dense"
            sync["method"], sync["scheme"] = scheme, "allreduce" if dense else lscheme
        else:
            sync["method"], sync["scheme"] = _method(scheme, compress)
    new = [f"sync.method={sync['method']}", f"sync.scheme={sync['scheme']}"]
    if lsgd is not None:
        new.append(f"local_sgd.compress={lsgd['compress']}")
        d = {**d, "local_sgd": lsgd}
    _notice(source, old, new)
    return {**d, "sync": sync}


def upgrade_overrides(items: list[str] | tuple[str, ...], method: str) -> list[str]:
    """``--set`` items in today's keys, over a config whose ``sync.method`` is ``method``: ``sync.compress=topk``
    is ``sync.method=topk``; ``sync.scheme=<local SGD method>`` is ``sync.method=<it>``; ``local_sgd.scheme=X`` is
    ``sync.scheme=X``; ``local_sgd.compress=none`` is ``dense``; and ``sync.scheme`` set alone keeps its earlier
    meaning where today's would be an error: a sparse scheme over a dense method is natural sparsity,
    ``allreduce`` over a natural one is dense. One notice line for all of them."""
    keys = [item.split("=", 1)[0].strip() for item in items]
    out, old, new = [], [], []
    for item in items:
        key, _, value = (part.strip() for part in item.partition("="))
        if key == "sync.compress":
            mapped = ["sync.method=topk"] if value == "topk" else []
        elif key == "sync.scheme" and value in METHODS and "sync.method" not in keys:
            mapped = [f"sync.method={value}"]
        elif key == "local_sgd.scheme":
            mapped = [f"sync.scheme={value}"]
        elif key == "local_sgd.compress" and value == "none":
            mapped = ["local_sgd.compress=dense"]
        elif key.startswith("data.") and key[5:] in DATA_KEYS:
            mapped = [f"data.{DATA_KEYS[key[5:]]}={value}"]
        elif key == "data.source" and value == "hub":
            mapped = ["data.source=hf"]
        elif key == "sync.scheme" and not {"sync.method", "sync.compress"} & set(keys):
            if value == "allreduce" and method == "natural":
                mapped = [item, "sync.method=dense"]
            elif value != "allreduce" and method == "dense":
                mapped = [item, "sync.method=natural"]
            else:
                mapped = None
        else:
            mapped = None
        if mapped is None:
            out.append(item)
            continue
        old.append(item)
        new += mapped
        out += mapped
    if old:
        _notice("--set", old, new or ["(nothing: the default)"])
    return out
