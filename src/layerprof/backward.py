"""Backward time per layer: full backward hooks (hooks mode) or autograd ops (ops mode).

Hooks mode (``profile_backward``): a module's backward starts when its
full-backward *pre* hook fires (the gradient w.r.t. its outputs is ready) and
ends when its full-backward hook fires (the gradient w.r.t. its inputs is
ready). The CPU autograd engine runs ready nodes highest sequence number
first, and a module's nodes were created in one contiguous run during its
forward, so a module's backward nodes run as one block and children's blocks
fall inside their parent's: the intervals nest like forward calls, and the
forward logic (``layertimes.build_samples``) applies. Where they do not:

* a module none of whose inputs needs a gradient (the first layer, an
  embedding over token ids, the root of a model fed token ids) gets its
  full-backward hook called right after the pre hook, before its
  weight-gradient work runs. Its end is then the latest of: the last gradient
  accumulation of parameters it alone owns in its subtree (post-accumulate
  hooks; shared parameters are left out, their accumulation waits for every
  user) and the end of its sub-layers' backward intervals that started after
  it.
* a child interval that ends after its parent's (interleaving of other
  branches) extends the parent: a parent's backward is not done before its
  children's. After that every child lies inside its parent, siblings are
  disjoint, and per iteration ``total == self + sum(children)`` and
  ``self >= 0`` hold exactly. This is the invariant the tests check.

Modules with ``inplace=True`` (``nn.ReLU(inplace=True)``) cannot modify the
views full backward hooks hand them; they run with ``inplace=False`` during
the backward profile (same result, one more buffer) and are restored after.

Ops mode attributes backward by autograd sequence numbers in the trace
engine instead (``layerprof.trace.attribution``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from layerprof.clocks import Clock, HostClock, synchronizer
from layerprof.device import device_of
from layerprof.errors import ModelRunError, UsageError
from layerprof.hooks import HookHandles, hookable_modules
from layerprof.layertimes import build_samples
from layerprof.records import LayerCall

if TYPE_CHECKING:
    import torch

LossFn = Callable[[Any], Any]
BackwardTimes = dict[str, tuple[Sequence[int], Sequence[int]]]


# ---- loss and one optimizer-free step ------------------------------------------------


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
) -> Callable[[], None]:
    """forward + loss + backward; gradients set to None first (no optimizer, no step)."""
    params = [p for p in model.parameters() if p.requires_grad]
    loss_fn = loss or default_loss

    def step() -> None:
        for p in params:
            p.grad = None
        value = loss_fn(model(*args, **kwargs))
        if getattr(value, "ndim", 0) != 0:
            value = value.sum()
        value.backward()
        sync()

    return step


@contextlib.contextmanager
def backward_state(model: torch.nn.Module, *, no_inplace: bool = False) -> Iterator[None]:
    """Grad mode on, users' ``.grad`` and (optionally) ``inplace`` flags restored after."""
    import torch

    grads = {p: p.grad for p in model.parameters()}
    flipped = (
        [m for m in model.modules() if getattr(m, "inplace", None) is True] if no_inplace else []
    )
    for m in flipped:
        setattr(m, "inplace", False)  # noqa: B010 - nn.Module's attribute typing rejects a bool
    try:
        # inference_mode(False): enable_grad alone does nothing inside inference_mode.
        with torch.inference_mode(False), torch.enable_grad():
            yield
    finally:
        for m in flipped:
            setattr(m, "inplace", True)  # noqa: B010
        for p, g in grads.items():
            p.grad = g


# ---- hooks mode --------------------------------------------------------------------


@dataclass
class _Open:
    path: str
    start: Any
    end: Any = None
    early: bool = False  # no input needed a gradient: the hook fired before the work


class BackwardMarks:
    """Full backward pre/post hooks on every module + accumulate hooks on owned params."""

    def __init__(self, model: torch.nn.Module, clock: Clock) -> None:
        self.model = model
        self.clock = clock
        self.done: list[_Open] = []
        self.accumulated: list[tuple[str, Any]] = []
        self._open: dict[str, list[_Open]] = {}
        self._hooks = HookHandles()

    def __enter__(self) -> BackwardMarks:
        with self._hooks.registering() as hooks:
            for path, module in hookable_modules(self.model):
                hooks.add(module.register_full_backward_pre_hook(self._pre(path)))
                hooks.add(module.register_full_backward_hook(self._post(path)))
            for path, param in owned_parameters(self.model):
                hooks.add(param.register_post_accumulate_grad_hook(self._acc(path)))
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.remove()

    def _pre(self, path: str) -> Callable[..., None]:
        def hook(module: Any, grad_output: Any) -> None:
            self._open.setdefault(path, []).append(_Open(path, self.clock.mark()))

        return hook

    def _post(self, path: str) -> Callable[..., None]:
        def hook(module: Any, grad_input: Any, grad_output: Any) -> None:
            t = self.clock.mark()
            stack = self._open.get(path)
            if stack:
                entry = stack.pop()
                entry.end = t
                entry.early = all(g is None for g in grad_input)
                self.done.append(entry)

        return hook

    def _acc(self, path: str) -> Callable[..., None]:
        def hook(param: Any) -> None:
            self.accumulated.append((path, self.clock.mark()))

        return hook

    def take(self) -> tuple[list[_Open], list[tuple[str, Any]]]:
        """This iteration's closed intervals and accumulations; resets for the next one."""
        done, acc = self.done, self.accumulated
        self.done, self.accumulated, self._open = [], [], {}
        return done, acc


