"""Experiment configuration: one dataclass per concern, composed into :class:`ExperimentConfig`.

Configs travel as JSON (the launcher writes ``config.json`` and every rank reads it back), so every field is a
plain value. Recipes (``zen_analysis.recipes``) are functions returning complete configs; the only way to tweak
one from the command line is ``--set section.field=value`` (see :func:`apply_overrides`), never a new flag.

User mistakes raise ``ValueError`` with the fix in the message; ``assert`` is kept for internal invariants.

One module per section (``model``, ``data``, ``train``, ``capture``, ``dist``, ``sync``, ``local_sgd``,
``perturb``); ``names`` holds the scheme and method names as enums (and ``Switch``, the type of the settings that
take ``auto``), ``experiment`` the composed config and its cross-section checks, ``overrides`` dict loading,
``--set`` overrides and JSON. This package is the lowest layer: it imports the standard library and
``zen_analysis.paths`` only. Import from here (``zen_analysis.config``); the submodules are its layout, not its
interface.
"""

from zen_analysis.config.capture import CaptureConfig
from zen_analysis.config.data import CTR_SOURCES, DATA_SOURCES, TOKENIZERS, DataConfig
from zen_analysis.config.dist import BACKENDS, LAUNCHERS, NETWORKS, DistConfig
from zen_analysis.config.experiment import ExperimentConfig
from zen_analysis.config.local_sgd import EDIT_CLIP, LocalSGDSection
from zen_analysis.config.model import ARCHS, ModelConfig
from zen_analysis.config.names import (
    AUTO,
    COMPRESS,
    METHODS,
    SYNC_METHODS,
    SYNC_SCHEMES,
    MethodName,
    PlannerName,
    SchemeName,
    StepMethod,
    Switch,
)
from zen_analysis.config.overrides import apply_overrides
from zen_analysis.config.perturb import PerturbConfig
from zen_analysis.config.sync import SyncConfig
from zen_analysis.config.train import TrainConfig

__all__ = [
    "ARCHS",
    "AUTO",
    "BACKENDS",
    "COMPRESS",
    "CTR_SOURCES",
    "DATA_SOURCES",
    "EDIT_CLIP",
    "LAUNCHERS",
    "METHODS",
    "NETWORKS",
    "SYNC_METHODS",
    "SYNC_SCHEMES",
    "TOKENIZERS",
    "CaptureConfig",
    "DataConfig",
    "DistConfig",
    "ExperimentConfig",
    "LocalSGDSection",
    "MethodName",
    "ModelConfig",
    "PerturbConfig",
    "PlannerName",
    "SchemeName",
    "StepMethod",
    "SyncConfig",
    "Switch",
    "TrainConfig",
    "apply_overrides",
]
