"""Device and dtype for a run: checked up front with a clear error."""

from __future__ import annotations

from typing import Any

from layerprof.errors import DeviceError, UsageError


def resolve_device(spec: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N`` -> a canonical device string, or DeviceError."""
    import torch

    if spec == "cpu":
        return "cpu"
    if spec == "cuda" or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise DeviceError(
                f"--device {spec}: CUDA is not available (torch {torch.__version__},"
                f" built with CUDA {torch.version.cuda or 'none'})",
                hint="use --device cpu, or install a CUDA build of torch on a machine with a GPU",
            )
        index = torch.cuda.current_device() if spec == "cuda" else _index(spec)
        count = torch.cuda.device_count()
        if index >= count:
            raise DeviceError(f"--device {spec}: only {count} CUDA device(s) present")
        return f"cuda:{index}"
    raise UsageError(f"--device {spec!r}: expected cpu, cuda or cuda:N")


def _index(spec: str) -> int:
    try:
        return int(spec.split(":", 1)[1])
    except ValueError as exc:
        raise UsageError(f"--device {spec!r}: N in cuda:N must be an integer") from exc


def prepare_model(model: Any, device: str, dtype: str | None) -> Any:
    """Move the model to ``device`` and cast it to ``dtype`` (float dtypes only)."""
    import torch

    model = model.to(device)
    if dtype is not None:
        model = model.to(getattr(torch, dtype))
    return model
