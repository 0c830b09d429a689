"""Peak device memory per layer, from the CUDA caching allocator's counters.

One extra forward with hooks on every layer. The allocator keeps one global
peak counter, so each layer call resets it on entry and reads it on exit;
a parent's peak is the larger of what the counter saw since its last child
returned and the peaks its children reported. ``peak_bytes`` of a layer is
how far allocated memory rose above its level at the layer's entry (its
activations and workspace), the maximum over its calls. Host-side counters:
no synchronize is needed, none is done.

The counter sits behind a tiny interface so tests drive it with a fake.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from layerprof.capture.modules import HookHandles, hookable_modules


class MemoryCounter(Protocol):
    def allocated(self) -> int: ...
    def peak(self) -> int: ...
    def reset_peak(self) -> None: ...


class CudaMemory:
    """``torch.cuda`` allocator counters of one device."""

    def __init__(self, device: str) -> None:
        import torch

        self._cuda = torch.cuda
        self._device = torch.device(device)

    def allocated(self) -> int:
        return int(self._cuda.memory_allocated(self._device))

    def peak(self) -> int:
        return int(self._cuda.max_memory_allocated(self._device))

    def reset_peak(self) -> None:
        self._cuda.reset_peak_memory_stats(self._device)


@dataclass
class _Frame:
    path: str
    at_entry: int
    child_peak: int = 0


@dataclass
class _MemoryCapture:
    """Hooks that record each layer's peak memory above its entry level."""

    model: Any
    counter: MemoryCounter
    peak_bytes: dict[str, int] = field(default_factory=dict)
    _stack: list[_Frame] = field(default_factory=list)
    _hooks: HookHandles = field(default_factory=HookHandles)

    def __enter__(self) -> _MemoryCapture:
        with self._hooks.registering() as hooks:
            for path, module in hookable_modules(self.model):
                hooks.add(module.register_forward_pre_hook(self._pre(path)))
                hooks.add(module.register_forward_hook(self._post(path), always_call=True))
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.remove()
        self._stack.clear()

    def _pre(self, path: str) -> Callable[..., None]:
        def hook(module: Any, args: Any) -> None:
            if self._stack:  # what the parent saw up to here
                parent = self._stack[-1]
                parent.child_peak = max(parent.child_peak, self.counter.peak())
            self._stack.append(_Frame(path, self.counter.allocated()))
            self.counter.reset_peak()

        return hook

    def _post(self, path: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            while self._stack and self._stack[-1].path != path:
                self._stack.pop()  # a child that raised inside a caught error
            if not self._stack:
                return
            frame = self._stack.pop()
            peak = max(self.counter.peak(), frame.child_peak)
            rise = max(peak - frame.at_entry, 0)
            self.peak_bytes[path] = max(self.peak_bytes.get(path, 0), rise)
            if self._stack:
                parent = self._stack[-1]
                parent.child_peak = max(parent.child_peak, peak)

        return hook


def peak_memory(model: Any, forward: Callable[[], Any], counter: MemoryCounter) -> dict[str, int]:
    """Peak bytes above entry level per layer path, from one forward."""
    with _MemoryCapture(model, counter) as capture:
        forward()
    return capture.peak_bytes
