"""What the installed PyTorch offers that the toolkit uses, detected rather than read off its version.

The toolkit is pinned to torch 2.13 on CPU, but a GPU machine brings its own build (a borrowed one has 2.11), and a
feature that moved between releases must not fail there as an ``AttributeError`` deep inside a collective. So each
such feature is looked up by name once, here:

* :func:`all_gather_single`: torch 2.13's name for the gather into one tensor; 2.11 has only
  ``all_gather_into_tensor`` (the same collective, deprecated under that name in 2.13).
* :func:`fsdp_param_groups`: an FSDP2 unit's parameter groups, a list per mesh in 2.13
  (``FSDPState._fsdp_param_groups``) where 2.11 keeps one (``_fsdp_param_group``).
* :func:`premul_sum_factor`: the factor of FSDP2's ``PREMUL_SUM`` reduce op, ``op.factor`` in 2.13; 2.11's op
  does not expose it, so it is read where FSDP2 took it from (the unit's ``gradient_divide_factor``).
* :func:`has_fsdp2_comm_hooks`: FSDP2's ``set_custom_reduce_scatter`` and ``set_custom_all_gather``, which Zen-FSDP2
  installs its collectives through (:func:`require_fsdp2_comm_hooks` refuses with the torch version when missing).

:func:`features` lists every detection, for the GPU check's environment record.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def all_gather_single(output: torch.Tensor, input: torch.Tensor, group=None, async_op: bool = False):
    """Gather every rank's ``input`` into ``output`` (``world`` x its numel): ``dist.all_gather_single`` where torch
    has it, else ``dist.all_gather_into_tensor``, the same collective under its older name."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(output, input, group=group, async_op=async_op)


def fsdp_param_groups(unit) -> list:
    """The FSDP2 ``unit``'s parameter groups that exist: 2.13's list, or 2.11's one group as a list (empty when the
    unit manages no parameters)."""
    state = unit._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is None:
        groups = [getattr(state, "_fsdp_param_group", None)]
    return [g for g in groups if g is not None]


def premul_sum_factor(op, unit=None) -> float:
    """The factor a ``PREMUL_SUM`` ``op`` multiplies each input by: ``op.factor`` where torch exposes it, else
    ``1 / gradient_divide_factor`` of the FSDP2 ``unit``'s parameter group, the float FSDP2 made the op from."""
    factor = getattr(op, "factor", None)
    if factor is not None:
        return float(factor)
    groups = fsdp_param_groups(unit) if hasattr(unit, "_get_fsdp_state") else []
    divide = groups[0].gradient_divide_factor if groups else None
    if divide is None:
        raise ValueError(
            f"torch {torch.__version__}'s PREMUL_SUM op does not expose its factor, and no FSDP2 unit with a "
            "gradient divide factor was given to read it from"
        )
    return 1 / divide


def has_fsdp2_comm_hooks() -> bool:
    """Whether FSDP2 takes custom collectives (``FSDPModule.set_custom_reduce_scatter``, ``set_custom_all_gather``)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2
        return False
    return all(hasattr(FSDPModule, m) for m in ("set_custom_reduce_scatter", "set_custom_all_gather"))


def require_fsdp2_comm_hooks() -> None:
    """Raise a RuntimeError naming the torch version when FSDP2 cannot take Zen's collectives."""
    if not has_fsdp2_comm_hooks():
        raise RuntimeError(
            f"torch {torch.__version__} has no FSDPModule.set_custom_reduce_scatter / set_custom_all_gather, "
            "which Zen-FSDP2 installs its collectives through: use a torch that has them (2.11 and 2.13 do)"
        )


def features() -> dict[str, bool | str]:
    """Every feature this module detects, by name, with the torch version and build."""
    return {
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda or "",
        "all_gather_single": hasattr(dist, "all_gather_single"),
        "all_gather_into_tensor": hasattr(dist, "all_gather_into_tensor"),
        "fsdp2_comm_hooks": has_fsdp2_comm_hooks(),
        "nccl_available": dist.is_nccl_available(),
        "gloo_available": dist.is_gloo_available(),
    }
