"""The live registry of schemes, :data:`SCHEMES`, and the way in for a scheme defined outside the package.

The seven built-ins (:data:`BUILTIN_SCHEMES`) are registered here. A scheme of one's own joins them by a call,
:func:`register_scheme`, or by an entry point of group ``zen_analysis.schemes`` in an installed distribution
(``my_scheme = "my_pkg.schemes:MyScheme"``), imported the first time the registry is read: a broken one warns, naming
the entry point, and the toolkit goes on without it. Once in, a scheme is a name like the built-ins' wherever a scheme
is named (``sync.scheme=``, ``sync.ddp.register(scheme=)``, ``evaluate``, ``replay``, the planner's candidates, the
paper-scale model): every one of them reads :data:`SCHEMES` when it runs, never a copy made at import.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import warnings

from zen_analysis.comm.schemes.agsparse import AGSparse
from zen_analysis.comm.schemes.allreduce import AllReduce
from zen_analysis.comm.schemes.base import CommScheme
from zen_analysis.comm.schemes.bp_coo import BPCOO
from zen_analysis.comm.schemes.omnireduce import OmniReduce
from zen_analysis.comm.schemes.sparcml import SparCML
from zen_analysis.comm.schemes.sparse_ps import SparsePS
from zen_analysis.comm.schemes.zen import Zen
from zen_analysis.config.names import AUTO, SYNC_METHODS
from zen_analysis.config.plugins import ENTRY_POINT_GROUP, add_scheme_name, discard_scheme_name
from zen_analysis.pricing.traffic import DDP_SPARSE

__all__ = [
    "BUILTIN_SCHEMES",
    "RESERVED",
    "SCHEMES",
    "SchemeRegistry",
    "load_entry_points",
    "register_scheme",
    "sums_rows",
    "unregister_scheme",
]

_BUILTINS: dict[str, type[CommScheme]] = {
    cls.name: cls for cls in (AllReduce, AGSparse, SparCML, OmniReduce, SparsePS, BPCOO, Zen)
}
BUILTIN_SCHEMES: tuple[str, ...] = tuple(_BUILTINS)
"""The schemes the package ships, in the registry's order (``config.names.SchemeName`` holds the same names)."""

RESERVED = (AUTO, "stock", DDP_SPARSE, *SYNC_METHODS)
"""Names no scheme may take: the planner (``auto``), stock DDP's names in the benches, and the ``sync.method`` s."""


class SchemeRegistry(dict):
    """``name -> scheme class``, a plain dict that imports the installed entry points the first time it is read (a
    lookup, ``in``, iteration, its length or views), so that ``import zen_analysis`` never imports a plug-in."""

    _loaded = False

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True  # first: a plug-in reading the registry while it loads finds it loaded
            load_entry_points()

    def __getitem__(self, name):
        self._load()
        return super().__getitem__(name)

    def __contains__(self, name) -> bool:
        self._load()
        return super().__contains__(name)

    def __iter__(self):
        self._load()
        return super().__iter__()

    def __len__(self) -> int:
        self._load()
        return super().__len__()

    def __repr__(self) -> str:
        self._load()
        return super().__repr__()

    def get(self, name, default=None):
        self._load()
        return super().get(name, default)

    def keys(self):
        self._load()
        return super().keys()

    def values(self):
        self._load()
        return super().values()

    def items(self):
        self._load()
        return super().items()


SCHEMES: dict[str, type[CommScheme]] = SchemeRegistry(_BUILTINS)
"""Every scheme by name: the built-ins, then those registered (:func:`register_scheme`, entry points)."""


