"""``--input`` specs -> the arguments a model is called with.

Grammar (one spec per ``--input``; repeat it for more arguments)::

    spec   := [name "="] (shape [":" dtype [range]] | "@" file)
    shape  := dim ("x" dim)*                 dims are integers >= 1
    dtype  := float32 | float16 | bfloat16 | float64 | int64 | int32 | int16
            | int8 | uint8 | bool           (aliases: float half fp16 bf16 double
                                              long int fp32 fp64)
    range  := "[" low "," high ")"          half-open: low <= value < high

Values, drawn from one ``torch.Generator`` seeded with ``seed`` so that runs
repeat exactly:

* floats without a range: standard normal, drawn in float32 and then cast, so
  ``:float16`` and ``:float32`` see the same numbers; with a range: uniform;
* integers: uniform in ``[low, high)``, by default ``[0, 2)`` (valid for masks
  and for any embedding table with at least two rows; give token ids a range);
* bool: each element true with probability 1/2.

``name=...`` passes the value as a keyword argument, otherwise positionally in
the order given. ``@file.pt`` loads a tensor, tuple, list or dict saved with
``torch.save``, with ``weights_only=True`` (no code from the file runs): a tuple
or list becomes positional arguments, a dict keyword arguments, unless the
spec is named, in which case the whole value is that one keyword argument.
Sparse tensors load too, their invariants checked (an index out of bounds would
crash the operators reading it).

Before anything is allocated, the bytes the generated tensors need are compared
with the memory available (and, on CUDA, the device's free memory): a spec
that cannot fit is refused by name, not allocated until the process is killed.

Parsing is pure Python; torch is imported only to build tensors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof import machine
from layerprof.errors import DeviceError, InputSpecError, UsageError
from layerprof.load.formats import torch_file_format
from layerprof.load.limits import seed_problem
from layerprof.load.pickles import refused_globals, scan_torch_file
from layerprof.units import human_bytes

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULT_INT_RANGE",
    "DTYPES",
    "BuiltInputs",
    "InputSpec",
    "build_inputs",
    "describe_value",
    "move_inputs",
    "parse_input_spec",
]

#: Canonical dtype name -> kind ("float", "int", "bool").
DTYPES: dict[str, str] = {
    "float32": "float",
    "float16": "float",
    "bfloat16": "float",
    "float64": "float",
    "int64": "int",
    "int32": "int",
    "int16": "int",
    "int8": "int",
    "uint8": "int",
    "bool": "bool",
}
_ALIASES = {
    "float": "float32",
    "fp32": "float32",
    "half": "float16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "double": "float64",
    "fp64": "float64",
    "long": "int64",
    "int": "int32",
}
_INT_BOUNDS = {
    # torch.randint takes `high` as an int64 itself, so int64's top value is out.
    "int64": (-(2**63), 2**63 - 1),
    "int32": (-(2**31), 2**31),
    "int16": (-(2**15), 2**15),
    "int8": (-128, 128),
    "uint8": (0, 256),
}
#: Range of integer inputs whose spec gives none.
DEFAULT_INT_RANGE = (0, 2)

# ASCII only: int()/float() also accept other scripts' digits, "nan", "1_0".
_DIM = re.compile(r"[0-9]{1,12}")
_INT = re.compile(r"[+-]?[0-9]{1,19}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")
_EXAMPLES = "e.g. 1x3x224x224, 8x128:int64[0,30000), mask=8x128:bool, x=@batch.pt"


@dataclass(frozen=True)
class InputSpec:
    """One parsed ``--input``.

    For ``@file`` specs ``shape`` is ``None`` and ``dtype`` is ``""``. ``low``
    and ``high`` bound uniform draws (``None``: normal floats or bool).
    ``dtype_explicit`` is false when the spec named no dtype, so ``--dtype``
    may cast it.
    """

    name: str | None
    shape: tuple[int, ...] | None
    dtype: str
    low: float | None
    high: float | None
    file: str | None
    text: str
    dtype_explicit: bool = False

    @property
    def canonical(self) -> str:
        """The spec written back in its normal form; it parses to an equal spec."""
        prefix = f"{self.name}=" if self.name else ""
        if self.file is not None:
            return f"{prefix}@{self.file}"
        dims = "x".join(str(d) for d in self.shape or ())
        if not self.dtype_explicit:
            return f"{prefix}{dims}"
        bounds = "" if self.low is None else f"[{_num(self.low)},{_num(self.high)})"
        return f"{prefix}{dims}:{self.dtype}{bounds}"


@dataclass(frozen=True)
class BuiltInputs:
    """Arguments for ``model(*args, **kwargs)`` and one line per argument."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    descriptions: tuple[str, ...]


