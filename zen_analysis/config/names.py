"""The names ``sync.scheme`` takes, as enums: the one list every other place derives from.

``StrEnum`` members are ``str`` and compare (and hash) equal to their values, so a config keeps holding the plain
string (``cfg.sync.scheme == "zen"``, ``"zen" == SchemeName.ZEN``) and JSON is unchanged. Tuples that end up in
messages are built from the ``.value`` s, so they print as they always did (``('allreduce', 'zen', ...)``).
Beside them, :data:`Switch`: the type of the on/off settings that also take ``auto``.
"""

from __future__ import annotations

import enum
from typing import Literal


class SchemeName(enum.StrEnum):
    """Communication schemes: how one tensor's sum is exchanged. Each is the ``name`` of a scheme class in
    ``zen_analysis.comm.schemes`` (a test keeps the two equal: ``set(SchemeName) == set(comm.SCHEMES)``)."""

    ALLREDUCE = "allreduce"
    ZEN = "zen"
    BP_COO = "bp_coo"
    AGSPARSE = "agsparse"
    SPARCML = "sparcml"
    OMNIREDUCE = "omnireduce"
    SPARSE_PS = "sparse_ps"


class PlannerName(enum.StrEnum):
    """``auto``: the planner picks one of the schemes per tensor from live sketches (``zen_analysis.comm.planner``)."""

    AUTO = "auto"


class MethodName(enum.StrEnum):
    """Local SGD methods (``zen_analysis.local_sgd``): workers train apart and average pseudo-gradients; no tensor
    sum per step, so ``sync.compress=topk`` does not apply to them."""

    POST_LOCAL_SGD = "post_local_sgd"
    DILOCO = "diloco"
    EDIT = "edit"
    A_EDIT = "a_edit"
    """A-EDiT: EDiT with syncs triggered by elapsed time (``local_sgd.sync_time_s``) instead of a step count."""


METHODS: tuple[str, ...] = tuple(m.value for m in MethodName)
"""The local SGD methods' names, in the enum's order (``zen_analysis.local_sgd.METHODS`` is this tuple)."""

SYNC_SCHEMES: tuple[str, ...] = tuple(n.value for n in (*SchemeName, *PlannerName, *MethodName))
"""Every ``sync.scheme`` (checked here, before any rank starts; a test keeps it equal to the registries in
``train.registry``, ``comm.schemes`` and ``local_sgd``)."""


AUTO = "auto"
"""The third value of a switch (:data:`Switch`): on where the rest of the config lets it apply, off elsewhere."""

Switch = bool | Literal["auto"]
"""A setting that is ``true``, ``false`` or ``auto`` (``model.sparse_embedding``, ``sync.overlap``). The field keeps
``"auto"`` as given (stored configs and ``--set`` over a recipe see it unchanged); what it comes to depends on other
sections, so :meth:`~zen_analysis.config.experiment.ExperimentConfig.resolved` turns it into a bool where a run
starts. An explicit ``true`` is checked as given: a setting it cannot go with is an error saying which."""
