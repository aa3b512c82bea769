"""The dtype contract of every scheme: a tensor is summed in its own dtype, as ``dist.all_reduce`` sums it.

* **Supported** (:data:`SUPPORTED`): the dtypes gloo's and NCCL's all-reduce both sum: float32, float64, float16,
  bfloat16, int64, int32, int8, uint8. Anything else (complex, bool, int16, the unsigned 16-64-bit types) is
  refused by :func:`check_dtype` with the list, never converted: gloo has no int16 sum ("Invalid scalar type"), a
  complex or bool sum is not what a gradient sync means, and a silent float32 detour loses integers above 2**24
  and float64's last 29 bits.
* **On the wire** every value travels at its own width (:func:`value_bytes`): 2 bytes for fp16/bf16, 8 for
  float64 and int64. The traffic models take the same ``dtype`` so their bytes stay exact.
* **Where a rank adds values** (a server aggregating its partition, AGsparse's local sum, SparCML's merge,
  OmniReduce's aggregator) it adds in :func:`accumulate_dtype`: the dtype itself, except fp16/bf16, which are added
  in float32 and rounded once to the input's dtype when the sum is final (where a partial sum must travel, as in
  SparCML's stages, it travels rounded to the input's dtype, as a bf16 all-reduce's partial sums do). Rounding
  once is what a careful user expects from a half-precision sum: a ring all-reduce rounds after every add, so on
  random half-precision inputs a scheme and ``all_reduce`` agree to the dtype's rounding, and bit for bit on
  integer-valued inputs whose sums are representable.
* **Integers** add in their own dtype and wrap on overflow exactly as ``all_reduce`` wraps (two's complement).
* **Signed zeros**: every rank ends with the same bits. A sparse scheme sends no exact zero of either sign, so a
  zero sum is ``+0.0`` on every rank (:func:`positive_zeros`), where ``all_reduce`` (and the ``allreduce`` scheme,
  which is it) gives ``-0.0`` at a position every rank held ``-0.0``: the one bit pattern in which a sparse scheme
  and ``all_reduce`` differ, and only in the sign of a zero.
"""

from __future__ import annotations

import zlib

import torch

SUPPORTED = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
)
"""The dtypes every scheme sums: those both gloo's and NCCL's all-reduce sum."""

_HALF = (torch.float16, torch.bfloat16)


def check_dtype(dtype: torch.dtype, *, what: str = "the tensor") -> torch.dtype:
    """``dtype`` when a scheme can sum it; else ``TypeError`` listing the supported dtypes."""
    if dtype not in SUPPORTED:
        names = ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED)
        raise TypeError(
            f"{what} has dtype {str(dtype).removeprefix('torch.')}, which the schemes do not sum; "
            f"supported: {names} (convert it yourself if a conversion is what you mean)"
        )
    return dtype


def on_wire(x: torch.Tensor, wire_dtype: torch.dtype | None) -> torch.Tensor:
    """``x`` in the dtype it is summed in (``sync.wire_dtype``): ``x`` itself when that is None or its own, else a
    cast copy (a 2-byte float on the wire; the caller casts the sum back)."""
    return x if wire_dtype in (None, x.dtype) else x.to(wire_dtype)


def value_bytes(dtype: torch.dtype) -> int:
    """Bytes one value of ``dtype`` takes on the wire."""
    return check_dtype(dtype).itemsize


def accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a rank adds ``dtype`` values in: float32 for fp16/bf16 (rounded once at the end), else itself."""
    return torch.float32 if dtype in _HALF else dtype


def dtype_code(dtype: torch.dtype) -> int:
    """A stable number for ``dtype`` (what the ranks' agreement check exchanges)."""
    return zlib.crc32(str(dtype).encode())


def dtype_of_code(code: int) -> str:
    """The dtype name :func:`dtype_code` gave ``code`` (for error messages), or the code itself."""
    for d in (
        *SUPPORTED,
        torch.int16,
        torch.bool,
        torch.complex64,
        torch.complex128,
        torch.uint16,
        torch.uint32,
        torch.uint64,
    ):
        if dtype_code(d) == code:
            return str(d).removeprefix("torch.")
    return f"<dtype code {code}>"


def positive_zeros(x: torch.Tensor) -> torch.Tensor:
    """``x`` with every ``-0.0`` made ``+0.0``, in place (``x + 0.0`` changes no other value's bits, infinities and
    subnormals included; a NaN stays a NaN); integers are returned as they are.

    Why: a sparse scheme sends no exact zero, of either sign, so a position where this rank held ``-0.0`` and no
    rank a non-zero is not written and would keep this rank's sign, while its peers hold ``+0.0``: replicas that
    should be identical would hash differently. The sign of a zero sum is the one thing a sparse scheme cannot
    match ``all_reduce`` on (``-0.0`` where every rank held ``-0.0``, which only a dense exchange learns), so the
    dtype contract makes it ``+0.0`` on every rank. One vectorized pass, small beside the non-zero scan it follows
    (it sits inside the local work that ``zen-analysis bench zen`` times)."""
    if x.is_floating_point():
        x.add_(0.0)
    return x