# --------------------------------------------------------------------- parsing


def parse_input_spec(text: str) -> InputSpec:
    """Parse one ``--input`` spec; :class:`InputSpecError` names what is wrong."""
    body = text.strip()
    if not body:
        raise _bad(text, "it is empty")
    name: str | None = None
    if "=" in body and not body.startswith("@"):
        name, _, body = (part.strip() for part in body.partition("="))
        if not name.isidentifier():
            raise _bad(text, f"'{name}' is not a valid argument name")
    if body.startswith("@"):
        return _file_spec(text, name, body[1:].strip())
    shape_text, colon, dtype_text = body.partition(":")
    shape = _parse_shape(text, shape_text)
    if not colon:
        return InputSpec(name, shape, "float32", None, None, None, text)
    dtype, low, high = _parse_dtype(text, dtype_text.strip())
    return InputSpec(name, shape, dtype, low, high, None, text, dtype_explicit=True)


def _file_spec(text: str, name: str | None, file: str) -> InputSpec:
    if not file:
        raise _bad(text, "'@' needs a file name, e.g. @inputs.pt")
    return InputSpec(name, None, "", None, None, file, text)


def _parse_shape(text: str, shape_text: str) -> tuple[int, ...]:
    if not shape_text.strip():
        raise _bad(text, "no shape before the dtype (write e.g. 1x3x224x224)")
    dims: list[int] = []
    for part in shape_text.split("x"):
        part = part.strip()
        if not part:
            raise _bad(text, "empty dimension (two 'x' in a row, or one at an end)")
        if not _DIM.fullmatch(part):
            raise _bad(text, f"'{part}' is not a dimension")
        if int(part) < 1:
            raise _bad(text, f"dimension {part} must be at least 1")
        dims.append(int(part))
    return tuple(dims)


def _parse_dtype(text: str, dtype_text: str) -> tuple[str, float | None, float | None]:
    word, bracket, rest = dtype_text.partition("[")
    dtype = _dtype_name(text, word.strip())
    kind = DTYPES[dtype]
    if not bracket:
        return (dtype, *DEFAULT_INT_RANGE) if kind == "int" else (dtype, None, None)
    if kind == "bool":
        raise _bad(text, "bool takes no range")
    low, high = _parse_range(text, rest, kind)
    if kind == "int":
        _check_int_bounds(text, dtype, low, high)
    return dtype, low, high


def _dtype_name(text: str, word: str) -> str:
    name = _ALIASES.get(word.lower(), word.lower())
    if name not in DTYPES:
        known = ", ".join(DTYPES)
        raise _bad(text, f"'{word}' is not a dtype (one of {known})")
    return name


def _parse_range(text: str, rest: str, kind: str) -> tuple[float, float]:
    if rest.endswith("]"):
        raise _bad(text, "ranges are half-open: write [low,high)")
    if not rest.endswith(")"):
        raise _bad(text, "range must end with ')', as in [0,30000)")
    ends = [p.strip() for p in rest[:-1].split(",")]
    if len(ends) != 2:
        raise _bad(text, "a range has two ends: [low,high)")
    low, high = (_parse_number(text, end, kind) for end in ends)
    if not low < high:
        raise _bad(text, f"empty range: low {ends[0]} must be below high {ends[1]}")
    return low, high


def _parse_number(text: str, token: str, kind: str) -> float:
    if kind == "int":
        if not _INT.fullmatch(token):
            raise _bad(text, f"'{token}' is not an integer")
        return int(token)
    if not _FLOAT.fullmatch(token):
        raise _bad(text, f"'{token}' is not a number")
    value = float(token)
    if not math.isfinite(value):
        raise _bad(text, f"'{token}' is out of range")
    return value


