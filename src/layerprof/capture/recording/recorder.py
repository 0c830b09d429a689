"""Times every module's forward: one instance-level wrapper per module, swapped in and out.

Each recorded module's entry point (``forward``; ``_compiled_call_impl`` for
a module compiled in place) is replaced by a small closure that appends
``(layer index, clock)`` when the forward starts and ``(EXIT, clock)`` when
it returns - the design HF accelerate uses (``add_hook_to_module``), measured
by ``benchmarks/overhead.py`` at a fraction of what ``__call__`` hooks cost:
a module with no hooks keeps ``nn.Module.__call__``'s fast path. Everything
else (nesting, iterations, self times, the overhead correction) happens
after the run, vectorized (``layerprof.capture.recording.layertimes``).

What other code sees while a Recorder is attached, and why (tested in
tests/capture/test_recorder_wrappers.py; docs/definitions.md says the same):

* the module's hooks (and the user's) still fire, around the timed interval:
  a layer's time is its ``forward``, hooks are its caller's time;
* ``module.forward`` is an instance attribute carrying ``__wrapped__``, so
  ``inspect.signature(module.forward)`` is the original's; ``type(module)``
  and ``type(module).forward`` are untouched;
* scripted and compiled modules are timed as one leaf, from outside
  TorchScript and outside dynamo, so nothing inside a compiled region changes
  and nothing recompiles;
* every wrapper comes off in ``detach`` (``__exit__``), also after an error or
  Ctrl-C; a forward that raises is dropped from the record and the innermost
  layer it raised in is kept for the error message (``active_path``).

Shapes are recorded once per distinct input signature of the model (the
shapes of the root's inputs): the first forward with a new signature runs with
shape-recording wrappers, the forwards after it with the timing ones only.
The time spent recording shapes is logged as ``SKIP`` pseudo-calls and taken
out of the layers' times.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from layerprof.capture.compilewatch import dynamo_compiling
from layerprof.capture.memory.activations import ActivationCapture
from layerprof.capture.modules import (
    ForwardWrapper,
    HookHandles,
    compiled_in_place,
    is_compiled,
    wrappable_modules,
)
from layerprof.capture.platform.clocks import Clock, CudaEventClock, HostClock, synchronizer
from layerprof.capture.platform.device import device_of
from layerprof.capture.platform.distributed import unwrap
from layerprof.capture.recording.forwardlog import ForwardLog
from layerprof.capture.recording.forwards import per_forward
from layerprof.capture.recording.layerinfo import default_meta, layer_infos
from layerprof.capture.recording.layertimes import (
    EXIT,
    CallTable,
    Correction,
    SampleSums,
    build_samples,
)
from layerprof.capture.recording.loop import PhaseMarks, StepMarks, StepSchedule
from layerprof.capture.recording.looprecord import Chunk, LoopRecord
from layerprof.capture.recording.nodes import NodeHooksUnavailable, NodeMarks
from layerprof.capture.recording.phasetags import PhaseTags, Tag
from layerprof.capture.recording.shapestore import ShapeStore, shape_wrapper
from layerprof.capture.shapes import describe_inputs, inputs_tree
from layerprof.errors import UsageError
from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import LayerCall, Meta, Overhead
from layerprof.pivot.sections.generation import Generation, phase_views
from layerprof.pivot.sections.inputs import InputSignature
from layerprof.stats import median

if TYPE_CHECKING:
    import torch

    from layerprof.capture.memory.activations import ActivationCapture
    from layerprof.pivot.profile import Profile
    from layerprof.pivot.sections.memory import ActivationMemory

#: Log entries (two per event) kept before they are compacted into a CallTable.
COMPACT_AT = 1 << 17
#: Calls (forward and backward) of ended active steps kept before they are reduced to
#: per-layer sums (``LoopRecord``): a few hundred steps of a 50-layer model.
LOOP_CHUNK = 1 << 15


@dataclass
class _Signature:
    """One distinct input signature: its description, forwards and shapes."""

    inputs: tuple[str, ...]
    forwards: int = 0
    store: ShapeStore = field(default_factory=ShapeStore)


class Recorder:
    """Times every module's forward; use as a context manager around your own loop.

    Each outermost call of a recorded module starts a new iteration. With a
    ``device_clock`` (CUDA events) the device marks are resolved after one
    synchronize at the end of each outermost call, never per layer.
    ``correction`` is the calibrated wrapper cost to remove (the runner's);
    without one, ``profile()`` calibrates when it corrects. ``correct`` says
    whether to remove it (None: yes on the real host clock, no on a test clock;
    ``profile(correct=...)`` may still decide, except after a long loop's
    first sums, see below).

    ``backward=True`` is for a training loop: call ``step()`` once per step.
    Each layer's backward is timed by graph-node marks
    (layerprof.capture.recording.nodes; on CUDA with CUDA events, resolved once per
    step), each forward's graph is hooked right after the forward, and each
    step is split into data wait, forward, backward, optimizer and rest
    (layerprof.capture.recording.loop); ``schedule`` picks the steps that count:
    skipped and warm-up steps keep nothing, and the active ones are summed per
    layer every few hundred steps (layerprof.capture.recording.looprecord), so
    a long run holds 8 bytes per layer, step and quantity, not its calls.
    ``memory=True`` also counts each layer's activation, parameter, gradient and
    optimizer-state bytes in every step (layerprof.capture.memory.activations; the
    last active step's are kept); its hooks cost time in the timed steps, so it is
    off by default and the profile says so when on.
    A DDP/FSDP wrapper is unwrapped: the layers are the user's model's.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        backward: bool = False,
        schedule: StepSchedule | None = None,
        memory: bool = False,
        clock: Clock | None = None,
        device_clock: Clock | None = None,
        backward_clock: Clock | None = None,
        record_shapes: bool = True,
        correction: Correction | None = None,
        correct: bool | None = None,
    ) -> None:
        import torch

        if not isinstance(model, torch.nn.Module):
            raise UsageError(
                f"Recorder(model): expected a torch.nn.Module, found {type(model).__name__}"
            )
        if schedule is not None and not isinstance(schedule, StepSchedule):
            raise UsageError(
                f"Recorder(schedule=...): expected a layerprof.StepSchedule, found"
                f" {type(schedule).__name__}"
            )
        self.model = unwrap(model)  # DDP / FSDP wrappers: the user's model inside
        self.clock: Clock = clock or HostClock()
        self.device_clock = device_clock
        # a training loop (backward=True): rec.step() per step, see capture.recording.loop
        self.backward = backward
        self.schedule = schedule or StepSchedule()
        if memory and not backward:
            raise UsageError("Recorder(memory=True) needs backward=True (a training loop)")
        # activation memory per layer, counted in every step (its hooks cost time)
        self.memory = memory
        self._activations: ActivationCapture | None = None
        self._optimizers: list[Any] = []  # every optimizer that stepped (its state's bytes)
        self._memory: ActivationMemory | None = None
        self._backward_clock = backward_clock
        self._nodes: NodeMarks | None = None
        self._phases: PhaseMarks | None = None
        self._forwards = 0  # model forwards so far (numbers each forward's graph nodes)
        self._step_index = 0
        self._step_start = 0
        self._step_iteration = 0
        # ended active steps not reduced yet, and what they were reduced into so far
        self._ended: list[StepMarks] = []
        self._ended_calls = 0  # their backward calls
        self._loop: LoopRecord | None = None
        self._chunk_forward = 0  # the number of the first model forward in the log's tables
        self.record_shapes = record_shapes
        self.correction = correction
        # whether profile() removes the wrappers' cost (None: on the real clock); a long
        # training loop is summed as it runs, so it is decided before its first sum
        self.correct = correct
        self._wrappers = HookHandles()
        self._entered = 0  # nested ``with rec:`` blocks open now
        self._by_path: dict[str, ForwardWrapper] = {}
        self._replaced: list[str] = []  # paths replaced on the model while it was wrapped
        # per forward of the model: (phase, tokens, batch); rec.phase() names the phase
        self._phase: str | None = None
        self._backward_paths: list[str] = []  # names the layer indices of backward tables
        # only from the first forward that has a phase on (a model of no token ids costs
        # nothing), and not while streaming, which makes no generation section
        self._tags = PhaseTags()  # forward of the model -> its tag
        self._root_forwards = 0
        self._paths: list[str] = []  # layer index -> path (the log holds indices)
        self._index: dict[str, int] = {}
        self._log = ForwardLog(self._paths, device_clock)  # the wrappers' calls
        self._stream: _Stream | None = None  # stream(): tables summed as they are made
        self._signatures: dict[str, _Signature] = {}
        self._root_depth = 0
        # True only while Dynamo traces a wrapper (layerprof.capture.compilewatch), and
        # whether a compiled caller ran the model (set by the compiled graph's replay)
        self._compiling = dynamo_compiling()
        self._compiled = [False]

    # ---- life cycle ---------------------------------------------------------
    def attach(self) -> Recorder:
        if self._wrappers:
            return self
        with self._wrappers.registering() as wrappers:
            for path, module in wrappable_modules(self.model):
                pid = self._index.setdefault(path, len(self._index))
                if pid == len(self._paths):
                    self._paths.append(path)
                make = self._timed_root if module is self.model else self._timed
                if self.backward and compiled_in_place(module):
                    make = functools.partial(self._marked_outside, path, make)
                wrapper = ForwardWrapper(module, functools.partial(make, pid))
                wrappers.add(wrapper)
                self._by_path[path] = wrapper
            if self.backward:
                self._attach_loop()
        return self

    def _attach_loop(self) -> None:
        """Graph-node marks (backward per layer) and phase marks (the step anatomy)."""
        phases = PhaseMarks(self.clock.mark)
        try:
            nodes = NodeMarks(
                self.model, self._backward_clock or self._default_backward_clock(),
                on_backward=phases.backward_start,
            )  # fmt: skip
        except NodeHooksUnavailable as why:
            raise UsageError(
                f"Recorder(backward=True) needs autograd graph-node hooks: {why}"
            ) from why
        phases.on_backward_end = nodes.backward_done
        nodes.__enter__()
        self._wrappers.add(_Closing(nodes.__exit__))
        phases.attach()
        self._wrappers.add(_Closing(phases.detach))
        self._nodes, self._phases = nodes, phases
        nodes.forward = self._forwards
        if self.memory:
            self._attach_memory(phases)
        self._step_start = self.clock.mark()

    def _attach_memory(self, phases: PhaseMarks) -> None:
        """Saved-tensor counting (layerprof.capture.memory.activations) for every step, and
        a note of which optimizer stepped (from the phase marks' optimizer hook), for its
        state's bytes."""

        def seen(optimizer: Any) -> None:
            if not any(o is optimizer for o in self._optimizers):
                self._optimizers.append(optimizer)
            if self._activations is not None:  # before the loop's zero_grad() clears them
                self._activations.note_grads()

        phases.on_optimizer = seen
        self._activations = ActivationCapture(self.model).__enter__()
        self._wrappers.add(_Closing(self._activations.__exit__))

    def _compiled_note(self) -> tuple[Note, ...]:
        """Compiled modules are one row each: hooks cannot time what runs inside a
        compiled region (they would break its graph), so say where their layers went."""
        compiled = [p for p, m in wrappable_modules(self.model) if is_compiled(m)]
        if not compiled:
            return ()
        shown = ", ".join(p or "(the model)" for p in compiled[:5])
        return (
            Note(
                "compiled-leaves",
                f"compiled modules are timed whole, forward and backward ({shown}): the"
                " layers inside a compiled region run as fused kernels no hook can time;"
                " `layerprof run --compile` (or profile(..., compile=True)) attributes the"
                " compiled kernels to them",
                {"paths": compiled},
            ),
        )

    def _compiled_caller_note(self) -> tuple[Note, ...]:
        """The model ran inside a compiled caller (``torch.compile(model)`` called while
        ``model`` is recorded): Dynamo compiled those forwards without the wrappers and
        hooks (``dynamo_compiling``), so they are not recorded; said, not dropped."""
        if not self._compiled[0]:
            return ()
        name = type(self.model).__name__
        return (
            Note(
                "compiled-caller",
                f"the recorded model ({name}) also ran inside torch.compile of it: those"
                " forwards (and their backward) ran as compiled code with none of the"
                " Recorder's wrappers or hooks, as compiled without it, and are not in this"
                " profile; to time them, record the compiled module (Recorder(compiled),"
                " timed whole) or use `layerprof run --compile` for its layers",
                {"model": name},
            ),
        )

    def _replaced_paths(self) -> list[str]:
        wrapped = {path: w.module for path, w in self._by_path.items()}
        if not wrapped:
            return []
        now = dict(wrappable_modules(self.model))
        return sorted(p for p, m in now.items() if wrapped.get(p) is not m)

    def _replaced_note(self) -> tuple[Note, ...]:
        """Modules set on the model after the Recorder opened (``model.fc = nn.Linear(...)``
        mid-loop) carry none of its wrappers: their forward and backward time is their
        parent's. Said, by path, rather than dropped silently."""
        changed = self._replaced_paths() if self._by_path else self._replaced
        if not changed:
            return ()
        shown = ", ".join(changed[:5]) + (
            f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        )
        return (
            Note(
                "modules-replaced",
                f"modules were replaced or added while recording ({shown}): the Recorder"
                " wraps the modules it found when it opened, so their time (forward and"
                " backward) is counted in their parent's; open the Recorder after changing"
                " the model",
                {"paths": changed},
            ),
        )

    def _default_backward_clock(self) -> Clock:
        """CUDA events on CUDA (resolved once per step), else the forward's host clock."""

        device = device_of(self.model)
        return CudaEventClock(device) if device.startswith("cuda") else self.clock

    def detach(self) -> None:
        self._entered = 0
        self._replaced = self._replaced_paths()  # while the wrappers still say what they wrap
        self._wrappers.remove()
        self._by_path.clear()
        self._nodes = self._phases = None
        self._activations = None

    def __enter__(self) -> Recorder:
        # re-entrant: a nested ``with rec:`` (a helper entering the Recorder its caller
        # entered) records on, and only the outermost exit takes the hooks off (the
        # inner exit stopped the recording silently)
        self._entered += 1
        try:
            return self.attach()
        except BaseException:
            self._entered -= 1
            raise

    def __exit__(self, *exc: object) -> None:
        self._entered -= 1
        if self._entered <= 0:
            self.detach()

    # ---- wrappers (hot path) --------------------------------------------------
    def _timed(self, pid: int, fwd: Callable[..., Any]) -> Callable[..., Any]:
        """The timing wrapper of layer ``pid`` around its entry point ``fwd``."""
        a = self._log.pairs.append
        m = self.clock.mark
        raised = self._raised
        compiling = self._compiling
        if self.device_clock is not None:
            return self._timed_device(pid, fwd)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if compiling():  # traced into a compiled caller's graph: leave no break in it
                return fwd(*args, **kwargs)
            a(pid)
            a(m())
            try:
                # Without keywords, a call without ** skips building a keyword dict.
                out = fwd(*args, **kwargs) if kwargs else fwd(*args)
            except BaseException:
                raised()
                raise
            t = m()
            a(EXIT)
            a(t)
            return out

        def disable() -> None:  # left under another tool's wrapper: pass through
            nonlocal a, m, raised
            a, m, raised = _ignore, _zero_ns, _nothing

        timed.disable = disable  # type: ignore[attr-defined]
        return timed

    def _timed_device(self, pid: int, fwd: Callable[..., Any]) -> Callable[..., Any]:
        """The timing wrapper with CUDA-event marks, resolved when the outermost call ends."""
        assert self.device_clock is not None
        log = self._log
        a = log.pairs.append
        m = self.clock.mark
        d = log.pending.append
        dm = self.device_clock.mark
        depth = log.open
        flush = log.flush_device
        raised = self._raised
        compiling = self._compiling

        def timed(*args: Any, **kwargs: Any) -> Any:
            if compiling():
                return fwd(*args, **kwargs)
            a(pid)
            depth[0] += 1
            d(dm())
            a(m())
            try:
                out = fwd(*args, **kwargs) if kwargs else fwd(*args)
            except BaseException:
                raised()
                raise
            t = m()
            d(dm())
            a(EXIT)
            a(t)
            depth[0] -= 1
            if not depth[0]:
                flush()
            return out

        def disable() -> None:
            nonlocal a, m, d, dm, raised, flush
            a, m, d, dm, raised, flush = _ignore, _zero_ns, _ignore, _zero_ns, _nothing, _nothing
            depth[0] = 1  # never 0 again: nothing to flush

        timed.disable = disable  # type: ignore[attr-defined]
        return timed

    def _marked_outside(
        self, path: str, make: Callable[..., Any], pid: int, fwd: Callable[..., Any]
    ) -> Callable[..., Any]:
        """The timing wrapper of a module compiled in place (``m.compile()``), which also
        opens and closes its call for the graph-node marks: from outside the compiled
        call, where dynamo does not trace (NodeMarks puts no hooks on such a module)."""
        timed = make(pid, fwd)

        def marked(*args: Any, **kwargs: Any) -> Any:
            nodes = self._nodes
            if nodes is None or path not in nodes.outside:
                return timed(*args, **kwargs)
            nodes.enter(path)
            try:
                return timed(*args, **kwargs)
            finally:
                nodes.exit(path)

        marked.disable = timed.disable  # type: ignore[attr-defined]
        return marked

    def _timed_root(self, pid: int, fwd: Callable[..., Any]) -> Callable[..., Any]:
        """The root's wrapper: input signatures and shapes around the root's timed call,
        outside every measured interval."""
        timed = self._timed(pid, fwd)
        active = [True]
        # One log, one stack of open calls, one step: a second thread's forward would
        # interleave its marks with this one's (a TypeError with backward=True, silently
        # wrong times without), so it is refused. Checked once per forward, not per layer.
        owner = threading.get_ident()
        compiling, compiled = self._compiling, self._compiled

        def root(*args: Any, **kwargs: Any) -> Any:
            if compiling():
                # Dynamo traces this forward into a compiled caller's graph (the model
                # recorded, torch.compile(model) called): nothing of ours goes into the
                # graph, which stays the one compiled without the Recorder (a read of the
                # clock broke it: 37 breaks, 1 -> 7 graphs, the recompile limit). The
                # store below is replayed after each run of the graph: profile() says so.
                compiled[0] = True
                return fwd(*args, **kwargs)
            if threading.get_ident() != owner and active[0]:
                raise UsageError(
                    "a Recorder records the thread that attached it; this forward runs in"
                    f" another thread ({threading.current_thread().name}): use one"
                    " Recorder per thread"
                )
            if self._root_depth or not active[0]:
                return timed(*args, **kwargs)
            # a loop has no phases, and a streamed record no generation section
            tag = None if self.backward or self._stream is not None else self._tag(args, kwargs)
            if tag is not None:
                self._tags.add(self._root_forwards, *tag)
            self._root_forwards += 1
            sig = self._signature(args, kwargs) if self.record_shapes else None
            shaping = sig is not None and not sig.store.shapes
            if shaping:
                assert sig is not None
                self._shapes_on(sig.store)
                ins = inputs_tree(args, kwargs)
            self._root_depth = 1
            phases, nodes = self._phases, self._nodes
            if phases is not None:
                phases.forward_start()
            try:
                out = timed(*args, **kwargs)
            finally:
                self._root_depth = 0
                if shaping:
                    self._shapes_off()
            if phases is not None and nodes is not None:
                self._forward_done(phases, nodes, out)
            if shaping:
                assert sig is not None
                sig.store.keep("", ins, out)
            if sig is not None:
                sig.forwards += 1
            self._log.zero = len(self._log.pairs)
            if self._log.zero >= COMPACT_AT:
                self._compact()
            return out

        def disable() -> None:
            active[0] = False
            timed.disable()  # type: ignore[attr-defined]

        root.disable = disable  # type: ignore[attr-defined]
        return root

    def _tag(self, args: Any, kwargs: Any) -> Tag | None:
        """The phase of one forward of the model: the one ``phase()`` set, else, for a
        batch x tokens tensor of token ids (``input_ids``), prefill when it holds more
        than one token and decode for one; no phase for anything else."""
        ids = kwargs.get("input_ids") if kwargs else None
        if ids is None and args:
            ids = args[0]
        shape = getattr(ids, "shape", None)
        dtype = getattr(ids, "dtype", None)
        is_ids = (
            shape is not None and len(shape) == 2 and not getattr(dtype, "is_floating_point", True)
        )
        tokens, batch = (int(shape[1]), int(shape[0])) if is_ids and shape else (0, 0)
        if self._phase is not None:
            return self._phase, tokens, batch
        if not is_ids:
            return None
        return ("prefill" if tokens > 1 else "decode"), tokens, batch

    def phase(self, name: str | None) -> _PhaseScope:
        """Name the phase of the model's forwards from now on (``"draft"`` for a
        speculative decoder's drafts, ``"vision"`` for an encoder); None goes back to
        telling prefill and decode apart by the input's length. Also a context manager
        (``with rec.phase("draft"): ...``) that puts back the phase before it."""
        if name is not None and (not isinstance(name, str) or not name):
            raise UsageError(f"Recorder.phase({name!r}): a phase is a non-empty name or None")
        previous, self._phase = self._phase, name
        return _PhaseScope(self, previous)

    def _generation(self, samples: dict[str, Any]) -> Generation | None:
        """Prefill and decode (and named phases) apart, when the forwards had them: a
        decode forward after a prefill, or a phase named with ``phase()``."""
        tags = self._tags.values()
        named = {t[0] for t in tags if t[0] not in ("prefill", "decode")}
        if not (named or any(t[0] == "decode" for t in tags)):
            return None
        of_model, iterations = self._model_forwards()
        if len(of_model) != self._root_forwards:
            return None  # forwards the log does not hold whole (a raised one): no split
        names: list[str | None] = [None] * iterations
        positions: list[float | None] = [None] * iterations
        seen = 0
        for k, i in enumerate(of_model.tolist()):
            if (tag := self._tags.get(k)) is None:
                continue
            name, length, _ = tag
            seen = length if name == "prefill" else seen + length
            names[i] = name
            positions[i] = float(seen) if name in ("prefill", "decode") else None
        prefill = [t for t in tags if t[0] == "prefill"]
        decode = [t for t in tags if t[0] == "decode"]
        prompt = int(median([t[1] for t in prefill])) if prefill else 0
        batch = int(median([t[2] for t in (prefill or decode)])) if (prefill or decode) else 0
        tokens = {"prefill": prompt * batch, "decode": batch}
        for name in named:
            rows = [t for t in tags if t[0] == name]
            tokens[name] = int(median([t[1] * t[2] for t in rows]))
        return Generation(
            new_tokens=len(prefill) + len(decode), prompt_tokens=prompt, batch=batch,
            generates=len(prefill), ttft_ns=None, itl_ns=None, generate_ns=None,
            phases=phase_views(samples, names, positions, tokens),
        )  # fmt: skip

    def _forward_done(self, phases: PhaseMarks, nodes: NodeMarks, out: Any) -> None:
        """Hook this forward's graph nodes (for its backward) and close its span."""
        import torch

        if torch.is_grad_enabled():
            calls = nodes.calls
            since = len(calls)
            while since and calls[since - 1].forward == self._forwards:
                since -= 1  # the first call of this forward
            nodes.hook_graph(out, since)
        phases.forward_end()
        self._forwards += 1
        nodes.forward = self._forwards

    def _skip(self, t0: int) -> None:
        """Log [t0, now] as recorder time inside the open layer (a SKIP pseudo-call)."""
        self._log.skip(t0, self.clock.mark())

    def _shapes_on(self, store: ShapeStore) -> None:
        """Overlay shape-recording wrappers on every non-root module for one forward."""
        mark = self.clock.mark
        for path, wrapper in self._by_path.items():
            if path:
                wrapper.overlay(shape_wrapper(path, store, wrapper.wrapper, self._skip, mark))

    def _shapes_off(self) -> None:
        for wrapper in self._by_path.values():
            wrapper.clear_overlay()

    def _signature(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Signature:
        tree = inputs_tree(args, kwargs)
        key = repr(tree)
        sig = self._signatures.get(key)
        if sig is None:
            sig = self._signatures[key] = _Signature(inputs=describe_inputs(args, kwargs))
        return sig

    # ---- cold paths -----------------------------------------------------------
    def _raised(self) -> None:
        """A recorded call raised: its log closes it (see ``ForwardLog.raised``)."""
        self._log.raised(self.clock.mark())

    def _compact(self) -> None:
        """Move the whole outermost calls in the log into a CallTable (summed at once
        when streaming)."""
        stream = self._stream
        sink = (
            None
            if stream is None
            else functools.partial(stream.sums.add, correction=stream.correction)
        )
        self._log.compact(self._inside_forward(), sink)

    def _inside_forward(self) -> bool:
        return self._root_depth > 0 or bool(self._log.pending)

    def _table(self) -> CallTable:
        self._compact()
        return self._log.table()

    # ---- training loop -----------------------------------------------------------
    def step(self) -> None:
        """Marks the end of a training step (call it once per step, like
        torch.profiler's ``prof.step()``); the next step starts when it returns."""
        phases, nodes = self._phases, self._nodes
        if phases is None or nodes is None:
            raise UsageError(
                "Recorder.step() needs Recorder(model, backward=True) and an entered"
                " Recorder (with rec: ...)"
            )
        end = self.clock.mark()
        forwards, backwards, optimizer, closures = phases.take()
        # the model's forwards so far; profile() maps them to the log's iterations (a
        # compaction per step would cost more than the rest of the step's recording)
        iterations = self._forwards
        marks = StepMarks(
            index=self._step_index, start=self._step_start, end=end, forwards=forwards,
            backwards=backwards, optimizer=optimizer, closures=closures,
            iterations=range(self._step_iteration, iterations),
            backward=self._backward_tables(nodes),  # one resolve: one synchronize on CUDA
        )  # fmt: skip
        counted = (
            self._activations.step(list(self._optimizers) or None) if self._activations else None
        )
        if self.schedule.phase(self._step_index) == "active":
            self._ended.append(marks)
            self._ended_calls += sum(len(t) for t in marks.backward.values())
            self._memory = counted or self._memory  # the last active step's
        else:
            self._drop_calls()  # a skipped or warm-up step keeps nothing
        self._step_index += 1
        self._step_iteration = iterations
        if self._ended and self._ended_size() >= LOOP_CHUNK:
            self._reduce_loop()
        if self.schedule.phase(self._step_index) == "done":
            self._stop_recording()
        self._step_start = self.clock.mark()

    def _ended_size(self) -> int:
        """Calls held for the ended steps: the log's, its tables' and their backwards'."""
        return self._log.calls_held + self._ended_calls

    def _drop_calls(self) -> None:
        """Forget the forward calls recorded since the last step (outside the schedule's
        active window); the next chunk starts at the next forward."""
        if self._inside_forward() or self._ended:
            return
        self._log.clear()
        self._chunk_forward = self._forwards

    def _reduce_loop(self, correct: bool | None = None) -> LoopRecord:
        """Reduce the ended steps to per-layer sums (``LoopRecord``); the first time
        decides the correction, as ``profile(correct=...)`` would."""
        self._compact()
        loop = self._loop
        if loop is None:
            loop = self._loop = LoopRecord(
                len(self._paths), self.device_clock is not None,
                self._correction(self._wants_correction(correct)), self.schedule.active,
            )  # fmt: skip
        loop.forward.widen(len(self._paths))
        if not self._ended:
            return loop
        chunk = Chunk(
            self._log.tables, self._ended, self._chunk_forward, self._step_iteration,
            self._backward_paths,
        )  # fmt: skip
        rest = loop.add(chunk, self._index.get(""))
        self._log.tables = [rest] if rest is not None else []
        self._ended, self._ended_calls = [], 0
        self._chunk_forward = self._step_iteration
        return loop

    def _backward_tables(self, nodes: NodeMarks) -> dict[int, CallTable]:
        """This step's backward calls per forward, as tables (kept for active steps only)."""
        taken = nodes.take_forwards()
        if self.schedule.phase(self._step_index) != "active":
            return {}
        return {f: CallTable.of_calls(calls, self._backward_paths) for f, calls in taken.items()}

    def _stop_recording(self) -> None:
        """Past the schedule's active window nothing more is kept: every wrapper passes
        through from now on (the hooks stay on until the Recorder exits, so nothing about
        the model changes mid-run), and a run of 100k steps holds no more than its window."""
        for wrapper in self._by_path.values():
            disable = getattr(wrapper.wrapper, "disable", None)
            if disable is not None:
                disable()

    def model_forwards(self) -> tuple[Any, int]:
        """Which recorded iterations are forwards of the model (the root's outermost
        calls; the others are outermost calls of a submodule, such as an
        encoder-decoder's encoder that ``generate()`` runs apart), as indices in order,
        and how many iterations were recorded."""
        self._compact()
        return self._model_forwards()

    def _model_forwards(self) -> tuple[Any, int]:
        """Which recorded iterations are forwards of the model (outermost calls of the
        root), as indices in order, and how many iterations were recorded."""
        root = self._index.get("")
        outer = [t.layer[t.level == 1] for t in self._log.tables]
        firsts = np.concatenate(outer) if outer else np.zeros(0, dtype=np.int64)
        of_model = np.flatnonzero(firsts == root) if root is not None else firsts[:0]
        return of_model, len(firsts)

    @property
    def steps_done(self) -> int:
        """Steps ended with ``step()`` so far (skipped and warm-up ones included)."""
        return self._step_index

    # ---- results ---------------------------------------------------------------
    def active_path(self) -> str | None:
        """Innermost layer in which the last failed forward raised (None if none failed);
        while a forward is running, its innermost open layer."""
        if self._log.failed is not None:
            return self._log.failed
        return self._log.open_path()

    def reset(self) -> None:
        """Forget every recorded call so far (e.g. after an instrumented warm-up); shapes
        already recorded are kept, forward counts restart."""
        self._compact()
        if self._stream is not None:
            self._stream = self._stream.emptied()
        self._log.clear()
        self._tags.clear()
        self._compiled[0] = False
        self._loop, self._ended, self._ended_calls = None, [], 0
        self._chunk_forward = self._forwards
        self._root_forwards = 0
        for sig in self._signatures.values():
            sig.forwards = 0

    def calls(self) -> list[LayerCall]:
        self._compact()
        if self._stream is not None and self._stream.sums.filled:
            raise UsageError(
                "Recorder.calls(): the calls were summed per layer as they were recorded"
                " (stream()); only profile() has them"
            )
        if self._loop is not None and self._loop.steps:
            raise UsageError(
                "Recorder.calls(): the training steps' calls were summed per layer as they"
                " ended (a long loop is reduced as it runs); only profile() has them"
            )
        return self._table().records(self._paths)

    @property
    def call_count(self) -> int:
        """Recorded layer calls so far (complete forwards)."""
        self._compact()
        summed = self._stream.sums.call_count if self._stream is not None else 0
        summed += self._loop.forward.call_count if self._loop is not None else 0
        return summed + sum(int((t.layer >= 0).sum()) for t in self._log.tables)

    @property
    def iterations(self) -> int:
        """Recorded forwards (outermost calls), failed ones not counted."""
        self._compact()
        summed = self._stream.sums.filled if self._stream is not None else 0
        summed += self._loop.forward.filled if self._loop is not None else 0
        return summed + sum(int((t.level == 1).sum()) for t in self._log.tables)

    def stream(self, iterations: int, *, correct: bool | None = None) -> None:
        """Sum the calls per layer and iteration as they are recorded, into matrices made
        for ``iterations`` forwards (more grow them): the record then holds 16 bytes per
        layer and forward (total and self time; 32 with device times) and one chunk of
        the log, instead of 24 bytes per call until ``profile()`` - for a run whose
        length is known (``layerprof run``). ``correct`` is decided now, as
        ``profile()`` would decide it; ``calls()`` is no longer available and
        ``backward=True`` cannot stream (its steps map forwards afterwards).
        """
        if self.backward:
            raise UsageError("Recorder.stream() cannot be used with backward=True")
        if self._stream is not None:
            raise UsageError("Recorder.stream() was called already (reset() empties the sums)")
        if not self._wrappers:  # the layers are known once attached
            raise UsageError("Recorder.stream() needs an entered Recorder (with rec: ...)")
        self._compact()
        wanted = self._wants_correction(correct)
        correction = self._correction(wanted)
        sums = SampleSums(len(self._paths), iterations, self.device_clock is not None)
        for table in self._log.tables:
            sums.add(table, correction)
        self._log.tables.clear()
        self._tags.clear()  # no generation section is made from sums
        self._stream = _Stream(sums, correction, wanted)

    def _wants_correction(self, correct: bool | None) -> bool:
        """``correct``, by default true for the real host clock, false for a test clock."""
        if correct is None:
            correct = self.correct
        return correct if correct is not None else type(self.clock) is HostClock

    def _correction(self, wanted: bool) -> Correction | None:
        """The correction to apply when ``wanted``: ``self.correction``, or a calibrated one
        (measured again once when a busy machine's noise swallowed the hooks' cost)."""
        if not wanted:
            return None
        if self.correction is not None:
            return self.correction
        return measured_calibration()

    @property
    def shapes(self) -> dict[str, tuple[Any, Any]]:
        """Shapes of the input signature with the most forwards (see ``signatures``)."""
        sig = self._main_signature()
        return sig.store.shapes if sig is not None else {}

    def signatures(self) -> tuple[InputSignature, ...]:
        """Each distinct input signature: its inputs, forwards and layer shapes."""
        return tuple(
            InputSignature(inputs=s.inputs, forwards=s.forwards, shapes=dict(s.store.shapes))
            for s in self._signatures.values()
            if s.forwards
        )

    def _main_signature(self) -> _Signature | None:
        sigs = [s for s in self._signatures.values() if s.forwards]
        return max(sigs, key=lambda s: s.forwards) if sigs else None

    def profile(self, meta: Meta | None = None, *, correct: bool | None = None) -> Profile:
        """A Profile of everything recorded (no latency pass: see ``layerprof.profile``).

        See ``profile_per_iteration``; when the record is a generation (it has a
        generation section, or the model is an encoder-decoder), its layer table is
        per forward of the model: an encoder that ``generate()`` runs outside the
        model's forward is counted in the next forward, as ``--generate`` does, so
        the root has 1 call and the encoder 1/N.
        """
        profile = self.profile_per_iteration(meta, correct=correct)
        if not self._generates(profile):
            return profile
        of_model, _ = self._model_forwards()
        folded, done = per_forward(profile, of_model.tolist())
        if not done:
            return folded
        return folded.with_notes(
            Note(
                "generation-per-forward",
                "the layer table is per forward of the model: the encoder, which generate()"
                " runs before the first forward, is counted in that forward (its calls are"
                " a fraction of one per forward)"
                + ("; the generation section has each phase apart" if profile.generation else ""),
            )
        )

    def _generates(self, profile: Profile) -> bool:
        """Whether the record is one of generate()'s: a generation section, or an
        encoder-decoder (T5's forwards take ``decoder_input_ids``, so they get no tag)
        recorded outside a training loop or a stream."""
        if self._stream is not None or self._step_index:
            return False
        config = getattr(self.model, "config", None)
        return profile.generation is not None or bool(getattr(config, "is_encoder_decoder", False))

    def profile_per_iteration(
        self, meta: Meta | None = None, *, correct: bool | None = None
    ) -> Profile:
        """A Profile of everything recorded, each outermost call an iteration of its own.

        ``correct`` removes the wrappers' calibrated cost from host times (see
        docs/definitions.md); by default it is done for the real host clock and
        not for a test clock. A correction set on ``self.correction`` (the
        runner's) is used unless ``correct=False``. Self times are medians over
        iterations.
        """

        self._compact()
        stream = self._stream
        loop = None
        notes: tuple[Note, ...] = ()
        if stream is not None:
            if correct is not None and correct != stream.correct:
                raise UsageError(
                    f"Recorder.profile(correct={correct}): the record was summed with"
                    f" correct={stream.correct} (stream())"
                )
            correction = stream.correction
            iterations, n_calls = stream.sums.filled, stream.sums.call_count
            samples = stream.sums.samples(self._paths)
        elif self._step_index:
            summed = self._loop is not None and self._loop.correction is not None
            if self._loop is not None and correct is not None and correct != summed:
                raise UsageError(
                    f"Recorder.profile(correct={correct}): the steps so far were summed with"
                    f" correct={summed} (a long loop is summed as it runs);"
                    f" decide it when opening: Recorder(..., correct={correct})"
                )
            record = self._reduce_loop(correct)
            correction = record.correction
            iterations, n_calls = record.forward.filled, record.forward.call_count
            samples, loop = record.result(self._paths, self._backward_paths, self.schedule)
        else:
            tables = self._log.tables
            iterations = sum(int((t.level == 1).sum()) for t in tables)
            n_calls = sum(int((t.layer >= 0).sum()) for t in tables)
            correction = self._correction(self._wants_correction(correct))
            samples = build_samples(tables, iterations, correction, self._paths)
        if self.backward and not self._step_index:
            notes = (
                Note(
                    "no-training-steps",
                    "Recorder(backward=True) but rec.step() was never called: no backward"
                    " times and no steps; call rec.step() once per training step",
                ),
            )
        ran = loop is not None and any(s.forwards for s in loop.steps)
        if loop is not None and loop.steps and not ran and not self._compiled[0]:
            notes += (
                Note(
                    "no-model-forward",
                    f"no step ran the recorded model's own forward ({type(self.model).__name__}):"
                    " steps and backward need it; if the loop calls a submodule directly"
                    " (a training_step calling self.net(x)), record that submodule",
                    {"model": type(self.model).__name__},
                ),
            )
        notes += self._replaced_note() + self._compiled_note() + self._compiled_caller_note()
        if self._memory is not None:
            notes += (
                Note(
                    "activation-memory-cost",
                    "activation memory counted in every step (Recorder(memory=True)): its"
                    " saved-tensor and forward hooks ran in the timed steps, so step and layer"
                    " times include their cost; record without memory=True for times alone",
                ),
            )
        overhead = None
        if correction is not None and not correction.measured and self.correction is None:
            notes += (unmeasured_note(),)
            correction = None
        if correction is not None:
            overhead = Overhead(
                per_call_ns=correction.per_call_ns,
                inside_ns=correction.inside_ns,
                corrected=True,
                calls_per_forward=n_calls / max(iterations, 1),
            )
        main = self._main_signature()
        generation = self._generation(samples) if stream is None and not self._step_index else None
        return Profile(
            meta=meta or default_meta(self.model, iterations, main.inputs if main else ()),
            layers=layer_infos(
                self.model, self.shapes, output_bytes=main.store.output_bytes if main else None
            ),
            samples=samples,
            overhead=overhead,
            signatures=self.signatures(),
            loop=loop,
            activation_memory=self._memory,
            generation=generation,
            notes=notes,
        )


@dataclass(frozen=True)
class _Stream:
    """A Recorder's record summed as it is made (``Recorder.stream``)."""

    sums: SampleSums
    correction: Correction | None
    correct: bool  # whether ``correction`` was wanted (stream()'s decision)

    def emptied(self) -> _Stream:
        """The same, with nothing summed yet (room for as many iterations)."""
        old = self.sums
        sums = SampleSums(old.n_paths, old.total.shape[1], old.device is not None)
        return replace(self, sums=sums)


class _Closing:
    """A handle whose ``remove`` calls ``close`` (for HookHandles)."""

    def __init__(self, close: Callable[..., Any]) -> None:
        self._close = close

    def remove(self) -> None:
        self._close()


class _PhaseScope:
    """What ``Recorder.phase()`` returns: ``with`` puts the previous phase back."""

    def __init__(self, rec: Recorder, previous: str | None) -> None:
        self._rec, self._previous = rec, previous

    def __enter__(self) -> _PhaseScope:
        return self

    def __exit__(self, *exc: object) -> None:
        self._rec._phase = self._previous


def _ignore(value: Any) -> None:
    return None


def _zero_ns() -> int:
    return 0


def _nothing() -> None:
    return None


def measured_calibration(device: str = "cpu") -> Correction:
    """``calibrate``, measured again once when a busy machine's noise swallowed the hooks'
    cost (it read 0); still 0 then: see ``unmeasured_note``."""
    found = calibrate(device)
    return found if found.measured else calibrate(device)


def unmeasured_note() -> Note:
    """ "0.0 µs per hooked call" is no measurement (a recorded call costs something): the
    times are left uncorrected, and the profile says why."""
    return Note(
        "overhead-unmeasured",
        "the hooks' cost per call could not be measured: the calibration read 0 against"
        " the noise of a busy machine (twice), so layer times are not corrected for it",
    )


def calibrate(device: str = "cpu", *, children: int = 50, repeats: int = 120) -> Correction:
    """Measure what a recorded call costs, inside its own interval and in its parent's.

    On a model of ``children`` layers running one cheap operator each, the same forward runs without
    and with the Recorder, in alternating rounds (the machine's load hits
    both alike), and each figure is a median:

    * ``inside_ns`` = a layer's measured duration minus its forward's
      uninstrumented time: the wrapper's work between its two clock reads;
    * the leak per child = (the parent's measured self time - its
      uninstrumented self time - ``inside_ns``) / ``children``: the
      wrapper's work outside the child's interval, which its parent pays.
      The uninstrumented self time is the parent's forward minus its
      children's forwards, so the Python cost of calling a module stays the
      caller's, as it is in an uninstrumented run;
    * ``per_call_ns`` = inside + leak: the whole cost of one recorded call.

    On CUDA the wrappers also record CUDA events, so calibration runs on the
    same device with the same clocks; what it measures is host time.
    """
    import torch

    class Small(torch.nn.Module):
        # One cheap operator, not an empty forward: between two recorded calls of a
        # real model the CPU runs torch code, which leaves the wrapper's path colder
        # (and dearer) than back-to-back empty calls would (benchmarks/accuracy.py).
        def forward(self, x: Any) -> Any:
            return x + 1

    class Wide(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(Small() for _ in range(children))

        def forward(self, x: Any) -> Any:
            for layer in self.layers:
                x = layer(x)
            return x

    model = Wide()
    x = torch.zeros(1, device=device)
    sync = synchronizer(device)
    dclock = CudaEventClock(device) if device.startswith("cuda") else None
    rec = Recorder(model, device_clock=dclock, record_shapes=False)
    bare_parent: list[int] = []
    bare_leaf: list[float] = []
    now = time.perf_counter_ns
    rounds = 8
    per_round = max(repeats // rounds, 2)
    for _ in range(rounds):
        for _ in range(per_round):
            t0 = now()
            for layer in model.layers:
                layer.forward(x)
            bare_leaf.append((now() - t0) / children)
            sync()
            t0 = now()
            model.forward(x)
            bare_parent.append(now() - t0)
        with rec:
            for _ in range(per_round):
                sync()
                model(x)
    table = rec._table()
    durations = table.end - table.start
    root = table.level == 1
    inside = max(median(durations[~root].tolist()) - median(bare_leaf), 0.0)
    per_iter_children = np.bincount(
        np.cumsum(root)[~root] - 1, weights=durations[~root], minlength=int(root.sum())
    )
    measured_self = median((durations[root] - per_iter_children).tolist())
    bare_self = median(bare_parent) - children * median(bare_leaf)
    leak = max((measured_self - bare_self - inside) / children, 0.0)
    return Correction(per_call_ns=inside + leak, inside_ns=inside)
