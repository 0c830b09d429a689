"""The module tree of a model, checked to be a tree before anything walks it.

Assigning a module as an attribute registers it as a child, so
``self.child.parent = self`` makes a module its own descendant. ``named_modules()``
copes (it remembers what it saw), but ``train()``, ``eval()``, ``to()``,
``state_dict()`` and ``repr()`` recurse through children without memory and
end in ``RecursionError``. Such a model cannot be profiled; this says where the
loop is. A module shared by two parents (tied layers) is not a loop.
"""

from __future__ import annotations

from typing import Any

from layerprof.errors import ModelLoadError

__all__ = ["check_acyclic", "find_cycle"]


def find_cycle(model: Any) -> tuple[str, str] | None:
    """``(path, ancestor)`` of the first child found that is also its own ancestor
    (``ancestor`` is the path it already has higher up, ``""`` for the root)."""
    on_path: dict[int, str] = {id(model): ""}
    done: set[int] = set()
    # Iterative depth-first walk: a deep (or looping) tree must not hit the recursion limit.
    stack: list[tuple[Any, str, Any]] = [(model, "", iter(_children(model)))]
    while stack:
        module, path, children = stack[-1]
        step = next(children, None)
        if step is None:
            stack.pop()
            on_path.pop(id(module), None)
            done.add(id(module))
            continue
        name, child = step
        child_path = f"{path}.{name}" if path else name
        if id(child) in on_path:
            return child_path, on_path[id(child)]
        if id(child) in done:
            continue  # shared, already walked
        on_path[id(child)] = child_path
        stack.append((child, child_path, iter(_children(child))))
    return None


def check_acyclic(model: Any) -> None:
    """Raise :class:`ModelLoadError` naming the loop when the module tree has one."""
    found = find_cycle(model)
    if found is None:
        return
    path, ancestor = found
    where = f"its ancestor {ancestor}" if ancestor else f"the model itself ({type(model).__name__})"
    raise ModelLoadError(
        f"the module tree has a loop: {path} is {where}; train(), eval() and to() would"
        " recurse forever",
        hint="keep back-references out of the module tree (store them in a plain list,"
        " a weakref, or with object.__setattr__)",
    )


def _children(module: Any) -> list[tuple[str, Any]]:
    modules = getattr(module, "_modules", None) or {}
    return [(name, child) for name, child in modules.items() if child is not None]