def _check_int_bounds(text: str, dtype: str, low: float, high: float) -> None:
    lo, hi = _INT_BOUNDS[dtype]
    if low < lo or high > hi:
        raise _bad(text, f"range [{_num(low)},{_num(high)}) does not fit {dtype} [{lo},{hi})")


def _bad(text: str, problem: str) -> InputSpecError:
    return InputSpecError(f"bad input spec {text!r}: {problem}", hint=_EXAMPLES)


def _num(value: float | None) -> str:
    # repr() of an int or a finite float is exactly what the grammar reads back.
    return repr(value)


# -------------------------------------------------------------------- building


def build_inputs(
    specs: Sequence[str | InputSpec],
    *,
    device: str = "cpu",
    float_dtype: str | None = None,
    seed: int = 0,
) -> BuiltInputs:
    """Make the tensors the specs describe, on ``device``.

    ``float_dtype`` (``--dtype``) casts floating inputs whose spec named no
    dtype, including floating tensors loaded from files: a model cast to half
    precision cannot take float32 inputs. A spec with an explicit float dtype
    keeps it.
    """
    import torch

    parsed = [s if isinstance(s, InputSpec) else parse_input_spec(s) for s in specs]
    cast = torch_float_dtype(float_dtype)
    problem = seed_problem(seed)
    if problem is not None:
        raise UsageError(f"--seed: {problem}")
    _check_memory(parsed, device)
    generator = torch.Generator().manual_seed(seed)
    placed = _Placed()
    for spec in parsed:
        value = _load_file(spec) if spec.file is not None else _generate(spec, generator)
        if not spec.dtype_explicit:
            value = move_inputs(value, None, float_dtype=cast)
        placed.add(spec, move_inputs(value, device))
    return BuiltInputs(tuple(placed.args), placed.kwargs, tuple(placed.descriptions))


def example_inputs(
    program: Any, *, device: str = "cpu", float_dtype: str | None = None
) -> BuiltInputs:
    """The example inputs a ``torch.export`` program was exported with, when no
    ``--input`` is given (the program guards on their shapes anyway)."""

    example = getattr(program, "example_inputs", None)
    if not example:
        raise InputSpecError(
            "no --input given and the exported program carries no example inputs",
            hint="e.g. --input 1x3x224x224",
        )
    args, kwargs = example
    cast = torch_float_dtype(float_dtype)
    args = tuple(move_inputs(move_inputs(a, None, float_dtype=cast), device) for a in args)
    kwargs = {
        k: move_inputs(move_inputs(v, None, float_dtype=cast), device) for k, v in kwargs.items()
    }
    descriptions = [
        f"args[{i}]: {describe_value(a)} (exported example)" for i, a in enumerate(args)
    ]
    descriptions += [f"{k}: {describe_value(v)} (exported example)" for k, v in kwargs.items()]
    return BuiltInputs(args, kwargs, tuple(descriptions))


def torch_float_dtype(name: str | None) -> torch.dtype | None:
    if name is None:
        return None
    canonical = _ALIASES.get(name.lower(), name.lower())
    if DTYPES.get(canonical) != "float":
        raise UsageError(f"--dtype {name} is not a floating dtype (float32, float16, ...)")
    return _torch_dtype(canonical)


def _torch_dtype(name: str) -> torch.dtype:
    import torch

    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype)
    return dtype


def _generate(spec: InputSpec, generator: torch.Generator) -> torch.Tensor:
    import torch

    shape = spec.shape or ()
    kind = DTYPES[spec.dtype]
    dtype = _torch_dtype(spec.dtype)
    if kind == "bool":
        return torch.rand(shape, generator=generator) < 0.5
    if kind == "int":
        low, high = _int_range(spec)
        drawn = torch.randint(low, high, shape, generator=generator, dtype=torch.int64)
        return drawn.to(dtype)
    if spec.low is None or spec.high is None:
        return torch.randn(shape, generator=generator).to(dtype)
    uniform = torch.rand(shape, generator=generator, dtype=torch.float64)
    return (uniform * (spec.high - spec.low) + spec.low).to(dtype)


_ITEMSIZE = {
    "float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4,
    "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
}  # fmt: skip


