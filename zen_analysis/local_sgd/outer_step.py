"""One sync group's outer step, as functions of its tensors (:class:`zen_analysis.local_sgd.engine.LocalSGD`
calls them at each outer sync): the worker's weight for the pseudo-gradient's average (EDiT's anomaly test and
norm softmax, A-EDiT's step weight), the group's log row, and the outer optimizer's step on the anchor (SGD with
momentum, Nesterov's or plain); and the sync units a model is cut into."""

from __future__ import annotations

import torch
from torch import nn

from zen_analysis.local_sgd.collective import Collective
from zen_analysis.local_sgd.penalty import ANOMALY_PENALTY, EWMADetector, softmax_weights
from zen_analysis.local_sgd.settings import LocalSGDConfig


def group_norm(delta: list[torch.Tensor]) -> float:
    """The pseudo-gradient's L2 norm over the group, summed in float64."""
    return float(torch.sqrt(sum((d.double().square().sum() for d in delta), torch.zeros((), dtype=torch.float64))))


def worker_weight(
    c: LocalSGDConfig, coll: Collective, detectors: dict[str, EWMADetector], key: str, g: float, step: int
) -> tuple[float, bool, float]:
    """(z-score, anomalous, weight) of this worker's pseudo-gradient of norm ``g``: with ``anomaly``, EWMA's test
    (an outlier is not added to the detector and counts with its norm plus :data:`ANOMALY_PENALTY`); with
    ``weighting``, EDiT's softmax over the workers' norms, else 1 / world; with ``step_weight``, A-EDiT's mix of
    step counts. Every rank calls it at the same point (the norms and step counts are all-gathered)."""
    z, anomalous, g_eff = 0.0, False, g
    if c.anomaly:
        det = detectors.setdefault(
            key, EWMADetector(alpha=c.ewma_alpha, warmup=c.ewma_warmup, threshold=c.ewma_threshold)
        )
        z = det.z_score(g)
        if det.is_outlier(g):
            anomalous, g_eff = True, g + ANOMALY_PENALTY
        else:
            det.update(g)
    if c.weighting:
        norms = coll.all_gather_scalars(g_eff)
        w = float(softmax_weights(norms, c.temperature)[coll.rank])
    else:
        w = 1.0 / coll.world
    if c.step_weight > 0:  # A-EDiT: workers that did more steps count more
        counts = coll.all_gather_scalars(float(step))
        w = (1 - c.step_weight) * w + c.step_weight * float(counts[coll.rank] / counts.sum().clamp(min=1))
    return z, anomalous, w


def log_row(
    step: int,
    key: str,
    params: list[nn.Parameter],
    delta: list[torch.Tensor],
    flat: torch.Tensor,
    embedding: torch.Tensor | None,
    *,
    g: float,
    z: float,
    anomalous: bool,
    w: float,
) -> dict:
    """The group's log row as the sync starts (the end of the sync adds the clip, the skip and the bytes)."""
    row = {
        "step": step,
        "group": key,
        "norm": g,
        "z": z,
        "anomalous": anomalous,
        "weight": w,
        "numel": flat.numel(),
        "density": float(torch.count_nonzero(flat)) / max(flat.numel(), 1),
        "embedding": any(p is embedding for p in params),
    }
    for p, d in zip(params, delta):  # the embedding's own share, where it shares a group with other parameters
        if p is embedding:
            row.update(embedding_numel=d.numel(), embedding_density=float(torch.count_nonzero(d)) / d.numel())
    return row


def outer_update(
    c: LocalSGDConfig, anchor: list[torch.Tensor], momentum: list[torch.Tensor] | None, flat: torch.Tensor
) -> list[torch.Tensor]:
    """The outer optimizer's step: the anchor moved by ``outer_lr`` times the averaged pseudo-gradient ``flat``
    with momentum (Nesterov's with ``nesterov``); returns the new momentum buffer."""
    flat_u = flat.clone() if momentum is None else momentum[0].mul_(c.outer_momentum).add_(flat)
    update = flat + c.outer_momentum * flat_u if c.nesterov else flat_u
    offset = 0
    for a in anchor:
        n = a.numel()
        a.sub_(c.outer_lr * update[offset : offset + n].view_as(a))
        offset += n
    return [flat_u]


def sync_units(model: nn.Module) -> list[tuple[str, nn.Module, list[tuple[str, nn.Parameter]]]]:
    """("root", model, params outside the blocks) first, then one unit per block of the largest ModuleList."""
    lists = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.ModuleList)]
    blocks: list[tuple[str, nn.Module]] = []
    if lists:
        name, biggest = max(lists, key=lambda nm: sum(p.numel() for p in nm[1].parameters()))
        blocks = [(f"{name}.{i}", m) for i, m in enumerate(biggest)]
    in_blocks = {id(p) for _, m in blocks for p in m.parameters()}
    root = [(n, p) for n, p in model.named_parameters() if p.requires_grad and id(p) not in in_blocks]
    units = [("root", model, root)]
    for name, m in blocks:
        units.append((name, m, [(n, p) for n, p in m.named_parameters() if p.requires_grad]))
    return units
