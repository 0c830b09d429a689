"""The arguments a trace writes on collectives, read once while the events are collected.

Kineto writes what a collective was on a few events: ``record_param_comms``
ops and, in newer traces, the NCCL kernels themselves (``Collective name``,
``In msg nelems`` / ``Out msg nelems``, ``dtype``, ``Group size``,
``Process Group Name`` / ``Description`` / ``Ranks``); with
``record_shapes=True`` the ``nccl:*`` / ``gloo:*`` annotations carry the
tensor's ``Input Dims`` and ``Input type``. Every field may be missing or
malformed: what is not usable is None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: Host span names that belong to a collective (the issuing op, its args, its range).
COMM_HOST = re.compile(r"^(?:c10d::|record_param_comms|(?:nccl|rccl|gloo|mpi|ucc|xccl|hccl):)")
#: Host spans that *are* a collective's execution (CPU backends run it on a worker thread).
HOST_EXECUTION = re.compile(r"^(?:gloo|mpi|ucc):")

# Element sizes of the dtypes Kineto names (c10 ScalarType names and C type names).
_DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "c10::bfloat16": 2, "c10::half": 2, "long": 8, "int64": 8, "int": 4,
    "int32": 4, "short": 2, "int16": 2, "char": 1, "signed char": 1, "unsigned char": 1,
    "byte": 1, "uint8": 1, "int8": 1, "bool": 1, "complexfloat": 8, "complexdouble": 16,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}  # fmt: skip

#: torch.distributed ranks and world sizes are C ints: a larger id or size read from a
#: trace (or a file name) is not one, and is never used to size anything.
MAX_RANKS = 1 << 31


def rank_id(value: Any) -> int | None:
    """``value`` as a rank id: an int in ``[0, MAX_RANKS)``; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_RANKS:
        return None
    return value


def world_size(value: Any) -> int | None:
    """``value`` as a world or group size: an int in ``[1, MAX_RANKS]``; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_RANKS:
        return None
    return value


@dataclass(frozen=True)
class CommArgs:
    """What one event says about its collective (None: not said, or not usable)."""

    collective: str | None = None
    in_nelems: int | None = None
    out_nelems: int | None = None
    dtype: str | None = None
    group: str | None = None
    group_desc: str | None = None
    group_ranks: str | None = None
    group_size: int | None = None
    seq: int | None = None

    @property
    def bytes(self) -> int | None:
        """Message size: the larger of input and output (nccl-tests' convention:
        all-gather counts its output, reduce-scatter its input)."""
        size = _dtype_bytes(self.dtype)
        counts = [n for n in (self.in_nelems, self.out_nelems) if n is not None]
        if size is None or not counts:
            return None
        return max(counts) * size

    def merged(self, other: CommArgs) -> CommArgs:
        """These args, with the gaps filled from ``other``."""
        return CommArgs(
            **{
                k: getattr(self, k) if getattr(self, k) is not None else getattr(other, k)
                for k in self.__dataclass_fields__
            }
        )


def _dtype_bytes(dtype: str | None) -> int | None:
    if dtype is None:
        return None
    return _DTYPE_BYTES.get(dtype.strip().lower())


def comm_args(args: dict[str, Any]) -> CommArgs | None:
    """The collective fields of one event's args; None when it has none."""
    out = CommArgs(
        collective=_text(args.get("Collective name")),
        in_nelems=_count(args.get("In msg nelems")),
        out_nelems=_count(args.get("Out msg nelems")),
        dtype=_text(args.get("dtype")),
        group=_text(args.get("Process Group Name")),
        group_desc=_text(args.get("Process Group Description")),
        group_ranks=_text(args.get("Process Group Ranks")),
        group_size=world_size(args.get("Group size")),
        seq=_count(args.get("Seq")),
    )
    if out.in_nelems is None and out.dtype is None:
        # An annotation recorded with shapes: its first input is the message.
        dims, types = args.get("Input Dims"), args.get("Input type")
        n = _elements(dims[0]) if isinstance(dims, list) and dims else None
        kind = types[0] if isinstance(types, list) and types else None
        if n is not None and isinstance(kind, str) and _dtype_bytes(kind) is not None:
            out = CommArgs(**{**out.__dict__, "in_nelems": n, "dtype": kind})
    return None if out == CommArgs() else out


def _text(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (str, int)):
        return str(value)[:200]
    return None


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 0 <= value < 1 << 62:
        return value
    return None


def _elements(shape: Any) -> int | None:
    """Elements of a shape ``[8192, 384]``; a tensor list's (``[[9352]]``) first tensor."""
    if isinstance(shape, list) and shape and isinstance(shape[0], list):
        shape = shape[0]
    if not isinstance(shape, list) or not shape:
        return None
    n = 1
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            return None
        n *= d
    return n if n < 1 << 62 else None
