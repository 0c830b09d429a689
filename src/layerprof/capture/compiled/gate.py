"""The torch internals ``--compile`` stands on, checked before anything compiles.

The per-layer view of a compiled model reads inductor and Dynamo internals
that are not public API (docs/compile.md lists why each is needed). A torch
older than the one this was verified on, or one that moved any of them,
gets one line naming what is missing instead of a wrong table.
tests/capture/compiled/test_compiled_gate.py pins each of them, so a torch upgrade that
changes one fails loudly there first.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from layerprof.errors import UsageError

#: The oldest torch the compiled view was verified on.
_MIN_TORCH = (2, 13)


def _torch_version() -> tuple[int, int]:
    import torch

    parts = torch.__version__.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def _has_config(module: object, dotted: str) -> bool:
    obj: object = module
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def _compile_fx_takes_inner() -> bool:
    from torch._inductor.compile_fx import compile_fx

    params = inspect.signature(compile_fx).parameters
    return "inner_compile" in params and "config_patches" in params


def _output_code_fields() -> bool:
    from torch._inductor.output_code import CompiledFxGraph

    fields = getattr(CompiledFxGraph, "__dataclass_fields__", {})
    return "_fx_graph_cache_key" in fields and "inductor_provenance_mapping_str" in fields


def _inductor_config() -> bool:
    import torch._inductor.config as config

    return all(
        _has_config(config, name)
        for name in ("trace.provenance_tracking_level", "cpp.enable_kernel_profile",
                     "force_disable_caches")
    )  # fmt: skip


def _functorch_config() -> bool:
    import torch._functorch.config as config

    return hasattr(config, "enable_autograd_cache")


def _provenance_globals() -> bool:
    import torch._inductor.debug as debug

    return isinstance(getattr(debug, "_inductor_triton_kernel_to_post_grad_node_info", None), dict)


def _dynamo_hooks() -> bool:
    import torch._dynamo.eval_frame as eval_frame
    import torch._dynamo.utils as utils
    from torch._guards import CompileContext

    return (
        callable(getattr(eval_frame, "skip_code", None))
        and callable(getattr(CompileContext, "current_compile_id", None))
        and callable(getattr(utils, "get_compilation_metrics", None))
        and hasattr(utils, "counters")
    )


def _mode_options() -> bool:
    import torch._inductor as inductor

    return callable(getattr(inductor, "list_mode_options", None))


#: What is needed, in words, and how to check that it is there.
REQUIREMENTS: tuple[tuple[str, Callable[[], bool]], ...] = (
    ("torch._inductor.compile_fx.compile_fx(inner_compile=, config_patches=)", _compile_fx_takes_inner),
    ("CompiledFxGraph._fx_graph_cache_key / .inductor_provenance_mapping_str", _output_code_fields),
    ("inductor config trace.provenance_tracking_level, cpp.enable_kernel_profile, force_disable_caches", _inductor_config),
    ("torch._functorch.config.enable_autograd_cache", _functorch_config),
    ("torch._inductor.debug._inductor_triton_kernel_to_post_grad_node_info", _provenance_globals),
    ("Dynamo's skip_code, CompileContext.current_compile_id, get_compilation_metrics, counters", _dynamo_hooks),
    ("torch._inductor.list_mode_options", _mode_options),
)  # fmt: skip


def missing_internals() -> list[str]:
    """The internals this torch lacks (empty: all there)."""
    missing = []
    for what, present in REQUIREMENTS:
        try:
            ok = present()
        except Exception:  # an import that moved is as missing as an attribute
            ok = False
        if not ok:
            missing.append(what)
    return missing


def check_compile_support() -> None:
    """Raise a one-line UsageError unless this torch can give the compiled per-layer view."""
    import torch

    wanted = ".".join(map(str, _MIN_TORCH))
    if _torch_version() < _MIN_TORCH:
        raise UsageError(
            f"--compile needs torch >= {wanted} (found {torch.__version__}): it reads inductor"
            " internals that older versions lack",
            hint=f"pip install 'torch>={wanted}', or profile without --compile",
        )
    missing = missing_internals()
    if missing:
        raise UsageError(
            f"--compile: torch {torch.__version__} lacks {missing[0]}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
            hint=f"layerprof's compiled view is verified on torch {wanted}; profile without"
            " --compile, or report the torch version",
        )
