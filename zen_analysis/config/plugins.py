"""Communication schemes from outside the package, as the configuration sees them: their names, and the plug-in
modules a config asks for (``sync.plugins``).

The config checks ``sync.scheme`` before any rank starts and sits in the bottom layer, so it cannot read the scheme
registry (``zen_analysis.comm.schemes``, which imports torch and every scheme). It reads this small registry of
names instead, filled from two sides:

* ``zen_analysis.comm.schemes.register_scheme`` adds each scheme it registers (:func:`add_scheme_name`);
* an installed distribution's entry points of group :data:`ENTRY_POINT_GROUP` (``name = "pkg.module:Class"``) name a
  scheme each: their names are read from the installed metadata, nothing imported (:func:`entry_point_names`). The
  scheme registry imports them on its first use.

``sync.plugins`` lists modules (``my_pkg.schemes``) or files (``schemes/ring.py``) that register schemes when
imported: :func:`load_plugins` imports them where a config is built (the launcher, before it checks the config, and
every rank, reading ``config.json``, before it builds the sync), so a scheme registered by a call reaches spawned and
torchrun ranks too (forked ones inherit it anyway).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from zen_analysis.config.names import SYNC_SCHEMES

__all__ = [
    "ENTRY_POINT_GROUP",
    "add_scheme_name",
    "discard_scheme_name",
    "entry_point_names",
    "load_object",
    "load_plugins",
    "scheme_names",
    "unknown_name",
]

ENTRY_POINT_GROUP = "zen_analysis.schemes"
"""The entry point group a distribution names its schemes in (``[project.entry-points."zen_analysis.schemes"]``)."""

_registered: dict[str, None] = {}
"""Names ``register_scheme`` added, in registration order (a dict: ordered, no duplicates)."""


def add_scheme_name(name: str) -> None:
    """Let the config accept ``sync.scheme=<name>`` (called by ``register_scheme``)."""
    _registered[name] = None


def discard_scheme_name(name: str) -> None:
    """Forget a name :func:`add_scheme_name` added (``unregister_scheme``'s side of it); a built-in stays."""
    _registered.pop(name, None)


def entry_point_names() -> tuple[str, ...]:
    """The names of the installed :data:`ENTRY_POINT_GROUP` entry points, read from the metadata alone."""
    return tuple(sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}))


def scheme_names() -> tuple[str, ...]:
    """Every name ``sync.scheme`` takes now: the built-ins and ``auto`` (:data:`~zen_analysis.config.names.
    SYNC_SCHEMES`), then the registered schemes and the entry points' names not among them."""
    extra = [n for n in (*_registered, *entry_point_names()) if n not in SYNC_SCHEMES]
    return (*SYNC_SCHEMES, *dict.fromkeys(extra))


def unknown_name(subject: str, name: str, choices: Iterable[str]) -> str:
    """The one message for a scheme ``name`` not among ``choices``: ``subject`` (what is wrong: ``sync.scheme='zenn'
    is unknown``), the closest names (``difflib``), what to choose, and how a scheme from outside the package
    becomes a choice."""
    choices = tuple(choices)
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return (
        f"{subject}{hint}; choose one of {choices}, or register a scheme of your own "
        "(zen_analysis.comm.schemes.register_scheme, imported through sync.plugins, or an entry point of group "
        f"{ENTRY_POINT_GROUP!r})"
    )


def load_plugins(specs: Sequence[str], *, key: str = "sync.plugins") -> None:
    """Import each of ``specs``, once: a module name (``my_pkg.schemes``) or a path to a ``.py`` file (imported as a
    module named after the file). An import that fails raises ``ValueError`` naming the entry of ``key`` (the
    setting that listed it)."""
    for spec in specs:
        try:
            _import(spec)
        except Exception as exc:  # noqa: BLE001 - whatever the plug-in raised, said with the key that named it
            raise ValueError(f"{key}: {spec!r} could not be imported: {type(exc).__name__}: {exc}") from exc


def load_object(spec: str) -> object:
    """The object ``spec`` names: ``my_pkg.schemes:MyScheme`` or ``path/to/file.py:MyScheme`` (the module imported
    as :func:`load_plugins` imports it); a ``ValueError`` saying what is missing otherwise."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr.isidentifier():
        raise ValueError(f"{spec!r}: expected <module or file.py>:<Class>, e.g. my_pkg.schemes:MyScheme")
    load_plugins([where], key=spec)
    module = _import(where)
    if not hasattr(module, attr):
        raise ValueError(f"{spec!r}: {where} has no {attr!r}")
    return getattr(module, attr)


def _import(spec: str):
    return _import_file(Path(spec)) if spec.endswith(".py") else importlib.import_module(spec)


def _import_file(path: Path):
    """The file at ``path`` imported as the module ``path.stem`` (its classes pickle by that name in every rank that
    imported the same file), or that module if it is this file already."""
    path = path.resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no file {path}")
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() == path:
            return loaded
        raise ImportError(f"a module named {name!r} is loaded from elsewhere ({loaded.__file__}); rename the file")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
