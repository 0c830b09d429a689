"""FLOPs per layer, counted by torch's own ``torch.utils.flop_counter``.

``FlopCounterMode`` counts the floating-point operations of matmul, conv,
attention and a few other ops (not elementwise ops) and attributes them to
the modules that are active, inclusively. Its keys are the model's class name
followed by the qualified path (``TinyTransformer.layers.0.attn``); we map
them back to ``named_modules()`` paths (``layers.0.attn``, ``""`` = root).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any


def count_flops(model: Any, forward: Callable[[], Any]) -> dict[str, int]:
    """Inclusive FLOPs of one forward per layer path; empty when counting fails."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    # The counter tracks modules with global hooks; torch.compile-d submodules
    # warn about those. Expected here, and the counting pass is not timed.
    with counter, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*global hooks on modules")
        forward()
    root = type(model).__name__
    out: dict[str, int] = {}
    for key, by_op in counter.get_flop_counts().items():
        if key == "Global":
            continue
        if key == root:
            path = ""
        elif key.startswith(root + "."):
            path = key[len(root) + 1 :]
        else:
            continue
        out[path] = int(sum(by_op.values()))
    _fill_containers(model, out)
    return out


def _fill_containers(model: Any, flops: dict[str, int]) -> None:
    """A container that never runs (ModuleList, ModuleDict) holds its children's FLOPs,
    as its total time holds their times."""
    paths = [p for p, _ in model.named_modules()]
    kids: dict[str, list[str]] = {}
    for path in paths[1:]:
        kids.setdefault(path.rsplit(".", 1)[0] if "." in path else "", []).append(path)
    for path in reversed(paths):  # children before parents
        children = kids.get(path, [])
        if path and path not in flops and any(k in flops for k in children):
            flops[path] = sum(flops.get(k, 0) for k in children)