def _build_bytes(spec: InputSpec) -> tuple[int, int]:
    """Bytes ``(peak, kept)`` building the tensor of ``spec`` takes: it is drawn in a
    wider dtype first (float32 normals, float64 uniforms scaled in two steps, int64
    integers, float32 for bools), then cast to the one it keeps."""
    numel = math.prod(spec.shape or ())
    kept = _ITEMSIZE[spec.dtype]
    kind = DTYPES[spec.dtype]
    if kind == "int":
        drawn = 8
    elif kind == "bool" or spec.low is None:
        drawn = 4
    else:
        drawn = 3 * 8
    return numel * (drawn + kept), numel * kept


def _check_memory(specs: Sequence[InputSpec], device: str) -> None:
    """Refuse inputs that cannot fit before allocating them: an oversized spec
    would otherwise be allocated until the kernel kills the process."""

    room = machine.available_memory()  # the module's: a test or a caller may set it
    if room is None:
        return
    kept = 0
    for spec in specs:
        if spec.shape is None:
            continue
        peak, size = _build_bytes(spec)
        if kept + peak > room:
            numel = math.prod(spec.shape)
            before = f" after {human_bytes(kept)} of earlier inputs" if kept else ""
            raise InputSpecError(
                f"bad input spec {spec.text!r}: {numel:,} elements of {spec.dtype} need"
                f" {human_bytes(peak)} to build{before}, more than the"
                f" {human_bytes(room)} of memory available",
                hint="use a smaller shape",
            )
        kept += size
    _check_device_memory(specs, device, kept)


def _check_device_memory(specs: Sequence[InputSpec], device: str, total: int) -> None:
    if not device.startswith("cuda") or total == 0:
        return
    import torch

    try:
        free, _ = torch.cuda.mem_get_info(device)
    except (RuntimeError, AssertionError, ValueError):
        return  # no such device: moving the inputs reports it
    if total > free:
        texts = ", ".join(repr(s.text) for s in specs if s.shape is not None)
        raise InputSpecError(
            f"inputs {texts} need {human_bytes(total)} on {device}, more than its"
            f" {human_bytes(free)} free",
            hint="use a smaller shape",
        )


def _int_range(spec: InputSpec) -> tuple[int, int]:
    if spec.low is None or spec.high is None:
        return DEFAULT_INT_RANGE
    return int(spec.low), int(spec.high)


def _load_file(spec: InputSpec) -> Any:
    import pickle

    import torch

    path = Path(spec.file or "")
    if path.is_dir():
        raise _bad(spec.text, f"{path} is a directory, not a file")
    if not path.exists():
        raise _bad(spec.text, f"no such file {path}")
    if _file_format(spec, path) not in ("torch", "pickle"):
        raise _bad(spec.text, f"{path} is not a torch.save file")
    try:
        # Sparse tensors are checked as they load: one whose indices break its
        # invariants would crash (segfault) the operators that read it.
        with torch.sparse.check_sparse_tensor_invariants():  # type: ignore[no-untyped-call]
            value = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise _bad(spec.text, _refused_text(path)) from None
    except Exception as exc:
        raise _bad(spec.text, _unloadable_text(path, exc)) from exc
    return value


def _refused_text(path: Path) -> str:

    scan = scan_torch_file(path)
    refused = refused_globals(scan)
    if not refused and not scan.complete:
        return f"{path} is a damaged pickle stream (truncated?)"
    named = f" (it contains {refused[0]})" if refused else ""
    return (
        f"{path} was refused{named}: only tensors, numbers, tuples, lists and dicts load"
        " without running code from the file"
    )


def _unloadable_text(path: Path, exc: Exception) -> str:
    import torch

    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    try:  # does it load when sparse invariants are not checked?
        torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        # torch 2.15 checks them in every weights_only load: a file that names a sparse
        # tensor's rebuild and then fails is one whose sparse tensor breaks them
        if not _SPARSE_REBUILD & set(scan_torch_file(path).globals):
            return f"{path} is not a torch.save file ({type(exc).__name__})"
    return f"{path} holds a sparse tensor that breaks its invariants ({first})"


_SPARSE_REBUILD = frozenset(
    {"torch._utils._rebuild_sparse_tensor", "torch._utils._rebuild_sparse_csr_tensor"}
)


