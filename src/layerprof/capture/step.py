"""One training step without an optimizer: forward, loss, backward (``--backward``).

Shared by hooks-mode backward timing and ops mode, so that neither imports the other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from layerprof.errors import UsageError

if TYPE_CHECKING:
    import torch

LossFn = Callable[[Any], Any]


def default_loss(output: Any) -> Any:
    """Sum of every floating tensor in the (nested) output."""
    tensors = list(_floating(output))
    if not tensors:
        raise UsageError(
            "the model returned no floating-point tensor to back-propagate",
            hint="give --loss module:callable that maps the output to a scalar",
        )
    total = tensors[0].float().sum()
    for t in tensors[1:]:
        total = total + t.float().sum()
    return total


def _floating(value: Any) -> Iterator[Any]:
    if hasattr(value, "is_floating_point") and hasattr(value, "requires_grad"):
        if value.is_floating_point() and value.requires_grad:
            yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _floating(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _floating(v)


def backward_step(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    loss: LossFn | None,
    sync: Callable[[], None],
    *,
    before_backward: Callable[[Any], Any] | None = None,
) -> Callable[[], None]:
    """forward + loss + backward; gradients set to None first (no optimizer, no step).

    ``before_backward(loss)`` runs between the loss and ``backward()``.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    loss_fn = loss or default_loss

    def step() -> None:
        for p in params:
            p.grad = None
        value = loss_fn(model(*args, **kwargs))
        if getattr(value, "ndim", 0) != 0:
            value = value.sum()
        if before_backward is not None:
            before_backward(value)
        value.backward()
        sync()

    return step


@contextlib.contextmanager
def backward_state(model: torch.nn.Module) -> Iterator[None]:
    """Grad mode on; the users' ``.grad`` tensors restored after (also on errors)."""
    import torch

    grads = {p: p.grad for p in model.parameters()}
    try:
        # inference_mode(False): enable_grad alone does nothing inside inference_mode.
        with torch.inference_mode(False), torch.enable_grad():
            yield
    finally:
        for p, g in grads.items():
            p.grad = g
