"""``--compile``: the per-layer view of a ``torch.compile``-d model.

Hooks cannot time layers inside compiled code (they break the graph, and
inductor strips profiler ranges), so this view needs none there. The run
(docs/compile.md has the whole story):

1. the gate: the torch internals this needs are there (``compiled_gate``);
2. one eager forward counts each layer's calls, shapes and FLOPs (and shows a
   model error as such, before anything compiles);
3. the model is compiled through the recording backend (``compiled_backend``):
   whole, or the regions the user had compiled (``compiled_regions``); the
   runner's cold call then pays the compile (reported apart), its latency
   pass times the compiled forward with no instrumentation;
4. the per-layer pass: ``iters`` compiled forwards (and backwards) under
   torch.profiler, each in a ``layerprof: compiled forward`` range, with
   ``layer:`` ranges around the module calls that run eagerly;
5. the attribution (``layerprof.trace.compiled``) credits every kernel event to
   module paths; ``compiled_section`` turns it into the usual per-layer rows
   and the ``compiled`` section.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from layerprof.capture.compiled.backend import RecordingBackend, make_backend
from layerprof.capture.compiled.gate import check_compile_support
from layerprof.capture.compiled.regions import (
    EagerRanges,
    Unwrapped,
    compile_regions,
    eager_range_api,
    unwrap,
)
from layerprof.capture.compiled.samples import (
    RunFacts,
    break_diff,
    bucket_infos,
    build_section,
    layer_samples,
    notes,
)
from layerprof.capture.compilewatch import CompileWatch
from layerprof.capture.flops.counter import count_flops, flop_sections
from layerprof.capture.modules import HookHandles, hookable_modules
from layerprof.capture.options import CompileOptions, OpOptions
from layerprof.capture.platform.clocks import synchronizer
from layerprof.capture.profiling.profiler import RawTrace, profiler_kwargs, trace_loader
from layerprof.capture.quiet import kineto_quiet
from layerprof.capture.recording.layerinfo import layer_infos
from layerprof.capture.recording.shapestore import ShapeCapture
from layerprof.capture.step import backward_state, backward_step
from layerprof.errors import ModelRunError, UsageError
from layerprof.pivot.notes import Note
from layerprof.pivot.sections.compiled import GraphBreak, Recompile
from layerprof.trace.compiled import BACKWARD_MARK, FORWARD_MARK, ModelPaths, attribute_compiled

if TYPE_CHECKING:
    import torch

    from layerprof.capture.flops.counter import FlopCount
    from layerprof.capture.options import GivenPeak
    from layerprof.pivot.profile import Profile
    from layerprof.pivot.records import LayerInfo

__all__ = ["CompiledRun"]


@dataclass(frozen=True)
class _EagerFacts:
    """One eager forward's per-layer facts: calls, shapes, output bytes, FLOPs."""

    calls: dict[str, float]
    shapes: dict[str, tuple[Any, Any]]
    output_bytes: dict[str, int]
    flops: FlopCount | None
    flop_note: Note | None


