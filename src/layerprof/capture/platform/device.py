"""Device and dtype for a run: checked up front with a clear error."""

from __future__ import annotations

from typing import Any

from layerprof.capture.platform.distributed import rank_info
from layerprof.errors import DeviceError, UsageError
from layerprof.load.inputs import move_inputs, torch_float_dtype


def resolve_device(spec: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N`` -> a canonical device string, or a clear error.

    The spec is parsed before CUDA is asked about, so a typo is a usage error
    on any machine.
    """
    if spec == "cpu":
        return "cpu"
    if spec != "cuda" and not spec.startswith("cuda:"):
        raise UsageError(f"--device {spec!r}: expected cpu, cuda or cuda:N")
    index = None if spec == "cuda" else _index(spec)
    import torch

    if not torch.cuda.is_available():
        raise DeviceError(
            f"--device {spec}: CUDA is not available (torch {torch.__version__},"
            f" built with CUDA {torch.version.cuda or 'none'})",
            hint="use --device cpu, or install a CUDA build of torch on a machine with a GPU",
        )
    if index is None:
        info = rank_info()  # under torchrun, "cuda" is this rank's own GPU
        index = info.local_rank if info is not None else torch.cuda.current_device()
    count = torch.cuda.device_count()
    if index >= count:
        raise DeviceError(f"--device {spec}: only {count} CUDA device(s) present")
    return f"cuda:{index}"


def _index(spec: str) -> int:
    text = spec.split(":", 1)[1]
    if not text.isdigit():
        raise UsageError(f"--device {spec!r}: N in cuda:N must be a non-negative integer")
    return int(text)


def device_of(model: Any) -> str:
    """Where a model lives: its first parameter's device, else its first buffer's, else cpu."""
    for p in model.parameters():
        return str(p.device)
    for b in model.buffers():
        return str(b.device)
    return "cpu"


def prepare_model(model: Any, device: str, dtype: str | None) -> Any:
    """Move the model to ``device`` and cast it to ``dtype`` (float dtypes only)."""
    import torch

    model = model.to(device)
    if dtype is not None:
        model = model.to(getattr(torch, dtype))
    return model


def placed(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], device: Any, dtype: Any
) -> tuple[Any, tuple[Any, ...], dict[str, Any], str | None, str | None]:
    """``model`` and its inputs on ``device`` in ``dtype`` for the Python API.

    The caller's model is left as it is: when it must move or change dtype, a copy
    is profiled (casting in place could not be undone exactly: float32 -> float16
    -> float32 loses bits). Floating inputs are cast, every tensor input moved.
    Returns the model, args, kwargs, the canonical device and the dtype name.
    """

    dev = resolve_device(str(device)) if device is not None else None
    name = str(dtype).removeprefix("torch.") if dtype is not None else None
    torch_dtype = torch_float_dtype(name)  # UsageError for int/bool or unknown names
    params = [*model.parameters(), *model.buffers()]
    moves = dev is not None and any(str(p.device) != dev for p in params)
    casts = torch_dtype is not None and any(
        p.is_floating_point() and p.dtype != torch_dtype for p in params
    )
    if moves or casts:
        model = prepare_model(_copy(model), dev or device_of(model), name)
    args = move_inputs(args, dev, float_dtype=torch_dtype)
    kwargs = move_inputs(kwargs, dev, float_dtype=torch_dtype)
    return model, args, kwargs, dev, name


def _copy(model: Any) -> Any:
    import copy

    try:
        return copy.deepcopy(model)
    except Exception as exc:
        raise UsageError(
            f"cannot copy {type(model).__name__} to move or cast it: {type(exc).__name__}: {exc}",
            hint="move/cast the model yourself (model.to(device, dtype)) and leave device/dtype unset",
        ) from exc