def _file_format(spec: InputSpec, path: Path) -> str:

    try:
        return torch_file_format(path)
    except OSError as exc:
        raise _bad(spec.text, f"cannot read {path}: {exc.strerror or exc}") from exc


class _Placed:
    """Collects values into positional/keyword arguments with descriptions."""

    def __init__(self) -> None:
        self.args: list[Any] = []
        self.kwargs: dict[str, Any] = {}
        self.descriptions: list[str] = []

    def add(self, spec: InputSpec, value: Any) -> None:
        origin = f" (from {spec.file})" if spec.file is not None else ""
        if spec.name is not None:
            self._keyword(spec, spec.name, value, origin)
        elif spec.file is not None and isinstance(value, (tuple, list)):
            for item in value:
                self._positional(item, origin)
        elif spec.file is not None and isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str) or not key.isidentifier():
                    raise _bad(spec.text, f"dict key {key!r} cannot be a keyword argument")
                self._keyword(spec, key, item, origin)
        else:
            self._positional(value, origin)

    def _positional(self, value: Any, origin: str) -> None:
        self.descriptions.append(f"args[{len(self.args)}]: {describe_value(value)}{origin}")
        self.args.append(value)

    def _keyword(self, spec: InputSpec, name: str, value: Any, origin: str) -> None:
        if name in self.kwargs:
            raise _bad(spec.text, f"keyword argument '{name}' is given twice")
        self.kwargs[name] = value
        self.descriptions.append(f"{name}: {describe_value(value)}{origin}")


# --------------------------------------------------------- nested structures


def move_inputs(obj: Any, device: str | None, *, float_dtype: torch.dtype | None = None) -> Any:
    """Move every tensor in a nested tuple/list/dict to ``device`` (``None``: stay).

    Floating tensors are cast to ``float_dtype`` when given. Containers keep
    their type (named tuples included); other leaves pass through unchanged.
    """
    if isinstance(obj, tuple):
        items = [move_inputs(v, device, float_dtype=float_dtype) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [move_inputs(v, device, float_dtype=float_dtype) for v in obj]
    if isinstance(obj, Mapping):
        return {k: move_inputs(v, device, float_dtype=float_dtype) for k, v in obj.items()}
    if not _is_tensor(obj):
        return obj
    if float_dtype is not None and obj.is_floating_point():
        obj = obj.to(float_dtype)
    return obj if device is None else _to_device(obj, device)


def _is_tensor(obj: Any) -> bool:
    # Checked by class name so that plain values never import torch.
    return any(c.__name__ == "Tensor" and c.__module__ == "torch" for c in type(obj).__mro__)


def _to_device(tensor: Any, device: str) -> Any:
    try:
        return tensor.to(device)
    except (RuntimeError, AssertionError) as exc:
        # torch raises AssertionError ("Torch not compiled with CUDA enabled") or
        # RuntimeError (bad ordinal, no driver) for an unusable device.
        raise DeviceError(
            f"cannot put inputs on device {device!r}: {str(exc).splitlines()[0]}"
        ) from exc


def describe_value(obj: Any, *, limit: int = 8) -> str:
    """A short type-and-shape text: ``float32[1, 3, 224, 224]``, ``(int64[4], bool[4])``."""
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        dtype = str(obj.dtype).removeprefix("torch.")
        return f"{dtype}[{', '.join(str(int(d)) for d in obj.shape)}]"
    if isinstance(obj, (tuple, list)):
        inner = _join([describe_value(v, limit=limit) for v in obj[:limit]], len(obj), limit)
        return f"({inner})" if isinstance(obj, tuple) else f"[{inner}]"
    if isinstance(obj, Mapping):
        items = list(obj.items())
        parts = [f"{k}: {describe_value(v, limit=limit)}" for k, v in items[:limit]]
        return "{" + _join(parts, len(items), limit) + "}"
    if obj is None or isinstance(obj, (bool, int, float)):
        return repr(obj)
    text = repr(obj)
    return f"{type(obj).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def _join(parts: list[str], total: int, limit: int) -> str:
    more = f", ... ({total - limit} more)" if total > limit else ""
    return ", ".join(parts) + more