def owned_parameters(model: torch.nn.Module) -> list[tuple[str, Any]]:
    """(module path, parameter) for parameters held by exactly one module."""
    owners: dict[int, list[str]] = {}
    params: dict[int, Any] = {}
    for path, module in model.named_modules(remove_duplicate=False):
        for p in module.parameters(recurse=False):
            if p.requires_grad:
                owners.setdefault(id(p), []).append(path)
                params[id(p)] = p
    return [(paths[0], params[k]) for k, paths in owners.items() if len(set(paths)) == 1]


def profile_backward(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    *,
    iters: int,
    loss: LossFn | None,
    clock: Clock | None = None,
) -> BackwardTimes:
    """Backward total and self time of every layer, per iteration (see module docstring).

    Returns ``path -> (backward_total_ns, backward_self_ns)``, one value per
    iteration; layers whose backward never ran (no gradient flows through
    them) are absent. One untimed step runs first (autograd warm-up).
    """
    clock = clock or HostClock()
    device = device_of(model)
    step = backward_step(model, args, kwargs or {}, loss, synchronizer(device))
    calls: list[LayerCall] = []
    with backward_state(model, no_inplace=True), warnings.catch_warnings():
        # "full backward hook is firing ... since no inputs require gradients":
        # expected, and handled by ending such layers at their last accumulation.
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        # a module returning a dict gets no backward hooks; the runner notes it
        warnings.filterwarnings("ignore", message="For backward hooks to be called")
        _run(model, step)
        with BackwardMarks(model, clock) as marks:
            marks.take()
            for it in range(iters):
                _run(model, step)
                done, acc = marks.take()
                base = len(calls)
                calls += [
                    replace(c, parent=c.parent + base if c.parent >= 0 else -1)
                    for c in backward_calls(done, acc, it, clock)
                ]
    samples = build_samples(calls, iters)
    return {p: (s.total_ns.tolist() or [], s.self_ns.tolist() or []) for p, s in samples.items()}


def _run(model: torch.nn.Module, step: Callable[[], None]) -> None:
    from layerprof.runner import model_error

    try:
        step()
    except (KeyboardInterrupt, ModelRunError, UsageError):
        raise
    except Exception as exc:
        err = model_error(model, None, exc)
        if "inplace" in str(exc) or "view" in str(exc):
            err.hint = (
                "a module modifies a hooked tensor in place; --backward needs out-of-place ops"
            )
        raise err from exc


def backward_calls(
    done: Sequence[_Open], accumulated: Sequence[tuple[str, Any]], iteration: int, clock: Clock
) -> list[LayerCall]:
    """Resolve marks and nest the intervals into LayerCall records (parents before children)."""
    marks = [m for d in done for m in (d.start, d.end)] + [m for _, m in accumulated]
    times = clock.resolve(marks)
    acc = [(p, t) for (p, _), t in zip(accumulated, times[2 * len(done) :], strict=True)]
    spans = [(d.path, times[2 * i], times[2 * i + 1]) for i, d in enumerate(done)]
    # Deepest first, so an early parent sees its early children's corrected ends.
    for i in sorted(range(len(done)), key=lambda k: -done[k].path.count(".") - bool(done[k].path)):
        if done[i].early:
            path, start, end = spans[i]
            later = [t for p, t in acc if _within(p, path) and t >= start]
            later += [e for p, s, e in spans if p != path and _within(p, path) and s >= start]
            spans[i] = (path, start, max([end, *later]))
    return nest_intervals(spans, iteration)


def _within(path: str, root: str) -> bool:
    return root == "" or path == root or path.startswith(root + ".")


def nest_intervals(spans: Sequence[tuple[str, int, int]], iteration: int) -> list[LayerCall]:
    """Containment nesting; a child ending after its parent extends the parent (and up)."""
    ordered = sorted(spans, key=lambda s: (s[1], -s[2]))
    rows: list[list[Any]] = []  # [path, start, end, parent]
    stack: list[int] = []
    for path, start, end in ordered:
        while stack and rows[stack[-1]][2] <= start:
            stack.pop()
        for i in stack:
            rows[i][2] = max(rows[i][2], end)
        rows.append([path, start, end, stack[-1] if stack else -1])
        stack.append(len(rows) - 1)
    return [LayerCall(p, iteration, s, e, parent) for p, s, e, parent in rows]


# ---- ops mode ----------------------------------------------------------------------------