class CompiledRun:
    """One compiled run of ``model``: entered, the model runs compiled; left, it is as it was.

    ``forward`` is the call the runner times (its first call compiles);
    ``layer_pass`` profiles and attributes. A failure to compile becomes a
    one-line :class:`ModelRunError` with the compiler's reason.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: CompileOptions,
    ) -> None:
        self.options = options
        self.args = args
        self.kwargs = kwargs
        self.given = model
        self.model: torch.nn.Module = model  # the eager model under it, once entered
        self.regions: tuple[str, ...] = ("",)
        self._unwrapped: Unwrapped | None = None
        self.backend: RecordingBackend | None = None
        self.eager: _EagerFacts | None = None
        self.watch = CompileWatch()  # compiles inside the profiled steps
        self._breaks: dict[str, int] = {}
        self._metrics: set[int] = set()
        self._types: dict[str, str] = {}
        self._layers: tuple[LayerInfo, ...] = ()
        self._ranges: EagerRanges | None = None

    # ---- set-up -------------------------------------------------------------------
    def __enter__(self) -> CompiledRun:

        check_compile_support()
        # Dynamo logs every graph break as ~20 WARNING lines on stderr; the compiled
        # section reports each break with its reason, so its logger is quiet meanwhile
        self._dynamo_log = logging.getLogger("torch._dynamo")
        self._dynamo_level = self._dynamo_log.level
        self._dynamo_log.setLevel(logging.ERROR)
        self._unwrapped = undo = unwrap(self.given)
        self.model, self.regions = undo.model, undo.regions()
        try:
            self.eager = _eager_facts(self.model, self.args, self.kwargs)
            # The module tree as the eager model has it: once the regions compile,
            # their roots carry a compiled call and count as opaque leaves.
            self._types = {
                p: type(m).__name__ for p, m in hookable_modules(self.model, compiled_leaves=False)
            }
            counted = self.eager.flops
            self._layers = layer_infos(
                self.model,
                self.eager.shapes,
                flops=counted.flops if counted else None,
                output_bytes=self.eager.output_bytes,
            )
            self._breaks, self._metrics = _dynamo_state()
            # The eager ranges' hooks go on before anything compiles, and stay: a hook
            # added later fails Dynamo's guards on the hook dicts (torch >= 2.14) and
            # recompiles every region inside the profiled forwards.
            self._ranges = EagerRanges(self.model).__enter__()
            self.backend = make_backend(self.options.mode, self.options.dynamic)
            compile_regions(
                self.model,
                self.regions,
                self.backend,
                dynamic=self.options.dynamic,
                undo=undo.undo,
            )
        except BaseException:
            self._remove_ranges()
            undo.restore()
            self._dynamo_log.setLevel(self._dynamo_level)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._dynamo_log.setLevel(self._dynamo_level)
        self._remove_ranges()
        if self._unwrapped is not None:
            self._unwrapped.restore()

    def _remove_ranges(self) -> None:
        if self._ranges is not None:
            self._ranges.__exit__(None, None, None)
            self._ranges = None

    def forward(self) -> Any:
        """One compiled forward; a compiler failure is a one-line ModelRunError."""
        try:
            return self.model(*self.args, **self.kwargs)
        except (KeyboardInterrupt, ModelRunError):
            raise
        except Exception as exc:
            raise _compile_error(self.model, exc) from exc

    # ---- the per-layer pass -------------------------------------------------------
    def layer_pass(
        self,
        base: Profile,
        *,
        iters: int,
        device: str,
        backward: bool = False,
        loss: Callable[[Any], Any] | None = None,
        peak: GivenPeak | None = None,
    ) -> Profile:
        """Profile ``iters`` compiled forwards (and backwards) and attribute their kernels;
        FLOPs are the eager forward's (layerprof.capture.flops.counter), ``peak`` as ``--peak``."""

        assert self.eager is not None and self.backend is not None, "use inside `with`"
        raw = self._capture(iters, device, backward, loss)
        att = attribute_compiled(
            raw.tables(), self.backend.records, ModelPaths(self._types), rule=self.options.split
        )
        eager = self.eager
        counted = eager.flops
        infos, summary = flop_sections(
            self._layers, counted, device=base.meta.device, dtype=base.meta.dtype,
            threads=base.meta.threads or 1, given=peak,
        )  # fmt: skip
        layers = (*infos, *bucket_infos())
        section = build_section(att, self._facts(eager))
        lines = [*notes(att, section), *self.watch.notes()]
        if eager.flop_note:
            lines.append(eager.flop_note)
        return replace(
            base,
            layers=layers,
            samples=layer_samples(att, layers, eager.calls),
            compiled=section,
            flops=summary,
            events=raw,
            notes=(*base.notes, *lines),
        )

    def _capture(
        self, iters: int, device: str, backward: bool, loss: Callable[[Any], Any] | None
    ) -> RawTrace:
        import torch

        sync = synchronizer(device)
        step = self._step(sync, backward, loss)
        kw = profiler_kwargs(OpOptions(), device, iters)
        # One recorded-but-discarded step first, as ops mode does: the first
        # profiled step pays the profiler's start-up cost.
        kw["schedule"] = torch.profiler.schedule(wait=0, warmup=1, active=iters, repeat=1)
        cycles: list[Any] = []
        kw["on_trace_ready"] = lambda p: cycles.append(p.profiler)

        grad = backward_state(self.model) if backward else contextlib.nullcontext()
        prof = torch.profiler.profile(**kw)
        window = self.watch.window("profiled compiled forwards")
        with grad:
            if backward:
                self._guard(step)  # compiles the training graphs outside the profiled steps
            assert self._ranges is not None
            with self._ranges.recording(), kineto_quiet(), prof, window:
                for _ in range(iters + 1):
                    self._guard(step)
                    prof.step()
        results = [c.kineto_results for c in cycles]
        return RawTrace(
            results=tuple(results),
            device=device,
            cycles=tuple(_cycle(r) for r in results),
        )

    def _step(
        self, sync: Callable[[], None], backward: bool, loss: Callable[[Any], Any] | None
    ) -> Callable[[], None]:
        enter, leave = eager_range_api()
        model, args, kwargs = self.model, self.args, self.kwargs
        if not backward:

            def forward_step() -> None:
                handle = enter(FORWARD_MARK)
                try:
                    model(*args, **kwargs)
                    sync()
                finally:
                    leave(handle)

            return forward_step

        open_: list[Any] = []

        def switch(value: Any) -> None:
            sync()
            leave(open_.pop())
            open_.append(enter(BACKWARD_MARK))

        inner = backward_step(model, args, kwargs, loss, sync, before_backward=switch)

        def training_step() -> None:
            open_.append(enter(FORWARD_MARK))
            try:
                inner()
            finally:
                while open_:
                    leave(open_.pop())

        return training_step

    def _guard(self, step: Callable[[], None]) -> None:
        try:
            step()
        except (KeyboardInterrupt, ModelRunError, UsageError):
            raise
        except Exception as exc:
            raise _compile_error(self.model, exc) from exc

    def _facts(self, eager: _EagerFacts) -> RunFacts:
        import torch

        breaks, recompiles, frames, compile_ns = self._compile_events()
        return RunFacts(
            torch=torch.__version__,
            mode=self.options.mode,
            dynamic=self.options.dynamic,
            split=self.options.split,
            regions=self.regions,
            recompiled=self._unwrapped is not None and self._unwrapped.recompiled,
            compile_ns=compile_ns,
            frames=frames,
            breaks=breaks,
            recompiles=recompiles,
            calls=eager.calls,
        )

    def _compile_events(
        self,
    ) -> tuple[tuple[GraphBreak, ...], tuple[Recompile, ...], dict[str, str], int]:
        """Graph breaks, recompiles, frame names and compile time since ``__enter__``."""
        from torch._dynamo.utils import counters, get_compilation_metrics

        breaks = break_diff(self._breaks, dict(counters["graph_break"]))
        frames: dict[str, str] = {}
        recompiles: list[Recompile] = []
        compile_ns = 0
        for m in get_compilation_metrics():
            cid = str(m.compile_id)
            frame = _frame_name(m)
            frames.setdefault(cid, frame)
            if id(m) in self._metrics:
                continue
            compile_ns += round((m.entire_frame_compile_time_s or 0.0) * 1e9)
            if m.recompile_reason:
                reason = m.recompile_reason.strip().splitlines()[0]
                recompiles.append(Recompile(compile_id=cid, frame=frame, reason=reason))
        assert self.backend is not None
        # a backward graph compiles lazily, outside its frame's compile time
        compile_ns += sum(r.compile_ns for r in self.backend.records if r.phase == "backward")
        return breaks, tuple(recompiles), frames, compile_ns


