"""Errors a model raises while layerprof runs it -> one line naming the layer.

Shared by every pass that runs the model (the runner's passes, ops mode,
backward, TorchScript), so none of them imports another to report a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from layerprof.capture.recording.recorder import Recorder
from layerprof.errors import ModelRunError

if TYPE_CHECKING:
    import torch


def model_error(model: torch.nn.Module, path: str | None, exc: BaseException) -> ModelRunError:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if path is None:
        return ModelRunError(f"{type(model).__name__}: {message}", layer=None)
    module = model.get_submodule(path) if path else model
    where = path or type(model).__name__
    return ModelRunError(
        f"{where} ({type(module).__name__}): {message}",
        layer=path,
        hint=_ids_hint(module, message) or _input_hint(message),
    )


def _ids_hint(module: torch.nn.Module, message: str) -> str | None:
    """Token ids past an embedding's rows (``--input 1x8:int64[0,1000)`` into a
    100-token vocabulary): torch says only 'index out of range in self'."""
    rows = getattr(module, "num_embeddings", None)
    if not isinstance(rows, int) or "index out of range" not in message.lower():
        return None
    return (
        f"the ids given to this embedding must be below its {rows} rows (num_embeddings):"
        f" e.g. --input 1x8:int64[0,{rows})"
    )


_INPUT_WORDS = ("shape", "size", "dimension", "dtype", "expected", "must match", "mat1")


def _input_hint(message: str) -> str | None:
    """The input hint only for errors that look like a wrong input, not for any bug."""
    low = message.lower()
    if any(word in low for word in _INPUT_WORDS):
        return "check the --input shapes and dtypes against what this layer expects"
    return None


def locate_failure(model: torch.nn.Module, forward: Callable[[], Any]) -> str | None:
    """Re-run a failing forward with hooks to find the innermost layer that raised."""
    rec = Recorder(model, record_shapes=False)
    try:
        with rec:
            forward()
    except Exception:
        return rec.active_path()
    return None
