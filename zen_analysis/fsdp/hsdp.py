"""Zen under HSDP (FSDP2 on a ``(replicate, shard)`` mesh): the embedding table's gradient summed by rows both
within a replica's shard group and across the replicas, where stock HSDP reduce-scatters the whole table within
the group and then all-reduces the whole shard across replicas.

Stock HSDP runs both collectives inside ``foreach_reduce`` and offers no custom all-reduce, only a hook that runs
after it. So the embedding unit is sharded 1-D, over the shard sub-mesh (``mesh_2d["shard"]``): its reduce-scatter
is Zen's push (:class:`~zen_analysis.fsdp.reduce_scatter.SparseReduceScatter`) within the shard group, and the sum
across replicas is the unit's all-reduce hook (``set_all_reduce_hook``; on a 1-D unit it runs on the reduce-scatter
output, before FSDP2's post-division and its cast to the parameter dtype): Zen by rows
(:func:`~zen_analysis.zen.sparse_allreduce.zen_sum_rows`) over the replicate group, on the shard's rows that are
non-zero. The other units keep stock HSDP on the 2-D mesh; FSDP2 accepts units on different meshes in one model.

The weight is then a DTensor on the shard sub-mesh (``Shard(0)``) rather than on the 2-D mesh
(``(Replicate(), Shard(0))``): the same local shard on every rank, and the same replicas, but code that combines
DTensors across units meets two meshes. The optimizers do not (they step parameter by parameter, ``foreach``
included); ``torch.nn.utils.clip_grad_norm_`` does (it stacks the norms of all gradients) and refuses:
:func:`clip_grad_norm_` here reduces each mesh's norm over its own mesh first.

The division is stock HSDP's, step for step (:func:`hsdp_division`): where stock averages over the shards then over
the replicas (fp32/bf16 reduce dtypes, no factor set), the unit averages over its shard group and the hook divides
the replica sum by the replicas; where stock divides by one factor before and after (fp16, a factor set, or sums
forced), the unit is given that factor and the hook only sums. Gradient accumulation without the replica sum
(``set_requires_all_reduce(False)``, as for stock HSDP) keeps the partial sums and sums them across replicas on the
step that does it.

Shape suffixes: R rows of this rank's shard, D values per row (the table's width), K non-zero rows of the shard, U rows
of the sum over the replicas (the union).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.utils import clip_grads_with_norm_, get_total_norm

from zen_analysis.fsdp.reduce_scatter import SparseReduceScatter
from zen_analysis.fsdp.units import EmbeddingUnit, UnitError, embedding_units
from zen_analysis.wire.exchange import Exchange, ring_bytes_sent
from zen_analysis.wire.inflight import outside_python_tls
from zen_analysis.wire.rows import nonzero_rows
from zen_analysis.wire.torch_features import fsdp_param_groups
from zen_analysis.zen.sparse_allreduce import zen_sum_rows

NO_OVERFLOW = (torch.float32, torch.bfloat16)
"""Reduce dtypes FSDP2 divides inside the collectives (AVG, PREMUL_SUM) rather than before and after them."""


@dataclass(frozen=True)
class Division:
    """How the embedding unit divides so that its gradient equals stock HSDP's."""

    unit_factor: float | None
    """``set_gradient_divide_factor`` on the 1-D unit (None: FSDP2's own, an average over the shard group)."""
    force_sum: bool
    """``set_force_sum_reduction_for_comms`` on the 1-D unit."""
    replica_divisor: int | None
    """What the hook divides the replica sum by (stock's all-reduce ``AVG``), or None (stock's ``SUM``)."""


def hsdp_division(
    reduce_dtype: torch.dtype, shards: int, replicas: int, factor: float | None = None, force_sum: bool = False
) -> Division:
    """The 1-D unit's division for what stock HSDP does with ``factor`` and ``force_sum`` on a ``replicas x
    shards`` mesh (FSDP2's ``_get_gradient_divide_factors``). fp32/bf16, no factor, no forced sum: stock
    reduce-scatters with ``AVG`` and all-reduces with ``AVG``, so the unit keeps FSDP2's default (``AVG`` over its
    shard group) and the hook divides by ``replicas`` after the sum. A factor set: stock divides by it in the
    reduce-scatter (``AVG`` or ``PREMUL_SUM``) and sums the replicas; the unit is given the same factor. fp16 or
    sums forced: stock divides by the factor (default ``shards * replicas``) before and after two sums; the unit is
    given that factor and the flag, and FSDP2 splits it the same way."""
    if reduce_dtype in NO_OVERFLOW and not force_sum:
        if factor is None:
            return Division(None, False, replicas if replicas > 1 else None)
        return Division(factor, False, None)
    return Division(float(shards * replicas) if factor is None else factor, force_sum, None)


