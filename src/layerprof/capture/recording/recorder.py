"""Times every module's forward: one instance-level wrapper per module, swapped in and out.

Each recorded module's entry point is replaced by a small closure that logs
its start and end (``wrappers``, which also says what other code sees while a
Recorder is attached); everything else (nesting, iterations, self times, the
overhead correction) happens after the run, vectorized (``layertimes``), into
one of three accumulators (``accumulators``; a training loop's is ``training``).

The class reads in the order a recording runs: ``attach`` (the wrappers on),
``_run`` (what each forward of the model adds around its timed call, in one
``try/finally``), ``detach`` (everything off, also after an error or Ctrl-C),
then the results. A forward that raises is dropped from the record and the
innermost layer it raised in is kept for the error message (``active_path``).

Shapes are recorded once per distinct input signature of the model
(``signatures``): the first forward with a new signature runs with
shape-recording wrappers, the forwards after it with the timing ones only.
The time spent recording shapes is logged as ``SKIP`` pseudo-calls and taken
out of the layers' times.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from layerprof.capture.compilewatch import dynamo_compiling
from layerprof.capture.modules import (
    ForwardWrapper,
    HookHandles,
    compiled_in_place,
    wrappable_modules,
)
from layerprof.capture.platform.clocks import Clock, HostClock
from layerprof.capture.platform.distributed import unwrap
from layerprof.capture.recording import wrappers
from layerprof.capture.recording.accumulators import Accumulator, KeptTables, StreamSums
from layerprof.capture.recording.calibration import (
    correction_for,
    overhead_of,
    wants_correction,
)
from layerprof.capture.recording.forwardlog import ForwardLog
from layerprof.capture.recording.forwards import model_forwards, per_forward_noted
from layerprof.capture.recording.layerinfo import default_meta, layer_infos
from layerprof.capture.recording.layertimes import Correction
from layerprof.capture.recording.loop import StepSchedule
from layerprof.capture.recording.notes import compiled_notes, replaced_note, replaced_paths
from layerprof.capture.recording.phasetags import ForwardPhases, PhaseScope
from layerprof.capture.recording.signatures import Signatures, clear_overlays, overlay_shapes
from layerprof.capture.recording.training import TrainingSteps
from layerprof.capture.shapes import inputs_tree
from layerprof.errors import UsageError
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import LayerCall, Meta
from layerprof.pivot.sections.generation import Generation
from layerprof.pivot.sections.inputs import InputSignature

if TYPE_CHECKING:
    import torch

#: Log entries (two per event) kept before they are compacted into a CallTable.
COMPACT_AT = 1 << 17


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
    Each layer's backward is timed (on CUDA by CUDA events, resolved once per
    step) and each step is split into data wait, forward, backward, optimizer
    and rest (layerprof.capture.recording.training); ``schedule`` picks the steps
    that count, and the active ones are summed per layer as the loop runs.
    ``memory=True`` also counts each layer's activation, parameter, gradient and
    optimizer-state bytes in every step (the last active step's are kept); its
    hooks cost time in the timed steps, so the profile says so when on.
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
        if memory and not backward:
            raise UsageError("Recorder(memory=True) needs backward=True (a training loop)")
        self.model = unwrap(model)  # DDP / FSDP wrappers: the user's model inside
        self.clock: Clock = clock or HostClock()
        self.device_clock = device_clock
        self.backward = backward  # a training loop: rec.step() per step
        self.schedule = schedule or StepSchedule()
        self.memory = memory  # activation memory per layer, in every step
        self.record_shapes = record_shapes
        self.correction = correction
        # whether profile() removes the wrappers' cost (None: on the real clock); a long
        # training loop is summed as it runs, so it is decided before its first sum
        self.correct = correct
        self._wrappers = HookHandles()
        self._entered = 0  # nested ``with rec:`` blocks open now
        self._by_path: dict[str, ForwardWrapper] = {}
        self._replaced: list[str] = []  # paths replaced on the model while it was wrapped
        # each forward's generate phase (its ids, rec.phase()'s name): kept from the first
        # forward of ids or with a phase named (a model of no token ids costs nothing), not
        # in a loop or while streaming, which make no generation section; --generate marks
        # each generate's start on it (begin_generate)
        self.generate_phases = ForwardPhases()
        self._root_forwards = 0
        self._paths: list[str] = []  # layer index -> path (the log holds indices)
        self._index: dict[str, int] = {}
        self._log = ForwardLog(self._paths, device_clock)  # the wrappers' calls
        self._signatures = Signatures()
        # True only while Dynamo traces a wrapper (layerprof.capture.compilewatch), and
        # whether a compiled caller ran the model (set by the compiled graph's replay)
        self._compiling = dynamo_compiling()
        self._compiled = [False]
        # where compacted calls go: kept (by default), streamed (stream()) or a loop's sums
        self._record: Accumulator = KeptTables(self._log, self._paths, self._decide)
        self._training: TrainingSteps | None = None
        if backward:
            self._training = self._record = TrainingSteps(
                self.model, clock=self.clock, backward_clock=backward_clock,
                schedule=self.schedule, memory=memory, log=self._log, paths=self._paths,
                index=self._index, decide=self._decide,
            )  # fmt: skip

    # ---- attach -----------------------------------------------------------------
    def attach(self) -> Recorder:
        if self._wrappers:
            return self
        with self._wrappers.registering() as handles:
            for path, module in wrappable_modules(self.model):
                pid = self._index.setdefault(path, len(self._index))
                if pid == len(self._paths):
                    self._paths.append(path)
                make = functools.partial(self._wrapper, path, module, pid)
                wrapper = ForwardWrapper(module, make)
                handles.add(wrapper)
                self._by_path[path] = wrapper
            if self._training is not None:
                self._training.attach(handles)
        return self

    def _wrapper(
        self, path: str, module: Any, pid: int, fwd: Callable[..., Any]
    ) -> Callable[..., Any]:
        """The wrapper of layer ``pid`` (``module``, at ``path``) around its entry point."""
        log, compiling = self._log, self._compiling
        made = wrappers.timed(pid, fwd, log, self.clock.mark, self._raised, compiling)
        if module is self.model:
            made = wrappers.root(made, fwd, self._run, log.running, compiling, self._compiled)
        if self._training is not None and compiled_in_place(module):
            made = wrappers.marked_outside(path, made, self._training)
        return made

    def __enter__(self) -> Recorder:
        # re-entrant: a nested ``with rec:`` (a helper entering its caller's Recorder)
        # records on; only the outermost exit takes the hooks off (an inner one stopped it)
        self._entered += 1
        try:
            return self.attach()
        except BaseException:
            self._entered -= 1
            raise

    # ---- run: one forward of the model ---------------------------------------------
    def _run(self, timed: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One forward of the model, around the root's timed call and outside every
        measured interval: its phase, its input signature (the layers' shapes the first
        time), a training loop's marks; then the log is compacted when it is long."""
        # a loop has no phases, and a streamed record no generation section
        if not self.backward and self._record.plain:
            self.generate_phases.see(self._root_forwards, args, kwargs)
        self._root_forwards += 1
        sig = self._signatures.of(args, kwargs) if self.record_shapes else None
        store = sig.store if sig is not None and not sig.store.shapes else None
        if store is not None:  # the signature's first forward: the layers' shapes too
            overlay_shapes(self._by_path, store, self._skip, self.clock.mark)
            ins = inputs_tree(args, kwargs)
        log, training = self._log, self._training
        log.running[0] = 1
        if training is not None:
            training.forward_start()
        try:
            out = timed(*args, **kwargs)
        finally:
            log.running[0] = 0
            if store is not None:
                clear_overlays(self._by_path)
        if training is not None:
            training.forward_done(out)
        if store is not None:
            store.keep("", ins, out)
        if sig is not None:
            sig.forwards += 1
        log.zero = len(log.pairs)
        if log.zero >= COMPACT_AT:
            self._compact()
        return out

    def _skip(self, t0: int) -> None:
        """Log [t0, now] as recorder time inside the open layer (a SKIP pseudo-call)."""
        self._log.skip(t0, self.clock.mark())

    def _raised(self) -> None:
        """A recorded call raised: its log closes it (see ``ForwardLog.raised``)."""
        self._log.raised(self.clock.mark())

    def _compact(self) -> None:
        """Move the log's whole outermost calls into a CallTable, or the accumulator's sink."""
        self._log.compact(self._log.inside_forward(), self._record.sink())

    def step(self) -> None:
        """Marks the end of a training step (call it once per step, like
        torch.profiler's ``prof.step()``); the next step starts when it returns."""
        training = self._training
        if training is None or training.phases is None:
            raise UsageError(
                "Recorder.step() needs Recorder(model, backward=True) and an entered"
                " Recorder (with rec: ...)"
            )
        training.step(self._stop_recording)

    def _stop_recording(self) -> None:
        """Past the schedule's active window every wrapper passes through (the hooks stay on
        until the Recorder exits): a run of 100k steps holds no more than its window."""
        for wrapper in self._by_path.values():
            disable = getattr(wrapper.wrapper, "disable", None)
            if disable is not None:
                disable()

    # ---- detach -------------------------------------------------------------------
    def detach(self) -> None:
        self._entered = 0
        self._replaced = self._replaced_paths()  # while the wrappers still say what they wrap
        self._wrappers.remove()
        self._by_path.clear()
        if self._training is not None:
            self._training.detach()

    def __exit__(self, *exc: object) -> None:
        self._entered -= 1
        if self._entered <= 0:
            self.detach()

    def _replaced_paths(self) -> list[str]:
        return replaced_paths(self.model, {p: w.module for p, w in self._by_path.items()})

    # ---- results ---------------------------------------------------------------------
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
        self._record.reset()
        self._log.clear()
        self.generate_phases.clear()
        self._compiled[0] = False
        self._root_forwards = 0
        self._signatures.restart()

    def calls(self) -> list[LayerCall]:
        self._compact()
        self._record.check_calls()
        return self._log.table().records(self._paths)

    @property
    def call_count(self) -> int:
        """Recorded layer calls so far (complete forwards)."""
        self._compact()
        _, summed = self._record.summed()
        return summed + sum(int((t.layer >= 0).sum()) for t in self._log.tables)

    @property
    def iterations(self) -> int:
        """Recorded forwards (outermost calls), failed ones not counted."""
        self._compact()
        summed, _ = self._record.summed()
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
        if isinstance(self._record, StreamSums):
            raise UsageError("Recorder.stream() was called already (reset() empties the sums)")
        if not self._wrappers:  # the layers are known once attached
            raise UsageError("Recorder.stream() needs an entered Recorder (with rec: ...)")
        self._compact()
        wanted = wants_correction(correct, self.correct, self.clock)
        correction = correction_for(wanted, self.correction)
        self._record = StreamSums.of_log(self._log, self._paths, iterations, correction, wanted)
        self.generate_phases.clear()  # no generation section is made from sums

    def _decide(self, correct: bool | None) -> Correction | None:
        """The correction a record is reduced with (``correct``: ``profile(correct=...)``)."""
        return correction_for(wants_correction(correct, self.correct, self.clock), self.correction)

    @property
    def shapes(self) -> dict[str, tuple[Any, Any]]:
        """Shapes of the input signature with the most forwards (see ``signatures``)."""
        sig = self._signatures.main()
        return sig.store.shapes if sig is not None else {}

    def signatures(self) -> tuple[InputSignature, ...]:
        """Each distinct input signature: its inputs, forwards and layer shapes."""
        return self._signatures.sections()

    def phase(self, name: str | None) -> PhaseScope:
        """Name the phase of the model's forwards from now on (``"draft"`` for a
        speculative decoder's drafts, ``"vision"`` for an encoder); None goes back to
        telling prefill and decode apart by the input's length. Also a context manager
        (``with rec.phase("draft"): ...``) that puts back the phase before it."""
        return self.generate_phases.phase(name)

    def _generation(self, samples: dict[str, Any]) -> Generation | None:
        """Prefill and decode (and named phases) apart, when the forwards had them: a
        decode forward, a phase named with ``phase()``, or a generate begun by
        ``--generate``."""
        of_model, iterations = self._model_forwards()
        if len(of_model) != self._root_forwards:
            return None  # forwards the log does not hold whole (a raised one): no split
        config = getattr(self.model, "config", None)
        return self.generate_phases.generation(
            samples, of_model.tolist(), iterations,
            encoder_decoder=bool(getattr(config, "is_encoder_decoder", False)),
        )  # fmt: skip

    def model_forwards(self) -> tuple[Any, int]:
        """Which recorded iterations are forwards of the model (the root's outermost
        calls; the others are outermost calls of a submodule, such as an
        encoder-decoder's encoder that ``generate()`` runs apart), as indices in order,
        and how many iterations were recorded."""
        self._compact()
        return self._model_forwards()

    def _model_forwards(self) -> tuple[Any, int]:  # as model_forwards(), not compacted
        return model_forwards(self._log.tables, self._index.get(""))

    @property
    def steps_done(self) -> int:
        """Steps ended with ``step()`` so far (skipped and warm-up ones included)."""
        return self._training.index if self._training is not None else 0

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
        return per_forward_noted(profile, of_model.tolist())

    def _generates(self, profile: Profile) -> bool:
        """Whether the record is one of generate()'s: a generation section, or an
        encoder-decoder (T5's forwards take ``decoder_input_ids``, so they get no tag)
        recorded outside a training loop or a stream."""
        if not self._record.plain:
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
        totals = self._record.totals(correct)
        training = self._training
        notes = training.step_notes(totals.loop, self._compiled[0]) if training else ()
        notes += (
            replaced_note(self._replaced_paths() if self._by_path else self._replaced)
            + compiled_notes(self.model, self._compiled[0])
            + (training.memory_notes(self._compiled[0]) if training else ())
        )
        per_forward = totals.calls / max(totals.iterations, 1)
        overhead, unmeasured = overhead_of(totals.correction, self.correction, per_forward)
        notes += unmeasured
        main = self._signatures.main()
        generation = self._generation(totals.samples) if self._record.plain else None
        return Profile(
            meta=meta or default_meta(self.model, totals.iterations, main.inputs if main else ()),
            layers=layer_infos(
                self.model, self.shapes, output_bytes=main.store.output_bytes if main else None
            ),
            samples=totals.samples,
            overhead=overhead,
            signatures=self.signatures(),
            loop=totals.loop,
            activation_memory=training.memory if training else None,
            generation=generation,
            notes=notes,
        )
