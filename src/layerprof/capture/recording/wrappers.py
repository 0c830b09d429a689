"""The Recorder's wrappers: the closures swapped in for each module's entry point.

This is the hot path: every call of a recorded module runs one of them. A
wrapper appends ``(layer index, clock)`` to the ForwardLog's ``pairs`` when the
forward starts and ``(EXIT, clock)`` when it returns; everything else happens
after the run (``layertimes``). What a wrapper reads per call is a local of its
closure (``a``, ``m``, ``raised``...), bound once when the wrapper is made: a
closure's cell is the cheapest read CPython has, where ``self.clock.mark``
would be two attribute lookups per call, paid twice per layer call.

``disable()`` (set on each wrapper) turns one into a pass-through for good: left
under another tool's wrapper at ``remove()`` (``ForwardWrapper``), or past a
training loop's active steps (``Recorder.step``).

Swapping the entry point (``forward``; ``_compiled_call_impl`` for a module
compiled in place) is the design HF accelerate uses (``add_hook_to_module``),
measured by ``benchmarks/overhead.py`` at a fraction of what ``__call__`` hooks
cost: a module with no hooks keeps ``nn.Module.__call__``'s fast path. What
other code sees while a Recorder is attached, and why (tested in
tests/capture/recording/test_recorder_wrappers.py; docs/definitions.md says the same):

* the module's hooks (and the user's) still fire, around the timed interval:
  a layer's time is its ``forward``, hooks are its caller's time;
* ``module.forward`` is an instance attribute carrying ``__wrapped__``, so
  ``inspect.signature(module.forward)`` is the original's; ``type(module)``
  and ``type(module).forward`` are untouched;
* scripted and compiled modules are timed as one leaf, from outside
  TorchScript and outside dynamo, so nothing inside a compiled region changes
  and nothing recompiles;
* every wrapper comes off in ``Recorder.detach`` (``__exit__``), also after an
  error or Ctrl-C.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from layerprof.capture.recording.forwardlog import ForwardLog
from layerprof.capture.recording.layertimes import EXIT
from layerprof.errors import UsageError

if TYPE_CHECKING:
    from layerprof.capture.recording.nodes import NodeMarks

Wrapper = Callable[..., Any]


class NodesHolder(Protocol):
    """What holds a training loop's graph-node marks while attached (``TrainingSteps``)."""

    @property
    def nodes(self) -> NodeMarks | None: ...


def timed(
    pid: int,
    fwd: Wrapper,
    log: ForwardLog,
    mark: Callable[[], int],
    raised: Callable[[], None],
    compiling: Callable[[], bool],
) -> Wrapper:
    """The timing wrapper of layer ``pid`` around its entry point ``fwd``; ``raised`` closes
    a call that raised, ``compiling`` is true while Dynamo traces the wrapper."""
    a = log.pairs.append
    m = mark
    if log.device_clock is not None:
        return timed_device(pid, fwd, log, mark, raised, compiling)

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


def timed_device(
    pid: int,
    fwd: Wrapper,
    log: ForwardLog,
    mark: Callable[[], int],
    raised: Callable[[], None],
    compiling: Callable[[], bool],
) -> Wrapper:
    """The timing wrapper with CUDA-event marks, resolved when the outermost call ends."""
    assert log.device_clock is not None
    a = log.pairs.append
    m = mark
    d = log.pending.append
    dm = log.device_clock.mark
    depth = log.open
    flush = log.flush_device

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


def marked_outside(path: str, timed: Wrapper, training: NodesHolder) -> Wrapper:
    """The timing wrapper ``timed`` of a module compiled in place (``m.compile()``), which
    also opens and closes its call for the graph-node marks (``training.nodes``: None
    while detached): from outside the compiled call, where dynamo does not trace
    (NodeMarks puts no hooks on such a module)."""

    def marked(*args: Any, **kwargs: Any) -> Any:
        nodes = training.nodes
        if nodes is None or path not in nodes.outside:
            return timed(*args, **kwargs)
        nodes.enter(path)
        try:
            return timed(*args, **kwargs)
        finally:
            nodes.exit(path)

    marked.disable = timed.disable  # type: ignore[attr-defined]
    return marked


def root(
    timed: Wrapper,
    fwd: Wrapper,
    run: Callable[[Wrapper, tuple[Any, ...], dict[str, Any]], Any],
    running: list[int],
    compiling: Callable[[], bool],
    compiled: list[bool],
) -> Wrapper:
    """The root's wrapper: one forward of the model, ``run(timed, args, kwargs)`` (the
    Recorder's bookkeeping around the root's timed call), unless one is running already
    (``running[0]``: the root called again inside its own forward is a plain timed call).
    ``compiled[0]`` is set when a compiled caller traced it."""
    active = [True]
    # One log, one stack of open calls, one step: a second thread's forward would
    # interleave its marks with this one's (a TypeError with backward=True, silently
    # wrong times without), so it is refused. Checked once per forward, not per layer.
    owner = threading.get_ident()

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
        if running[0] or not active[0]:
            return timed(*args, **kwargs)
        return run(timed, args, kwargs)

    def disable() -> None:
        active[0] = False
        timed.disable()  # type: ignore[attr-defined]

    root.disable = disable  # type: ignore[attr-defined]
    return root


def _ignore(value: Any) -> None:
    return None


def _zero_ns() -> int:
    return 0


def _nothing() -> None:
    return None
