"""The names ``sync.method`` and ``sync.scheme`` take, as enums: the one list every other place derives from.

Two keys, two meanings: ``sync.method`` is how a run trains and what it sums (:class:`StepMethod`: every step's
gradients dense, naturally sparse or top-k; or a local SGD method, :class:`MethodName`, averaging pseudo-gradients),
``sync.scheme`` is the communication scheme that sums the sparse part (:class:`SchemeName`, or ``auto``:
:class:`PlannerName`). ``local_sgd.compress`` takes the per-step methods' words (:data:`COMPRESS`).

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


class StepMethod(enum.StrEnum):
    """Methods that sum every step's gradients: ``dense`` (one dense all-reduce of every gradient, DDP's), ``natural``
    (the embedding's naturally sparse gradient summed by ``sync.scheme``, the rest dense) or ``topk`` (DGC top-k
    with error feedback on every gradient bucket, then summed by ``sync.scheme``)."""

    DENSE = "dense"
    NATURAL = "natural"
    TOPK = "topk"


class MethodName(enum.StrEnum):
    """Local SGD methods (``zen_analysis.local_sgd``): workers train apart and average pseudo-gradients; no tensor
    sum per step (what ``local_sgd.compress`` sparsifies is the pseudo-gradient, summed by ``sync.scheme``)."""

    POST_LOCAL_SGD = "post_local_sgd"
    DILOCO = "diloco"
    EDIT = "edit"
    A_EDIT = "a_edit"
    """A-EDiT: EDiT with syncs triggered by elapsed time (``local_sgd.sync_time_s``) instead of a step count."""


SyncMethod = StepMethod | MethodName
"""``sync.method``'s type: a per-step method or a local SGD one (a config holds the member, equal to its string)."""

METHODS: tuple[str, ...] = tuple(m.value for m in MethodName)
"""The local SGD methods' names, in the enum's order (``zen_analysis.local_sgd.METHODS`` is this tuple)."""

SYNC_METHODS: tuple[str, ...] = tuple(n.value for n in (*StepMethod, *MethodName))
"""Every ``sync.method`` (checked here, before any rank starts; a test keeps it equal to ``train.registry``'s and
``local_sgd``'s)."""

SYNC_SCHEMES: tuple[str, ...] = tuple(n.value for n in (*SchemeName, *PlannerName))
"""Every ``sync.scheme``: the seven schemes and ``auto`` (a test keeps it equal to ``comm.schemes``' registry)."""

COMPRESS: tuple[str, ...] = (StepMethod.DENSE.value, StepMethod.NATURAL.value, StepMethod.TOPK.value)
"""``local_sgd.compress``: the pseudo-gradient sent ``dense`` (a dense all-reduce), ``natural`` (what no worker
changed is not sent) or ``topk`` (with error feedback): the per-step methods' words, one vocabulary."""


AUTO = "auto"
"""The third value of a switch (:data:`Switch`): on where the rest of the config lets it apply, off elsewhere."""

Switch = bool | Literal["auto"]
"""A setting that is ``true``, ``false`` or ``auto`` (``model.sparse_embedding``, ``sync.overlap``). The field keeps
``"auto"`` as given (stored configs and ``--set`` over a recipe see it unchanged); what it comes to depends on other
sections, so :meth:`~zen_analysis.config.experiment.ExperimentConfig.resolved` turns it into a bool where a run
starts. An explicit ``true`` is checked as given: a setting it cannot go with is an error saying which."""