def reduce_dtype_of(weight: torch.Tensor, mp_policy) -> torch.dtype:
    """The dtype FSDP2 reduces ``weight``'s gradient in: the policy's reduce dtype, else its param dtype, else the
    weight's."""
    if mp_policy is None:
        return weight.dtype
    return mp_policy.reduce_dtype or mp_policy.param_dtype or weight.dtype


class ZenHSDP:
    """Zen on one embedding unit under HSDP (module docstring): the sparse reduce-scatter within the shard group,
    the sparse replica sum as the unit's all-reduce hook, and the division that equals stock HSDP's. Its exchanges
    count the bytes: :meth:`reduce_scatter_bytes`, :meth:`replica_bytes`."""

    def __init__(
        self, unit: EmbeddingUnit, mesh_2d: DeviceMesh, reduce_dtype: torch.dtype, *, row_source: str, seed: int
    ):
        replicate, shard = mesh_2d.mesh_dim_names
        self.unit = unit
        self.shards, self.replicas = mesh_2d[shard].size(), mesh_2d[replicate].size()
        self.reduce_dtype = reduce_dtype
        self.seed = seed
        self.reduce_scatter = SparseReduceScatter(unit, row_source=row_source)
        self.replica = Exchange(mesh_2d[replicate].get_group())
        """The replicate group's exchange: the hook's collectives and their bytes."""
        self.factor: float | None = None
        self.force_sum = False
        """The division stock HSDP would be given (its ``set_gradient_divide_factor`` / forced sums)."""
        self.division = hsdp_division(reduce_dtype, self.shards, self.replicas)
        """What the unit and the hook divide by (:func:`hsdp_division`)."""
        self.calls = 0
        self.last: dict[str, int] = {}
        """``rows`` this rank sent across replicas, ``union`` rows the replicas' sum holds."""
        self._partial_RD: torch.Tensor | None = None
        unit.unit.set_custom_reduce_scatter(self.reduce_scatter)
        unit.unit.set_all_reduce_hook(self._replica_sum)
        self._apply_division()

    def set_gradient_divide_factor(self, factor: float | None) -> None:
        """What ``set_gradient_divide_factor`` does on a stock HSDP unit (None: FSDP2's default)."""
        self.factor = factor
        self._apply_division()

    def set_force_sum_reduction_for_comms(self, enable: bool) -> None:
        """What ``set_force_sum_reduction_for_comms`` does on a stock HSDP unit."""
        self.force_sum = enable
        self._apply_division()

    def _apply_division(self) -> None:
        self.division = hsdp_division(self.reduce_dtype, self.shards, self.replicas, self.factor, self.force_sum)
        self.unit.unit.set_gradient_divide_factor(self.division.unit_factor)
        self.unit.unit.set_force_sum_reduction_for_comms(self.division.force_sum)

    def _param_group(self):
        return fsdp_param_groups(self.unit.unit)[0]

    @outside_python_tls
    def _replica_sum(self, reduce_output: torch.Tensor) -> None:
        """The all-reduce hook: this shard's gradient summed across the replicas in place, by rows (Zen), then
        divided as stock HSDP's all-reduce divides. Under gradient accumulation without the replica sum, the shard's
        sum is kept aside and the shard handed back zeroed (FSDP2 accumulates it into the gradient), as stock HSDP
        keeps its partial sum, and added back on the step that sums."""
        if (reduce_output.dtype in NO_OVERFLOW) != (self.reduce_dtype in NO_OVERFLOW):
            raise RuntimeError(
                f"{self.unit.name}: FSDP2 reduced in {reduce_output.dtype}, planned for {self.reduce_dtype}: pass "
                "the unit's mp_policy to shard_embedding_hsdp so its division matches stock HSDP's"
            )
        shard_RD = reduce_output.view(-1, self.unit.dim)
        if not self._param_group().all_reduce_grads:
            if self._partial_RD is None:
                self._partial_RD = shard_RD.clone()
            else:
                self._partial_RD += shard_RD
            shard_RD.zero_()
            return
        if self._partial_RD is not None:
            shard_RD += self._partial_RD
            self._partial_RD = None
        if self.replicas == 1:
            return
        rows_K = nonzero_rows(shard_RD)
        rows_U, sums_UD = zen_sum_rows(
            rows_K, shard_RD.index_select(0, rows_K), shard_RD.shape[0], self.replica, seed=self.seed
        )
        if self.division.replica_divisor is not None:
            sums_UD.div_(self.division.replica_divisor)
        shard_RD.index_copy_(0, rows_U.to(shard_RD.device), sums_UD.to(shard_RD.device))
        self.calls += 1
        self.last = {"rows": rows_K.numel(), "union": rows_U.numel()}

    def reduce_scatter_bytes(self) -> int:
        """Bytes this rank's sparse reduce-scatters sent to the other ranks of its shard group so far."""
        ex = self.reduce_scatter.exchange
        return sum(r.bytes_sent for r in ex.records.values()) if ex is not None else 0

    def replica_bytes(self) -> int:
        """Bytes this rank's replica sums sent to the other replicas so far."""
        return sum(r.bytes_sent for r in self.replica.records.values())

    def bytes_sent(self) -> int:
        return self.reduce_scatter_bytes() + self.replica_bytes()

    def dense_bytes_per_step(self) -> dict[str, int]:
        """Bytes stock HSDP sends from this rank for this unit, counted as
        :class:`~zen_analysis.wire.exchange.Exchange` counts: ``reduce_scatter``, its chunks for the other shards
        (each backward), and ``replica``, the ring all-reduce of the shard across replicas (each summing
        backward)."""
        per = -(-self.unit.rows // self.shards)
        shard_numel, size = per * self.unit.dim, self.reduce_dtype.itemsize
        return {
            "reduce_scatter": (self.shards - 1) * shard_numel * size,
            "replica": ring_bytes_sent(shard_numel, size, self.replicas, self.replica.rank),
        }


def shard_embedding_hsdp(
    embedding: nn.Module,
    mesh_2d: DeviceMesh,
    *,
    mp_policy=None,
    row_source: str = "ids",
    seed: int = 0,
    name: str = "embedding",
    **fsdp_kwargs,
) -> ZenHSDP:
    """``fully_shard`` ``embedding`` (an ``nn.Embedding``, or a module holding one untied table and nothing else)
    for HSDP with Zen: 1-D over ``mesh_2d``'s shard dimension (the second; the mesh needs dimension names), Zen's
    reduce-scatter on it, Zen's replica sum as its all-reduce hook and stock HSDP's division (module docstring).
    Call it before ``fully_shard`` of the modules around it, which take ``mesh_2d``; ``mp_policy`` and
    ``fsdp_kwargs`` go to ``fully_shard`` (pass the policy the other units get: it fixes the division).
    ``row_source`` and ``seed``: the reduce-scatter's rows (:class:`SparseReduceScatter`) and the replica sum's hash
    seed. Set a divide factor or forced sums on the returned object, not on the unit."""
    if mesh_2d.ndim != 2 or mesh_2d.mesh_dim_names is None:
        raise ValueError(
            "shard_embedding_hsdp takes the HSDP mesh: 2-D with named dimensions, replicate first, e.g. "
            'init_device_mesh("cpu", (R, S), mesh_dim_names=("replicate", "shard"))'
        )
    fsdp_kwargs = {**fsdp_kwargs, **({"mp_policy": mp_policy} if mp_policy is not None else {})}
    fully_shard(embedding, mesh=mesh_2d[mesh_2d.mesh_dim_names[1]], **fsdp_kwargs)
    units = embedding_units(embedding)
    if not units:
        raise UnitError(f"{name}: the module holds no nn.Embedding for Zen to sum by rows")
    unit = EmbeddingUnit(unit=units[0].unit, embedding=units[0].embedding, name=name)
    weight = unit.embedding.weight
    return ZenHSDP(unit, mesh_2d, reduce_dtype_of(weight, mp_policy), row_source=row_source, seed=seed)


def clip_grad_norm_(
    parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None
) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` for a model whose gradients are DTensors on more than one mesh (the Zen
    table on the shard sub-mesh, the other HSDP units on the 2-D mesh), which torch's refuses: the gradients are
    grouped by mesh, each group's norm reduced over its own mesh (one collective a mesh), the groups' norms
    combined (one mesh, as under FSDP2: its norm as it is), and every gradient scaled by the one total. Returns the
    total norm (a plain tensor)."""
    by_mesh: dict = {}
    for p in parameters:
        if p.grad is not None:
            by_mesh.setdefault(p.grad.device_mesh if isinstance(p.grad, DTensor) else None, []).append(p)
    norms = []
    for group in by_mesh.values():
        n = get_total_norm([p.grad for p in group], norm_type, error_if_nonfinite, foreach)
        norms.append(n.full_tensor() if isinstance(n, DTensor) else n)
    total = norms[0] if len(norms) == 1 else get_total_norm(norms, norm_type, error_if_nonfinite, foreach)
    for group in by_mesh.values():
        clip_grads_with_norm_(group, max_norm, total, foreach)
    return total