def _frame_name(m: Any) -> str:
    name = m.co_name or "?"
    where = (m.co_filename or "").rsplit("/", 1)[-1]
    return f"{name} ({where}:{m.co_firstlineno})" if where else name


def _dynamo_state() -> tuple[dict[str, int], set[int]]:
    from torch._dynamo.utils import counters, get_compilation_metrics

    return dict(counters["graph_break"]), {id(m) for m in get_compilation_metrics()}


def _cycle(results: Any) -> Any:
    from layerprof.capture.profiling.profiler import TraceCycle

    return TraceCycle(trace_loader(results))


def _eager_facts(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> _EagerFacts:
    """Calls, shapes and output bytes of one eager forward, then FLOPs from another."""
    from layerprof.capture.failures import locate_failure, model_error

    def forward() -> Any:
        return model(*args, **kwargs)

    counts: dict[str, float] = {}
    hooks = HookHandles()
    try:
        with hooks.registering():
            for path, module in hookable_modules(model):

                def count(mod: Any, a: Any, path: str = path) -> None:
                    counts[path] = counts.get(path, 0.0) + 1.0

                hooks.add(module.register_forward_pre_hook(count))
        with ShapeCapture(model) as shapes:
            forward()
    except (KeyboardInterrupt, ModelRunError):
        raise
    except Exception as exc:
        hooks.remove()
        raise model_error(model, locate_failure(model, forward), exc) from exc
    finally:
        hooks.remove()
    try:
        flops: FlopCount | None = count_flops(model, forward)
        note = None
    except Exception as exc:  # the counter's own limits: the model ran above
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        flops, note = (
            None,
            Note("flops-not-counted", f"FLOPs not counted: {error}", {"error": error}),
        )
    return _EagerFacts(
        calls=counts,
        shapes=shapes.shapes,
        output_bytes=shapes.output_bytes,
        flops=flops,
        flop_note=note,
    )


def _compile_error(model: Any, exc: BaseException) -> ModelRunError:
    """The compiler's reason in one line (the innermost cause of Dynamo's wrappers)."""
    inner: BaseException = exc
    seen = {id(inner)}
    while True:
        # Dynamo re-raises its own wrappers from inside ``except`` blocks: the
        # compiler's reason is at the end of the cause (or context) chain
        nxt = getattr(inner, "inner_exception", None) or inner.__cause__ or inner.__context__
        if not isinstance(nxt, BaseException) or id(nxt) in seen:
            break
        seen.add(id(nxt))
        inner = nxt
    lines = [ln.strip() for ln in str(inner).splitlines() if ln.strip()]
    reason = lines[0] if lines else ""
    kind = type(inner).__name__
    return ModelRunError(
        f"torch.compile failed on {type(model).__name__}: {kind}{': ' + reason if reason else ''}",
        hint="--debug shows the compiler's traceback; without --compile the model runs eagerly",
    )
