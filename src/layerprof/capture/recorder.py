"""Hooks on every module of a model, recording one LayerCall per forward call.

Per-module ``forward_pre``/``forward`` hooks keep ``__call__`` semantics intact
(other hooks, ``__call__`` overrides still work). ``benchmarks/overhead.py
--compare-hooks`` measures the alternatives side by side: process-wide module
hooks cost the same per call (about 2 µs here) but fire for every module in
the process; wrapping each module's ``forward`` is cheaper (well under 1 µs)
but replaces ``forward`` itself, which ``torch.compile``, scripting, signature
inspection and other hooks then see. We keep per-module hooks and remove
their calibrated cost from the numbers instead (docs/definitions.md).
The hooks only read the clock and append to a list; everything else happens
after the run.

Hooks are always removed in ``detach`` (called from ``__exit__`` and from the
runner's ``finally``), also when the model raises or on Ctrl-C. A forward that
raises is dropped from the record (see ``Recorder._unwind``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from layerprof.capture.clocks import Clock, CudaEventClock, HostClock, synchronizer
from layerprof.capture.hooks import HookHandles, hookable_modules, visible_modules
from layerprof.capture.layertimes import Correction, build_samples
from layerprof.capture.shapes import shape_tree, tensor_bytes
from layerprof.records import LayerCall, LayerInfo, Meta, Overhead
from layerprof.stats import median

if TYPE_CHECKING:
    import torch

    from layerprof.profile import Profile


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


class ShapeCapture:
    """Records input/output shapes of each module's first call (one pass, then idle)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.shapes: dict[str, tuple[Any, Any]] = {}
        self.output_bytes: dict[str, int] = {}
        self._pending: dict[str, Any] = {}
        self._hooks = HookHandles()

    def attach(self) -> ShapeCapture:
        with self._hooks.registering() as hooks:
            for path, module in hookable_modules(self.model):
                hooks.add(module.register_forward_pre_hook(self._pre(path), with_kwargs=True))
                hooks.add(module.register_forward_hook(self._post(path)))
        return self

    def detach(self) -> None:
        self._hooks.remove()

    def _pre(self, path: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, kwargs: Any) -> None:
            if path not in self.shapes and path not in self._pending:
                ins = shape_tree(args)
                if kwargs:
                    ins = [*ins, {k: shape_tree(v) for k, v in kwargs.items()}]
                self._pending[path] = ins

        return hook

    def _post(self, path: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            if path in self._pending:
                self.shapes[path] = (self._pending.pop(path), shape_tree(output))
                self.output_bytes[path] = tensor_bytes(output)

        return hook

    def __enter__(self) -> ShapeCapture:
        return self.attach()

    def __exit__(self, *exc: object) -> None:
        self.detach()


class Recorder:
    """Times every module's forward; use as a context manager around your own loop.

    Each outermost call of a recorded module starts a new iteration. With a
    ``device_clock`` (CUDA events) the device marks are resolved after one
    synchronize at the end of each outermost call, never per layer.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        clock: Clock | None = None,
        device_clock: Clock | None = None,
        record_shapes: bool = True,
    ) -> None:
        self.model = model
        self.clock: Clock = clock or HostClock()
        self.device_clock = device_clock
        self._handles = HookHandles()
        self._raw: list[list[Any]] = []
        self._stack: list[int] = []
        self._iteration = -1
        self._shapes = ShapeCapture(model) if record_shapes else None
        self._done: list[LayerCall] = []
        self._failed: str | None = None
        self._forwards = 0  # outermost forwards started, failed ones included
        self._failed_in = -1  # the forward in which _failed was recorded
        self._root_done = False
        self.correction: Correction | None = None

    # ---- life cycle ---------------------------------------------------------
    def attach(self) -> Recorder:
        if self._handles:
            return self
        try:
            with self._handles.registering() as handles:
                for path, module in hookable_modules(self.model):
                    pre, post = self._hooks(path)
                    handles.add(module.register_forward_pre_hook(pre))
                    handles.add(module.register_forward_hook(post))
                # Runs after the root's timing hook, also when its forward raises.
                if handles:
                    handles.add(self.model.register_forward_hook(self._unwind, always_call=True))
            if self._shapes is not None:
                self._shapes.attach()
        except BaseException:
            self.detach()
            raise
        return self

    def detach(self) -> None:
        self._handles.remove()
        if self._shapes is not None:
            self._shapes.detach()

    def __enter__(self) -> Recorder:
        return self.attach()

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # ---- hooks (hot path) -----------------------------------------------------
    def _hooks(self, path: str) -> tuple[Callable[..., None], Callable[..., None]]:
        raw = self._raw
        stack = self._stack
        mark = self.clock.mark
        dmark = self.device_clock.mark if self.device_clock is not None else None
        is_root = path == ""

        def pre(module: Any, args: Any) -> None:
            if not stack:
                self._iteration += 1
                self._forwards += 1
            parent = stack[-1] if stack else -1
            stack.append(len(raw))
            if dmark is not None:
                raw.append([path, self._iteration, 0, 0, parent, dmark(), None])
                raw[-1][2] = mark()
            else:
                raw.append([path, self._iteration, mark(), 0, parent, None, None])

        def post(module: Any, args: Any, output: Any) -> None:
            t = mark()
            i = stack.pop()
            # A child that raised inside a forward which caught the error never
            # reached its post hook: close it here, so the stack stays aligned.
            while raw[i][0] is not path and stack:
                raw[i][3] = t
                i = stack.pop()
            entry = raw[i]
            entry[3] = t
            if is_root:
                self._root_done = True
            if dmark is not None:
                entry[6] = dmark()
                if not stack:
                    self._flush()

        return pre, post

    def _unwind(self, module: Any, args: Any, output: Any) -> None:
        """After the root's call: if its forward raised, drop that iteration.

        In normal completion the root's own post hook has already closed its
        entry. When the forward raised, entries are still open: remember the
        innermost open layer (where it failed) and discard the failed
        iteration, so a caught exception in the user's loop does not corrupt
        the calls that follow.
        """
        if self._root_done:
            self._root_done = False
            return
        if not self._stack:
            return
        if self._failed_in != self._forwards:  # the innermost layer unwinds first
            self._failed = self._raw[self._stack[-1]][0]
            self._failed_in = self._forwards
        while self._stack and self._raw[self._stack[-1]][0] != "":
            self._stack.pop()
        if self._stack:
            self._stack.pop()  # the root call that raised
        if not self._stack:
            first = next(i for i, e in enumerate(self._raw) if e[1] == self._iteration)
            del self._raw[first:]
            self._iteration -= 1

    def _flush(self) -> None:
        """Turn completed raw entries into LayerCall records (resolving device marks)."""
        if self._stack:
            return
        raw = self._raw
        if not raw:
            return
        base = len(self._done)
        host = self.clock.resolve([v for e in raw for v in (e[2], e[3])])
        dev: list[int] | None = None
        if self.device_clock is not None and raw[0][5] is not None:
            dev = self.device_clock.resolve([v for e in raw for v in (e[5], e[6])])
        for i, e in enumerate(raw):
            self._done.append(
                LayerCall(
                    path=e[0],
                    iteration=e[1],
                    start_ns=host[2 * i],
                    end_ns=host[2 * i + 1],
                    parent=e[4] + base if e[4] >= 0 else -1,
                    device_start_ns=dev[2 * i] if dev else None,
                    device_end_ns=dev[2 * i + 1] if dev else None,
                )
            )
        raw.clear()

    # ---- results ---------------------------------------------------------------
    def active_path(self) -> str | None:
        """Innermost layer in which the last failed forward raised (None if none failed)."""
        if self._failed is not None:
            return self._failed
        return self._raw[self._stack[-1]][0] if self._stack else None

    def reset(self) -> None:
        """Forget everything recorded so far (e.g. after an instrumented warm-up)."""
        self._flush()
        self._raw.clear()
        self._stack.clear()
        self._done.clear()
        self._iteration = -1

    def calls(self) -> list[LayerCall]:
        self._flush()
        return list(self._done)

    @property
    def iterations(self) -> int:
        return self._iteration + 1

    @property
    def shapes(self) -> dict[str, tuple[Any, Any]]:
        return self._shapes.shapes if self._shapes is not None else {}

    def profile(self, meta: Meta | None = None, *, correct: bool | None = None) -> Profile:
        """A Profile of everything recorded (no latency pass: see ``layerprof.profile``).

        ``correct`` removes the hooks' calibrated cost from host times (see
        docs/definitions.md); by default it is done for the real host clock and
        not for a test clock. A correction set on ``self.correction`` (the
        runner's) is used as is. The first iteration also recorded shapes, so
        it is slower; self times are medians over iterations.
        """
        from layerprof.profile import Profile

        calls = self.calls()
        iterations = max((c.iteration for c in calls), default=-1) + 1
        correction = self.correction
        if correction is None and (
            correct if correct is not None else type(self.clock) is HostClock
        ):
            correction = calibrate()
        samples = build_samples(calls, iterations, correction)
        overhead = None
        if correction is not None:
            overhead = Overhead(
                per_call_ns=correction.per_call_ns,
                inside_ns=correction.inside_ns,
                corrected=True,
                calls_per_forward=len(calls) / max(iterations, 1),
            )
        return Profile(
            meta=meta or default_meta(self.model, iterations),
            layers=layer_infos(self.model, self.shapes),
            samples=samples,
            overhead=overhead,
        )


def default_meta(model: torch.nn.Module, iterations: int) -> Meta:
    import torch

    from layerprof.capture.device import device_of
    from layerprof.profile import now_iso

    return Meta(
        model=type(model).__name__,
        device=device_of(model),
        torch=torch.__version__,
        iters=iterations,
        mode="train" if model.training else "eval",
        source="recorder",
        created=now_iso(),
    )


def calibrate(device: str = "cpu", *, children: int = 50, repeats: int = 60) -> Correction:
    """Measure the hooks' cost per module call on a model of empty layers.

    ``per_call_ns`` = (hooked - bare) forward time / hooked calls; ``inside_ns`` =
    median measured duration of an empty layer, i.e. the part of the hook cost
    that falls inside a call's own interval. On CUDA the hooks also record
    CUDA events, so calibration runs on the same device with the same clocks;
    what it measures is host time (the hooks cost the GPU nothing).
    """
    import torch

    class Empty(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x

    class Wide(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(Empty() for _ in range(children))

        def forward(self, x: Any) -> Any:
            for layer in self.layers:
                x = layer(x)
            return x

    model = Wide()
    x = torch.zeros(1, device=device)
    sync = synchronizer(device)

    def median_forward(fn: Callable[[], Any]) -> float:
        samples = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter_ns()
            fn()
            samples.append(time.perf_counter_ns() - t0)
        return median(samples)

    bare = median_forward(lambda: model(x))
    dclock = CudaEventClock(device) if device.startswith("cuda") else None
    rec = Recorder(model, device_clock=dclock, record_shapes=False)
    with rec:
        hooked = median_forward(lambda: model(x))
    inside = median([c.duration_ns for c in rec.calls() if c.path != ""])
    per_call = max((hooked - bare) / (children + 1), 0.0)
    return Correction(per_call_ns=per_call, inside_ns=min(inside, per_call))