def register_scheme(cls: type[CommScheme], *, replace: bool = False) -> type[CommScheme]:
    """Add the scheme class ``cls`` to :data:`SCHEMES` under its ``name`` and let the config accept that name;
    returns ``cls`` (so it also decorates a class). ``cls`` must subclass
    :class:`~zen_analysis.comm.schemes.base.CommScheme`, implement ``_run`` and ``_traffic`` (and ``_sum_rows`` to be
    summed by rows, training's default), and have a ``name`` of its own: a lowercase Python identifier, not one of
    :data:`RESERVED`. A name taken by a built-in or another class raises ``ValueError`` unless ``replace``; the same
    class again (a module imported twice) is a no-op. Forked ranks inherit the registration; spawned and torchrun
    ranks import it through ``sync.plugins``."""
    name = _checked_name(cls)
    held = dict.get(SCHEMES, name)
    if held is not None and not replace and not _same_class(held, cls):
        kind = "a built-in scheme" if name in _BUILTINS else f"taken by {held.__module__}.{held.__qualname__}"
        raise ValueError(f"scheme name {name!r} is {kind}; pick another name, or pass replace=True to replace it")
    dict.__setitem__(SCHEMES, name, cls)
    add_scheme_name(name)
    return cls


def unregister_scheme(name: str) -> None:
    """Undo :func:`register_scheme`: a plug-in's name leaves :data:`SCHEMES` and the config, a replaced built-in is
    the built-in again. An unknown name raises ``KeyError``."""
    if not dict.__contains__(SCHEMES, name):
        raise KeyError(f"no scheme {name!r} is registered")
    if name in _BUILTINS:
        dict.__setitem__(SCHEMES, name, _BUILTINS[name])
        return
    dict.__delitem__(SCHEMES, name)
    discard_scheme_name(name)


def sums_rows(scheme: type[CommScheme] | CommScheme) -> bool:
    """Whether the scheme (a class or an instance) sums by rows (:meth:`~zen_analysis.comm.schemes.base.CommScheme.
    sum_rows`): it overrides ``_sum_rows``."""
    cls = scheme if isinstance(scheme, type) else type(scheme)
    return cls._sum_rows is not CommScheme._sum_rows


def load_entry_points() -> list[str]:
    """Register every installed entry point of group ``zen_analysis.schemes`` whose class is not in :data:`SCHEMES`
    yet; returns the names registered. One that fails to import, is not a scheme, or names a class whose ``name``
    differs from the entry point's is left out with a ``RuntimeWarning`` naming it."""
    done = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {ep.name} = {ep.value!r} (group {ENTRY_POINT_GROUP!r})"
        try:
            cls = ep.load()
            if getattr(cls, "name", None) != ep.name:
                raise ValueError(f"its class's name is {getattr(cls, 'name', None)!r}, the entry point's {ep.name!r}")
            register_scheme(cls)
        except Exception as exc:  # noqa: BLE001 - a broken plug-in must never break the toolkit's import
            warnings.warn(f"zen_analysis: {where} not loaded: {type(exc).__name__}: {exc}", RuntimeWarning, 2)
            continue
        done.append(ep.name)
    return done


def _checked_name(cls: object) -> str:
    """``cls``'s scheme name once ``cls`` is a concrete scheme class, else the ``TypeError`` / ``ValueError`` that
    says what is missing."""
    if not (isinstance(cls, type) and issubclass(cls, CommScheme)):
        raise TypeError(f"register_scheme takes a subclass of CommScheme (zen_analysis.comm.schemes), got {cls!r}")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if inspect.isabstract(cls) and missing:
        raise TypeError(f"{cls.__qualname__} does not implement {', '.join(missing)}: a scheme implements both")
    name = cls.__dict__.get("name")
    if name is None:
        inherited = getattr(cls, "name", None)
        raise ValueError(
            f"{cls.__qualname__} has no name of its own"
            + (f" (it inherits {inherited!r})" if inherited else "")
            + ': set the class attribute name = "<name>"'
        )
    if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
        raise ValueError(f"{cls.__qualname__}.name={name!r}: a scheme's name is a lowercase Python identifier")
    if name in RESERVED:
        raise ValueError(f"{cls.__qualname__}.name={name!r} is reserved ({', '.join(RESERVED)}): pick another")
    return name


def _same_class(a: type, b: type) -> bool:
    """Whether two classes are one scheme: the same object, or the same module and name (a file imported again)."""
    return a is b or (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)
