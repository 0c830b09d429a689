"""Calling the model: timed (synchronized on both sides), guarded (an error names the
layer it came from), and in the run's grad mode. Shared by the runner and every mode."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from layerprof.capture.failures import locate_failure, model_error
from layerprof.errors import ModelRunError

if TYPE_CHECKING:
    import torch

    from layerprof.capture.options import RunOptions
    from layerprof.capture.recording.recorder import Recorder


def timed(
    forward: Callable[[], Any],
    sync: Callable[[], None],
    model: torch.nn.Module,
    rec: Recorder | None = None,
) -> int:
    """Wall time of one forward in ns, the device synchronized before and after."""
    sync()
    t0 = time.perf_counter_ns()
    guarded(forward, model, rec)
    sync()
    return time.perf_counter_ns() - t0


def guarded(forward: Callable[[], Any], model: torch.nn.Module, rec: Recorder | None = None) -> Any:
    """Call the model; on error, name the innermost layer it failed in."""
    try:
        return forward()
    except (KeyboardInterrupt, ModelRunError):
        raise
    except Exception as exc:
        path = rec.active_path() if rec is not None else locate_failure(model, forward)
        raise model_error(model, path, exc) from exc


def grad_ctx(opts: RunOptions) -> contextlib.AbstractContextManager[Any]:
    """The grad mode the run's forwards run in."""
    import torch

    if opts.grad:
        return torch.enable_grad()
    if opts.inference_mode:
        return torch.inference_mode()
    return torch.no_grad()
