"""Activation memory per layer: the bytes each layer's forward saves for backward.

``ActivationCapture`` is a context manager over a model. While it is open, a
``torch.autograd.graph.saved_tensors_hooks`` pack hook sees every tensor autograd
saves for backward, and forward pre/post hooks on every layer keep the stack of
layers whose forward is running. A saved tensor is counted

* once per storage (``untyped_storage().data_ptr()`` and device): a view, or a
  tensor saved by two ops, adds nothing the second time, and the storage's whole
  size is what it keeps alive;
* not at all when its storage is a parameter's or a buffer's (weights are not
  activations; a Linear saves a view of its weight);
* for the innermost layer whose forward is running when it is saved (a tensor a
  child saved is the child's); a storage a child saved and its parent saves again
  stays the child's. Ops outside every layer (the loss) go to ``outside_bytes``.

The stack comes from forward pre/post hooks, not backward hooks: in-place ops on a
layer's output (``out += identity``) are fine. Each forward (the root layer entered)
starts a fresh count; a step keeps the forward that saved the most (gradient
accumulation runs several). ``step()`` also reads each layer's own parameter,
gradient (``.grad``, after backward) and optimizer-state bytes (the optimizer's
``state`` tensors of the layer's parameters), and on CUDA the allocator's peak per
phase (``phase(name)`` marks where one begins), then starts the next step.

The entry points: ``measure_step`` (one forward, loss, backward and optional optimizer
step, what ``run --backward`` calls), and ``ActivationCapture`` itself for a user's own
loop: open it around the loop, call ``phase("forward" | "backward" | "optimizer")``
at the phase boundaries and ``step(optimizer)`` once per step.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from layerprof.capture.compilewatch import dynamo_compiling
from layerprof.capture.modules import HookHandles, hookable_modules, is_opaque, visible_modules
from layerprof.capture.step import backward_state, default_loss
from layerprof.pivot.profile import ancestors
from layerprof.pivot.sections.memory import ActivationMemory, MemoryRow, PhasePeak

if TYPE_CHECKING:
    import torch

    from layerprof.capture.memory.allocator import MemoryCounter

_StorageKey = tuple[int, str]


class ActivationCapture:
    """Counts saved-for-backward bytes per layer while open (see the module's docstring)."""

    def __init__(self, model: torch.nn.Module, *, counter: MemoryCounter | None = None) -> None:
        self.model = model
        self.counter = counter
        layers = visible_modules(model)
        self._paths = [p for p, _ in layers]
        self._parents = _parents(self._paths)
        self._owners = _param_owners(layers)
        self._root = self._paths[0] if self._paths else ""
        self._hooks = HookHandles()
        self._saved: Any = None
        self._stack: list[str] = []
        self._params: set[_StorageKey] = set()
        self._seen: dict[_StorageKey, weakref.ref[Any]] = {}
        self._forward: dict[str | None, int] = {}
        self._largest: dict[str | None, int] = {}
        self._inputs: dict[str, int] = {}  # input bytes per layer, this forward
        self._largest_inputs: dict[str, int] = {}
        self._forwards = 0
        self._phase: tuple[str, int] | None = None
        self._peaks: list[PhasePeak] = []
        self._grads: dict[str, int] | None = None  # noted before an optimizer step
        # While Dynamo traces a compiled caller the hooks do nothing: tracing the
        # storage lookups would break its graph (as the Recorder's wrappers step aside);
        # a compiled forward's activations live in its graph and are not counted.
        self._compiling = dynamo_compiling()

    # ---- open / close ------------------------------------------------------------------
    def __enter__(self) -> ActivationCapture:
        import torch

        with self._hooks.registering() as hooks:
            for path, module in hookable_modules(self.model):
                pre = module.register_forward_pre_hook(self._pre(path), with_kwargs=True)
                hooks.add(pre)
                hooks.add(module.register_forward_hook(self._post(path), always_call=True))
            self._params = _storage_keys(self.model)
            self._saved = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
            self._saved.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._saved is not None:
                self._saved.__exit__(None, None, None)
                self._saved = None
        finally:
            self._hooks.remove()
            self._stack.clear()

    # ---- the per-step interface --------------------------------------------------------
    def phase(self, name: str) -> None:
        """Mark the start of phase ``name`` (the previous one ends): its allocator peak
        is kept (CUDA). Without an allocator counter this does nothing."""
        if self.counter is None:
            return
        self._close_phase()
        self._phase = (name, self.counter.allocated())
        self.counter.reset_peak()

    def note_grads(self) -> None:
        """Read the gradients' bytes now (an optimizer is about to step): a loop that calls
        ``zero_grad()`` before the step ends would otherwise show none."""
        if any(p.grad is not None for _, p in self._owners):
            self._grads = _grad_bytes(self._owners)

    def step(self, optimizer: Any = None) -> ActivationMemory:
        """This step's numbers (``optimizer`` state read now: one optimizer, or a list of
        every optimizer that stepped, as a GAN's generator and discriminator; gradients as
        last noted by ``note_grads``, else now); the next step starts from zero."""
        self._close_phase()
        self._end_forward()
        noted, self._grads = self._grads, None
        grads = noted if noted is not None else _grad_bytes(self._owners)
        states = _optimizer_bytes(self._owners, optimizer)
        has_grads = noted is not None or any(p.grad is not None for _, p in self._owners)
        rows = tuple(
            MemoryRow(
                path=path,
                parent=self._parents[path],
                activations_self=self._largest.get(path, 0),
                params_self=_param_bytes(self._owners, path),
                grads_self=grads.get(path, 0) if has_grads else None,
                optimizer_self=states.get(path, 0) if optimizer is not None else None,
                input_bytes=self._largest_inputs.get(path),
            )
            for path in self._paths
        )
        out = ActivationMemory(
            rows=rows,
            outside_bytes=self._largest.get(None, 0),
            forwards=self._forwards,
            peaks=tuple(self._peaks),
        )
        self._largest, self._largest_inputs = {}, {}
        self._forwards, self._peaks, self._phase = 0, [], None
        return out

    # ---- hooks -------------------------------------------------------------------------
    def _pre(self, path: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, kwargs: Any) -> None:
            if self._compiling():
                return
            if path == self._root and not self._stack:
                self._end_forward()
                self._forwards += 1
                self._params = _storage_keys(self.model)  # .to() may have moved them
            self._stack.append(path)
            if not _in_backward():  # a recompute's inputs are not held either
                self._inputs[path] = self._inputs.get(path, 0) + _input_bytes(args, kwargs)

        return hook

    def _post(self, path: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            if self._compiling():
                return
            while self._stack and self._stack[-1] != path:
                self._stack.pop()  # a child that raised inside a caught error
            if self._stack:
                self._stack.pop()

        return hook

    def _pack(self, tensor: Any) -> Any:
        # Returned detached: the graph keeps the same storage (and version counter) but no
        # reference back to the tensor's grad_fn, so a saved output makes no cycle that
        # would free its memory only at the next garbage collection.
        saved = tensor.detach()
        if self._compiling() or _in_backward():
            # activation checkpointing's recompute: its tensors live only while the
            # backward that needs them runs; they were not held from forward to backward
            return saved
        key, nbytes = _storage_of(tensor)
        if key in self._params:
            return saved
        ref = self._seen.get(key)
        if ref is not None and ref() is not None:
            return saved  # this storage was counted (and is still alive)
        self._seen[key] = weakref.ref(saved)
        owner = self._stack[-1] if self._stack else None
        self._forward[owner] = self._forward.get(owner, 0) + nbytes
        return saved

    # ---- bookkeeping -------------------------------------------------------------------
    def _end_forward(self) -> None:
        """Keep the finished forward's counts if it saved the most so far."""
        if sum(self._forward.values()) > sum(self._largest.values()) or (
            not self._largest_inputs and self._inputs
        ):
            self._largest, self._largest_inputs = self._forward, self._inputs
        if self._forward and not self._forwards:
            self._forwards = 1  # counted without the root entered (a child called alone)
        self._forward, self._inputs, self._seen = {}, {}, {}

    def _close_phase(self) -> None:
        if self.counter is None or self._phase is None:
            return
        name, start = self._phase
        self._peaks.append(PhasePeak(name, start, max(self.counter.peak(), start)))
        self._phase = None


def _in_backward() -> bool:
    """Whether an autograd backward pass is running in this thread (a checkpointed
    module recomputing its forward). torch's graph-task id is -1 outside one; a torch
    without it is taken as never in backward (counted as before)."""
    import torch

    current = getattr(torch._C, "_current_graph_task_id", None)
    return current is not None and current() != -1


def _unpack(saved: Any) -> Any:
    return saved


def _input_bytes(args: Any, kwargs: Any) -> int:
    """Bytes of the distinct tensors among a call's arguments (one level of lists)."""
    seen: set[int] = set()
    total = 0
    for value in (*args, *kwargs.values()):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if hasattr(item, "untyped_storage") and id(item) not in seen:
                seen.add(id(item))
                total += _nbytes(item)
    return total


def _storage_of(tensor: Any) -> tuple[_StorageKey, int]:
    """The storage identity and size of ``tensor``; a tensor without a plain storage
    (sparse, nested, some subclasses) counts its own elements under its own identity."""
    try:
        storage = tensor.untyped_storage()
        return (storage.data_ptr(), str(tensor.device)), int(storage.nbytes())
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        return (id(tensor), "tensor"), int(tensor.numel() * tensor.element_size())


def _storage_keys(model: Any) -> set[_StorageKey]:
    """The storages of the model's parameters and buffers (never activations)."""
    keys: set[_StorageKey] = set()
    for tensor in (*model.parameters(), *model.buffers()):
        keys.add(_storage_of(tensor)[0])
    return keys


def _parents(paths: list[str]) -> dict[str, str | None]:
    """Each layer's nearest ancestor among ``paths`` (the root has none)."""

    known = set(paths)
    out: dict[str, str | None] = {}
    for path in paths:
        out[path] = next((a for a in ancestors(path) if a in known and a != path), None)
    if paths:
        out[paths[0]] = None
    return out


def _param_owners(layers: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """(owning layer, parameter) for every parameter once: the first layer (in module
    order) that registers it; a scripted or compiled leaf owns all of its own."""
    seen: set[int] = set()
    out: list[tuple[str, Any]] = []
    for path, module in layers:
        # visible_modules leaves out the insides of opaque layers: they own their subtree
        recurse = is_opaque(module)
        for param in module.parameters(recurse=recurse):
            if id(param) not in seen:
                seen.add(id(param))
                out.append((path, param))
    return out


def _nbytes(tensor: Any) -> int:
    return int(tensor.numel() * tensor.element_size())


def _param_bytes(owners: list[tuple[str, Any]], path: str) -> int:
    return sum(_nbytes(p) for owner, p in owners if owner == path)


def _grad_bytes(owners: list[tuple[str, Any]]) -> dict[str, int]:
    """Bytes of each layer's parameters' ``.grad`` (tensor sizes: a gradient may be a view
    into a shared bucket, whose whole storage is no one layer's)."""
    out: dict[str, int] = {}
    for path, param in owners:
        if param.grad is not None:
            out[path] = out.get(path, 0) + _nbytes(param.grad)
    return out


def _optimizer_bytes(owners: list[tuple[str, Any]], optimizer: Any) -> dict[str, int]:
    """Bytes of the optimizers' state tensors (moments, step counters) per owning layer;
    ``optimizer`` is one optimizer or a list of them (each parameter's state is read from
    every one that holds it)."""
    out: dict[str, int] = {}
    if optimizer is None:
        return out
    optimizers = optimizer if isinstance(optimizer, list | tuple) else [optimizer]
    counted: set[int] = set()
    for opt in optimizers:
        state = getattr(opt, "state", {})
        for path, param in owners:
            for value in dict(state.get(param, {})).values():
                if hasattr(value, "untyped_storage") and id(value) not in counted:
                    counted.add(id(value))
                    out[path] = out.get(path, 0) + _nbytes(value)
    return out


def measure_step(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    loss: Callable[[Any], Any] | None = None,
    *,
    counter: MemoryCounter | None = None,
    optimizer: Any = None,
) -> ActivationMemory:
    """One counted training step: forward and loss, backward, then ``optimizer.step()``
    when one is given. The users' ``.grad`` tensors are restored after; the optimizer's
    step does change the weights, so ``run`` passes none."""

    params = [p for p in model.parameters() if p.requires_grad]
    loss_fn = loss or default_loss
    with backward_state(model), ActivationCapture(model, counter=counter) as capture:
        for p in params:
            p.grad = None
        capture.phase("forward")
        value = loss_fn(model(*args, **kwargs))
        if getattr(value, "ndim", 0) != 0:
            value = value.sum()
        capture.phase("backward")
        value.backward()
        if optimizer is not None:
            capture.phase("optimizer")
            optimizer.step()
        return capture.step(optimizer)
