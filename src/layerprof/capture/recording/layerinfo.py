"""What a model's layers are (``LayerInfo`` rows: path, type, parent, parameters, shapes,
FLOPs, bytes) and the Meta of a Recorder's run: read off the module tree, for every mode."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from layerprof.capture.modules import visible_modules
from layerprof.capture.platform.device import device_of
from layerprof.pivot.profile import now_iso
from layerprof.pivot.records import LayerInfo, Meta

if TYPE_CHECKING:
    import torch


def layer_infos(
    model: torch.nn.Module,
    shapes: dict[str, tuple[Any, Any]] | None = None,
    *,
    flops: dict[str, int] | None = None,
    output_bytes: dict[str, int] | None = None,
    peak_bytes: dict[str, int] | None = None,
) -> tuple[LayerInfo, ...]:
    """Static description of every visible module: path, type, parent, parameters,
    shapes, and FLOPs / activation / peak bytes where they were measured."""
    infos: list[LayerInfo] = []
    shapes = shapes or {}
    output_bytes = output_bytes or {}
    for path, module in visible_modules(model):
        parent = None if path == "" else (path.rsplit(".", 1)[0] if "." in path else "")
        ins, outs = shapes.get(path, (None, None))
        infos.append(
            LayerInfo(
                path=path,
                type=type(module).__name__,
                parent=parent,
                # parameters() de-duplicates, so a tied weight counts once per subtree.
                params=sum(p.numel() for p in module.parameters()),
                params_own=sum(p.numel() for p in module.parameters(recurse=False)),
                input_shapes=ins,
                output_shapes=outs,
                # layers the counter never saw did no counted FLOPs: 0, not unknown
                flops=flops.get(path, 0) if flops is not None else None,
                output_bytes=output_bytes.get(path),
                peak_bytes=peak_bytes.get(path, 0) if peak_bytes is not None else None,
            )
        )
    return tuple(infos)


def default_meta(model: torch.nn.Module, iterations: int, inputs: tuple[str, ...] = ()) -> Meta:
    """What a Recorder's (or ops mode's) profile says of its run: the model's dtype as it
    ran (its first floating parameter's; a bfloat16 model was saved as float32) and
    torch's thread count (it was left unknown)."""
    import torch

    return Meta(
        model=type(model).__name__,
        device=device_of(model),
        dtype=_float_dtype(model),
        torch=torch.__version__,
        inputs=inputs,
        iters=iterations,
        threads=torch.get_num_threads(),
        mode="train" if model.training else "eval",
        source="recorder",
        created=now_iso(),
    )


def _float_dtype(model: torch.nn.Module) -> str:
    for p in model.parameters():
        if p.is_floating_point():
            return str(p.dtype).removeprefix("torch.")
    return "float32"
