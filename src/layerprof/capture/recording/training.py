"""A Recorder's training loop (``backward=True``): its marks, its steps and their sums.

While the Recorder is attached, graph-node marks time each layer's backward
(``nodes``) and phase marks split each step into data wait, forward, backward,
closure, optimizer and rest (``loop``); ``memory=True`` also counts each
layer's activation memory (``capture.memory.activations``). ``step()`` ends a
step: the schedule's active steps are kept and reduced to per-layer sums every
``LOOP_CHUNK`` calls (``looprecord``), the others keep nothing, and past the
active window the Recorder's wrappers pass through.

``TrainingSteps`` is also the Recorder's accumulator in a loop
(``accumulators.Accumulator``): until the first step ends its record is a plain
one, the log's tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from layerprof.capture.memory.activations import ActivationCapture
from layerprof.capture.modules import HookHandles
from layerprof.capture.platform.clocks import Clock, CudaEventClock
from layerprof.capture.platform.device import device_of
from layerprof.capture.recording.accumulators import Decide, KeptTables, Totals
from layerprof.capture.recording.forwardlog import ForwardLog
from layerprof.capture.recording.layertimes import CallTable
from layerprof.capture.recording.loop import PhaseMarks, StepMarks, StepSchedule
from layerprof.capture.recording.looprecord import Chunk, LoopRecord
from layerprof.capture.recording.nodes import NodeHooksUnavailable, NodeMarks
from layerprof.errors import UsageError
from layerprof.pivot.notes import Note
from layerprof.pivot.sections.loop import TrainingLoop

if TYPE_CHECKING:
    import torch

    from layerprof.pivot.sections.memory import ActivationMemory

#: Calls (forward and backward) of ended active steps kept before they are reduced to
#: per-layer sums (``LoopRecord``): a few hundred steps of a 50-layer model.
LOOP_CHUNK = 1 << 15


class TrainingSteps:
    """The steps of a training loop, and its record (see the module's docstring).

    ``log`` and ``paths`` are the Recorder's (``index``: path -> layer index);
    ``decide`` gives the correction the first sums are made with, as
    ``profile(correct=...)`` would.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        clock: Clock,
        backward_clock: Clock | None,
        schedule: StepSchedule,
        memory: bool,
        log: ForwardLog,
        paths: list[str],
        index: dict[str, int],
        decide: Decide,
    ) -> None:
        self._model, self._clock, self._backward_clock = model, clock, backward_clock
        self._schedule, self._memory = schedule, memory
        self._log, self._paths, self._index, self._decide = log, paths, index, decide
        self._tables = KeptTables(log, paths, decide)  # the record before the first step
        self.nodes: NodeMarks | None = None  # attached: graph-node marks (backward)
        self.phases: PhaseMarks | None = None  # attached: the step's phase marks
        self._activations: ActivationCapture | None = None
        self._optimizers: list[Any] = []  # every optimizer that stepped (its state's bytes)
        self.memory: ActivationMemory | None = None  # the last active step's
        self.forwards = 0  # model forwards so far (numbers each forward's graph nodes)
        self.index = 0  # steps ended so far
        self._start = 0
        self._iteration = 0  # the model forward the current step started at
        # ended active steps not reduced yet, and what they were reduced into so far
        self._ended: list[StepMarks] = []
        self._ended_calls = 0  # their backward calls
        self._loop: LoopRecord | None = None
        self._chunk_forward = 0  # the number of the first model forward in the log's tables
        self._backward_paths: list[str] = []  # names the layer indices of backward tables

    # ---- attached ------------------------------------------------------------------
    def attach(self, wrappers: HookHandles) -> None:
        """Graph-node marks (backward per layer) and phase marks (the step anatomy), taken
        off with ``wrappers``."""
        phases = PhaseMarks(self._clock.mark)
        try:
            nodes = NodeMarks(
                self._model, self._backward_clock or self._default_backward_clock(),
                on_backward=phases.backward_start,
            )  # fmt: skip
        except NodeHooksUnavailable as why:
            raise UsageError(
                f"Recorder(backward=True) needs autograd graph-node hooks: {why}"
            ) from why
        phases.on_backward_end = nodes.backward_done
        nodes.__enter__()
        wrappers.add(_Closing(nodes.__exit__))
        phases.attach()
        wrappers.add(_Closing(phases.detach))
        self.nodes, self.phases = nodes, phases
        nodes.forward = self.forwards
        if self._memory:
            self._attach_memory(phases, wrappers)
        self._start = self._clock.mark()

    def _attach_memory(self, phases: PhaseMarks, wrappers: HookHandles) -> None:
        """Saved-tensor counting (layerprof.capture.memory.activations) for every step, and
        a note of which optimizer stepped (from the phase marks' optimizer hook), for its
        state's bytes."""

        def seen(optimizer: Any) -> None:
            if not any(o is optimizer for o in self._optimizers):
                self._optimizers.append(optimizer)
            if self._activations is not None:  # before the loop's zero_grad() clears them
                self._activations.note_grads()

        phases.on_optimizer = seen
        self._activations = ActivationCapture(self._model).__enter__()
        wrappers.add(_Closing(self._activations.__exit__))

    def _default_backward_clock(self) -> Clock:
        """CUDA events on CUDA (resolved once per step), else the forward's host clock."""

        device = device_of(self._model)
        return CudaEventClock(device) if device.startswith("cuda") else self._clock

    def detach(self) -> None:
        self.nodes = self.phases = None
        self._activations = None

    def forward_start(self) -> None:
        if self.phases is not None:
            self.phases.forward_start()

    def forward_done(self, out: Any) -> None:
        """Hook this forward's graph nodes (for its backward) and close its span."""
        import torch

        phases, nodes = self.phases, self.nodes
        if phases is None or nodes is None:
            return
        if torch.is_grad_enabled():
            calls = nodes.calls
            since = len(calls)
            while since and calls[since - 1].forward == self.forwards:
                since -= 1  # the first call of this forward
            nodes.hook_graph(out, since)
        phases.forward_end()
        self.forwards += 1
        nodes.forward = self.forwards

    # ---- steps -----------------------------------------------------------------------
    def step(self, stop: Callable[[], None]) -> None:
        """End a step (attached); ``stop`` when the schedule's active window is over."""
        phases, nodes = self.phases, self.nodes
        assert phases is not None and nodes is not None
        end = self._clock.mark()
        forwards, backwards, optimizer, closures = phases.take()
        # the model's forwards so far; profile() maps them to the log's iterations (a
        # compaction per step would cost more than the rest of the step's recording)
        iterations = self.forwards
        marks = StepMarks(
            index=self.index, start=self._start, end=end, forwards=forwards,
            backwards=backwards, optimizer=optimizer, closures=closures,
            iterations=range(self._iteration, iterations),
            backward=self._backward_tables(nodes),  # one resolve: one synchronize on CUDA
        )  # fmt: skip
        counted = (
            self._activations.step(list(self._optimizers) or None) if self._activations else None
        )
        if self._schedule.phase(self.index) == "active":
            self._ended.append(marks)
            self._ended_calls += sum(len(t) for t in marks.backward.values())
            self.memory = counted or self.memory  # the last active step's
        else:
            self._drop_calls()  # a skipped or warm-up step keeps nothing
        self.index += 1
        self._iteration = iterations
        if self._ended and self._log.calls_held + self._ended_calls >= LOOP_CHUNK:
            self._reduce()
        if self._schedule.phase(self.index) == "done":
            stop()
        self._start = self._clock.mark()

    def _drop_calls(self) -> None:
        """Forget the forward calls recorded since the last step (outside the schedule's
        active window); the next chunk starts at the next forward."""
        if self._log.inside_forward() or self._ended:
            return
        self._log.clear()
        self._chunk_forward = self.forwards

    def _backward_tables(self, nodes: NodeMarks) -> dict[int, CallTable]:
        """This step's backward calls per forward, as tables (kept for active steps only)."""
        taken = nodes.take_forwards()
        if self._schedule.phase(self.index) != "active":
            return {}
        return {f: CallTable.of_calls(calls, self._backward_paths) for f, calls in taken.items()}

    def _reduce(self, correct: bool | None = None) -> LoopRecord:
        """Reduce the ended steps to per-layer sums (``LoopRecord``); the first time
        decides the correction, as ``profile(correct=...)`` would."""
        log = self._log
        log.compact(log.inside_forward())
        loop = self._loop
        if loop is None:
            loop = self._loop = LoopRecord(
                len(self._paths), log.device_clock is not None, self._decide(correct),
                self._schedule.active,
            )  # fmt: skip
        loop.forward.widen(len(self._paths))
        if not self._ended:
            return loop
        chunk = Chunk(
            log.tables, self._ended, self._chunk_forward, self._iteration, self._backward_paths
        )
        rest = loop.add(chunk, self._index.get(""))
        log.tables = [rest] if rest is not None else []
        self._ended, self._ended_calls = [], 0
        self._chunk_forward = self._iteration
        return loop

    # ---- the record (accumulators.Accumulator) ----------------------------------------
    @property
    def plain(self) -> bool:
        return not self.index

    def sink(self) -> Callable[[CallTable], None] | None:
        return None

    def summed(self) -> tuple[int, int]:
        loop = self._loop
        return (loop.forward.filled, loop.forward.call_count) if loop is not None else (0, 0)

    def check_calls(self) -> None:
        if self._loop is not None and self._loop.steps:
            raise UsageError(
                "Recorder.calls(): the training steps' calls were summed per layer as they"
                " ended (a long loop is reduced as it runs); only profile() has them"
            )

    def totals(self, correct: bool | None) -> Totals:
        if not self.index:
            return self._tables.totals(correct)
        summed = self._loop is not None and self._loop.correction is not None
        if self._loop is not None and correct is not None and correct != summed:
            raise UsageError(
                f"Recorder.profile(correct={correct}): the steps so far were summed with"
                f" correct={summed} (a long loop is summed as it runs);"
                f" decide it when opening: Recorder(..., correct={correct})"
            )
        record = self._reduce(correct)
        forward = record.forward
        iterations, calls = forward.filled, forward.call_count
        samples, loop = record.result(self._paths, self._backward_paths, self._schedule)
        return Totals(samples, record.correction, iterations, calls, loop)

    def reset(self) -> None:
        self._loop, self._ended, self._ended_calls = None, [], 0
        self._chunk_forward = self.forwards

    # ---- notes -------------------------------------------------------------------------
    def step_notes(self, loop: TrainingLoop | None, compiled: bool) -> tuple[Note, ...]:
        """No step ended, or none ran the model's own forward (``compiled``: a compiled
        caller ran it, which the Recorder does not see)."""
        if not self.index:
            return (
                Note(
                    "no-training-steps",
                    "Recorder(backward=True) but rec.step() was never called: no backward"
                    " times and no steps; call rec.step() once per training step",
                ),
            )
        if loop is None or not loop.steps or compiled or any(s.forwards for s in loop.steps):
            return ()
        name = type(self._model).__name__
        return (
            Note(
                "no-model-forward",
                f"no step ran the recorded model's own forward ({name}):"
                " steps and backward need it; if the loop calls a submodule directly"
                " (a training_step calling self.net(x)), record that submodule",
                {"model": name},
            ),
        )

    def memory_notes(self, compiled: bool = False) -> tuple[Note, ...]:
        """What the activation counts rest on; ``compiled``: the model also ran inside
        torch.compile of a caller, whose forwards the counting hooks never see."""
        if self.memory is None:
            return ()
        cost = Note(
            "activation-memory-cost",
            "activation memory counted in every step (Recorder(memory=True)): its"
            " saved-tensor and forward hooks ran in the timed steps, so step and layer"
            " times include their cost; record without memory=True for times alone",
        )
        if not compiled:
            return (cost,)
        return (
            cost,
            Note(
                "activation-memory-compiled",
                "the forwards that ran inside torch.compile saved their tensors from"
                " compiled code, which no layer's hook sees: their activations are not"
                " counted per layer (a layer reads 0 there, and what the compiled graph"
                " saved is counted outside every layer); to count them, record the"
                " model uncompiled",
            ),
        )


class _Closing:
    """A handle whose ``remove`` calls ``close`` (for HookHandles)."""

    def __init__(self, close: Callable[..., Any]) -> None:
        self._close = close

    def remove(self) -> None:
        self._close()
