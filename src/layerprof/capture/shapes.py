"""Shapes of (nested) forward inputs and outputs, as plain JSON-able values."""

from __future__ import annotations

from typing import Any

from layerprof.units import format_shapes

_MAX_ITEMS = 16


def shape_tree(value: Any, depth: int = 0) -> Any:
    """Tensor -> list of ints; tuple/list -> list; dict -> dict; other -> its type name.

    Long containers are cut at ``_MAX_ITEMS`` with a trailing ``"..."`` marker so a
    model returning thousands of tensors does not bloat the profile.
    """
    if getattr(value, "is_nested", False) is True:
        return _nested_shape(value)  # its .shape raises (a TransformerEncoder's padded path)
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return [int(d) for d in shape]
    if depth > 4:
        return "..."
    if isinstance(value, (list, tuple)):
        items = [shape_tree(v, depth + 1) for v in value[:_MAX_ITEMS]]
        return [*items, "..."] if len(value) > _MAX_ITEMS else items
    if isinstance(value, dict):
        keys = list(value)[:_MAX_ITEMS]
        return {str(k): shape_tree(value[k], depth + 1) for k in keys}
    if value is None:
        return None
    return type(value).__name__


def _nested_shape(value: Any) -> str:
    """``nested(2x?x32)``: a nested tensor's regular dims, ``?`` for the ragged ones."""
    dims = []
    for i in range(value.dim()):
        try:
            dims.append(str(int(value.size(i))))
        except RuntimeError:
            dims.append("?")
    return f"nested({'x'.join(dims)})"


def tensor_bytes(value: Any, depth: int = 0) -> int:
    """Bytes held by the tensors in a (nested) value; each tensor counted once."""
    seen: set[int] = set()

    def walk(v: Any, d: int) -> int:
        if hasattr(v, "element_size") and hasattr(v, "numel"):
            if id(v) in seen:
                return 0
            seen.add(id(v))
            return int(v.numel()) * int(v.element_size())
        if d > 4:
            return 0
        if isinstance(v, (list, tuple)):
            return sum(walk(x, d + 1) for x in v)
        if isinstance(v, dict):
            return sum(walk(x, d + 1) for x in v.values())
        return 0

    return walk(value, depth)


def inputs_tree(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Shapes of a call's arguments: one entry per positional argument, then a dict of
    the keyword arguments (when there are any)."""
    ins = shape_tree(args)
    if kwargs:
        ins = [*ins, {k: shape_tree(v) for k, v in kwargs.items()}]
    return ins


def describe_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, ...]:
    """One text per argument (``8x3x32x32``, ``mask=4x128``), as ``--input`` specs read."""

    out = [format_shapes(shape_tree(a)) for a in args]
    out += [f"{k}={format_shapes(shape_tree(v))}" for k, v in kwargs.items()]
    return tuple(out)
