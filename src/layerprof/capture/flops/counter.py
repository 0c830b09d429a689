"""FLOPs, bytes and op time per layer, counted while the model runs, forward and backward.

A ``TorchDispatchMode`` sees every ATen operator the model runs (after
autograd, so the fused fast paths of ``nn.MultiheadAttention`` and
``nn.TransformerEncoderLayer`` show up as the one op they are). Each op is
counted by its rule (``layerprof.capture.flops.formulas``: torch's own
``torch.utils.flop_counter`` registry plus the formulas it lacks), or, when it
has none, decomposed into the ops it is made of (as ``FlopCounterMode``
does), or else recorded as *uncounted* with why: never a silent 0. Its time
(host clock, or CUDA events read after the forward) and the bytes its tensors
hold are kept either way, so each layer knows the share of its op time that
went to uncounted ops.

Ops belong to the innermost module call running (forward hooks, shared with
hooks-mode backward: ``NodeMarks``); in backward, to the call whose forward
created the autograd node being run (its sequence number), as backward times
are attributed. Numbers are inclusive: a layer holds its children's.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from layerprof.capture.flops.formulas import Rule, rules
from layerprof.capture.flops.peaks import device_peak
from layerprof.capture.modules import visible_modules
from layerprof.capture.options import GivenPeak
from layerprof.capture.platform.clocks import Clock, CudaEventClock, HostClock
from layerprof.capture.recording.nodes import NodeMarks
from layerprof.capture.step import backward_state
from layerprof.pivot.records import LayerInfo
from layerprof.pivot.sections.flops import FlopSummary, LayerFlops, UncountedOp

if TYPE_CHECKING:
    import torch

_TOP_UNCOUNTED = 10
_NO_FORMULA = "no formula"


class _Tally:
    """Counted work of one module call (or one path), forward or backward."""

    __slots__ = (
        "bytes", "counted_ns", "elementwise", "moved", "tensor", "uncounted", "uncounted_ns",
    )  # fmt: skip

    def __init__(self, tensor: int = 0, elementwise: int = 0, nbytes: int = 0) -> None:
        self.tensor = tensor
        self.elementwise = elementwise
        self.bytes = nbytes
        self.counted_ns = 0
        self.uncounted_ns = 0
        # (op, why) -> [ns, calls]; None until an uncounted op is added (most tallies have none)
        self.uncounted: dict[tuple[str, str], list[int]] | None = None
        # time in zero-FLOP ops by why ("lookup", "data movement"), to label such layers
        self.moved: dict[str, int] | None = None

    def add(self, other: _Tally) -> None:
        self.tensor += other.tensor
        self.elementwise += other.elementwise
        self.bytes += other.bytes
        self.counted_ns += other.counted_ns
        self.uncounted_ns += other.uncounted_ns
        if other.uncounted:
            for key, (ns, calls) in other.uncounted.items():
                self.note(key, ns, calls)
        if other.moved:
            for why, ns in other.moved.items():
                self.move(why, ns)

    def move(self, why: str, ns: int) -> None:
        if self.moved is None:
            self.moved = {}
        self.moved[why] = self.moved.get(why, 0) + ns

    def note(self, key: tuple[str, str], ns: int, calls: int = 1) -> None:
        if self.uncounted is None:
            self.uncounted = {}
        entry = self.uncounted.setdefault(key, [0, 0])
        entry[0] += ns
        entry[1] += calls


@dataclass(frozen=True)
class FlopCount:
    """What one counted forward (and optionally a step's backward) found, per layer path."""

    flops: dict[str, int]
    layers: dict[str, LayerFlops]
    summary: FlopSummary

    def with_backward(self, backward: FlopCount) -> FlopCount:
        """These forward numbers with the backward numbers of a counted step."""
        layers = {
            path: replace(
                info,
                backward=backward.layers[path].backward if path in backward.layers else 0,
                backward_elementwise=(
                    backward.layers[path].backward_elementwise if path in backward.layers else 0
                ),
            )
            for path, info in self.layers.items()
        }
        summary = replace(
            self.summary,
            backward=backward.summary.backward,
            backward_unattributed=backward.summary.backward_unattributed,
        )
        return FlopCount(self.flops, layers, summary)


@dataclass
class _Record:
    owner: int
    backward: bool
    name: str
    tensor: int
    elementwise: int
    bytes: int
    start: Any
    end: Any
    reason: str | None  # None: counted
    zero: str | None = None  # a zero-FLOP op: why ("lookup", "data movement")


class FlopCounter:
    """Counts while the model runs inside ``with``; :meth:`result` after.

    ``clock`` times each op (default: the host clock; a CUDA run passes a
    ``CudaEventClock``, resolved once at the end). Hooks and the dispatch
    mode are removed on exit, also when the model raises.
    """

    def __init__(self, model: torch.nn.Module, clock: Clock | None = None) -> None:
        self.model = model
        self.clock = clock or HostClock()
        self.marks = NodeMarks(model, HostClock(), process_wide=True)
        self.records: list[_Record] = []
        self.fused = 0  # > 0 inside a function counted whole (_fused_functions)
        self._mode: Any = None
        self._exits = contextlib.ExitStack()

    def __enter__(self) -> FlopCounter:
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.marks)
            self._mode = _counting_mode(self)
            stack.enter_context(self._mode)
            if _grad_mode():  # composite ops are split before the dispatch mode sees them
                stack.enter_context(_fused_functions(self))
            self._exits = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._exits.close()
        self._mode = None

    # ---- per op (called from the dispatch mode) ---------------------------------------
    def owner(self, backward: bool) -> int:
        if not backward:
            return self.marks.current()
        import torch

        node = torch._C._current_autograd_node()
        return -1 if node is None else self.marks.owner(node._sequence_nr())

    # ---- after the run ----------------------------------------------------------------
    def result(self) -> FlopCount:
        """Per path, inclusive: counted FLOPs, elementwise part, bytes, op time split."""
        times = self.clock.resolve([m for r in self.records for m in (r.start, r.end)])
        calls = self.marks.calls
        forward = [_Tally() for _ in calls]
        backward = [_Tally() for _ in calls]
        whole = {False: _Tally(), True: _Tally()}
        unattributed = 0
        for i, rec in enumerate(self.records):
            tally = _tally_of(rec, times[2 * i + 1] - times[2 * i])
            whole[rec.backward].add(tally)
            if rec.owner < 0:
                unattributed += rec.tensor + rec.elementwise if rec.backward else 0
                continue
            (backward if rec.backward else forward)[rec.owner].add(tally)
        fwd_paths = _per_path(calls, forward)
        bwd_paths = _per_path(calls, backward)
        _fill_containers(self.model, fwd_paths)
        _fill_containers(self.model, bwd_paths)
        has_backward = any(r.backward for r in self.records)
        layers = {
            path: _layer_flops(t, bwd_paths.get(path) if has_backward else None)
            for path, t in fwd_paths.items()
        }
        for path, t in bwd_paths.items():  # called in the step's forward only
            if path not in layers and has_backward:
                layers[path] = replace(
                    LayerFlops(),
                    backward=t.tensor + t.elementwise,
                    backward_elementwise=t.elementwise,
                )
        flops = {path: t.tensor + t.elementwise for path, t in fwd_paths.items()}
        return FlopCount(flops, layers, _summary(whole, has_backward, unattributed))


def _tally_of(rec: _Record, duration: int) -> _Tally:
    tally = _Tally(rec.tensor, rec.elementwise, rec.bytes)
    if rec.reason is None:
        tally.counted_ns = duration
        if rec.zero is not None:
            tally.move(rec.zero, duration)
    else:
        tally.uncounted_ns = duration
        tally.note((rec.name, rec.reason), duration)
    return tally


def _per_path(calls: list[Any], exclusive: list[_Tally]) -> dict[str, _Tally]:
    """Inclusive tallies per path: each call's subtree, summed over a path's calls
    (a call inside another call of the same path is already in it)."""
    inclusive = [_Tally() for _ in calls]
    for i in range(len(calls) - 1, -1, -1):  # a child is entered (appended) after its parent
        inclusive[i].add(exclusive[i])
        parent = calls[i].parent
        if parent >= 0:
            inclusive[parent].add(inclusive[i])
    out: dict[str, _Tally] = {}
    for i, call in enumerate(calls):
        if _nested_in_itself(calls, i):
            continue
        out.setdefault(call.path, _Tally()).add(inclusive[i])
    return out


def _nested_in_itself(calls: list[Any], i: int) -> bool:
    path, parent = calls[i].path, calls[i].parent
    while parent >= 0:
        if calls[parent].path == path:
            return True
        parent = calls[parent].parent
    return False


def _fill_containers(model: Any, tallies: dict[str, _Tally]) -> None:
    """A container that never runs (ModuleList, ModuleDict) holds its children's work,
    as its total time holds their times."""
    paths = [p for p, _ in visible_modules(model)]  # the user's paths (DDP wrappers left out)
    kids: dict[str, list[str]] = {}
    for path in paths[1:]:
        kids.setdefault(path.rsplit(".", 1)[0] if "." in path else "", []).append(path)
    for path in reversed(paths):  # children before parents
        children = [k for k in kids.get(path, []) if k in tallies]
        if path and path not in tallies and children:
            total = _Tally()
            for k in children:
                total.add(tallies[k])
            tallies[path] = total


def _layer_flops(fwd: _Tally, bwd: _Tally | None) -> LayerFlops:
    worst = max((fwd.uncounted or {}).items(), key=lambda kv: kv[1][0], default=None)
    return LayerFlops(
        elementwise=fwd.elementwise,
        bytes=fwd.bytes,
        counted_ns=fwd.counted_ns,
        uncounted_ns=fwd.uncounted_ns,
        uncounted=f"{worst[0][0]}: {worst[0][1]}" if worst is not None else None,
        label=_label(fwd),
        backward=(bwd.tensor + bwd.elementwise) if bwd is not None else None,
        backward_elementwise=bwd.elementwise if bwd is not None else None,
    )


def _label(tally: _Tally) -> str | None:
    """What a layer's counted work is when it is not tensor FLOPs: ``elementwise``, or
    for 0 FLOPs the kind of data work that took its op time (``lookup``, ``data movement``)."""
    if tally.tensor or tally.uncounted_ns > tally.counted_ns:
        return None
    if tally.elementwise:
        return "elementwise"
    if tally.moved:
        return max(tally.moved.items(), key=lambda kv: kv[1])[0]
    return None


def _summary(whole: dict[bool, _Tally], has_backward: bool, unattributed: int) -> FlopSummary:
    fwd, bwd = whole[False], whole[True]
    # one row per op; an op uncounted for several reasons shows the one costing most
    by_op: dict[str, UncountedOp] = {}
    for (name, reason), (ns, calls) in sorted(
        (fwd.uncounted or {}).items(), key=lambda kv: -kv[1][0]
    ):
        seen = by_op.get(name)
        if seen is None:
            by_op[name] = UncountedOp(name=name, time_ns=ns, calls=calls, reason=reason)
        else:
            by_op[name] = replace(seen, time_ns=seen.time_ns + ns, calls=seen.calls + calls)
    top = sorted(by_op.values(), key=lambda op: -op.time_ns)[:_TOP_UNCOUNTED]
    return FlopSummary(
        forward=fwd.tensor + fwd.elementwise,
        elementwise=fwd.elementwise,
        counted_ns=fwd.counted_ns,
        uncounted_ns=fwd.uncounted_ns,
        uncounted_ops=tuple(top),
        backward=(bwd.tensor + bwd.elementwise) if has_backward else None,
        backward_unattributed=unattributed if has_backward else None,
    )


# ---- the dispatch mode ----------------------------------------------------------------


@dataclass(frozen=True)
class _OpInfo:
    """What a counter needs to know about one operator overload, looked up once."""

    name: str
    rule: Rule | None
    view: bool

    @property
    def zero(self) -> str | None:
        """Why the op does no FLOPs, for ops that do none by nature (None otherwise)."""
        return "data movement" if self.view else (self.rule.zero if self.rule else None)


def _op_info(func: Any, table: dict[Any, Rule]) -> _OpInfo:
    packet = func._overloadpacket
    name = f"{func.namespace}.{packet.__name__}"
    return _OpInfo(name, table.get(packet), bool(getattr(func, "is_view", False)))


def _counting_mode(counter: FlopCounter) -> Any:
    """A TorchDispatchMode recording every op into ``counter`` (built here: torch is lazy)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    table = rules()
    metadata = _metadata_ops(torch)
    infos: dict[Any, _OpInfo] = {}
    in_backward = torch._C._current_graph_task_id
    mark = counter.clock.mark
    append = counter.records.append

    class CountingMode(TorchDispatchMode):  # type: ignore[misc,no-untyped-call]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            if func in metadata:
                return NotImplemented
            info = infos.get(func)
            if info is None:
                info = infos[func] = _op_info(func, table)
            if info.rule is None and not info.view:
                with self:  # a composite op: count the ops it is made of
                    out = func.decompose(*args, **kwargs)
                if out is not NotImplemented:
                    return out
            start = mark()
            out = func(*args, **kwargs)
            end = mark()
            backward = in_backward() != -1
            try:
                if counter.fused:  # part of a function already counted whole: time only
                    tensor, elementwise, reason = 0, 0, None
                else:
                    tensor, elementwise, reason = _count(info, func, args, kwargs, out)
                nbytes = _op_bytes(info, args, kwargs, out)
            except Exception as exc:  # an argument no rule foresaw: uncounted, never a crash
                tensor, elementwise, nbytes = 0, 0, 0
                reason = f"not countable: {type(exc).__name__}"
            append(
                _Record(
                    counter.owner(backward), backward, info.name, tensor, elementwise, nbytes,
                    start, end, reason, info.zero,
                )
            )  # fmt: skip
            return out

    return CountingMode()  # type: ignore[no-untyped-call]


def _grad_mode() -> bool:
    import torch

    return not torch.is_inference_mode_enabled()


def _fused_functions(counter: FlopCounter) -> Any:
    """Functions counted whole at the Python level, by the formula of their ATen op.

    In inference mode ``F.scaled_dot_product_attention`` reaches the dispatch mode
    as one op, counted as useful work (a causal mask halves it) on every backend.
    With autograd on, torch splits it before the dispatch mode sees it, and the math
    backend's parts multiply the masked half too: a ``TorchFunctionMode`` counts the
    call whole instead, and its parts only add their time.
    """
    import torch
    from torch.overrides import TorchFunctionMode

    sdpa = torch._C._nn.scaled_dot_product_attention
    packet = torch.ops.aten.scaled_dot_product_attention
    info = _OpInfo("aten.scaled_dot_product_attention", rules().get(packet), False)
    mark = counter.clock.mark

    class FusedFunctions(TorchFunctionMode):  # type: ignore[misc]
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            if func is not sdpa or counter.fused:
                return func(*args, **kwargs)
            counter.fused += 1
            try:
                out = func(*args, **kwargs)
            finally:
                counter.fused -= 1
            tensor, elementwise, reason = _count(info, None, args, kwargs, out)
            at = mark()
            counter.records.append(
                _Record(counter.owner(False), False, info.name, tensor, elementwise, 0, at, at,
                        reason)
            )  # fmt: skip
            return out

    return FusedFunctions()


def _metadata_ops(torch: Any) -> frozenset[Any]:
    """Size and stride queries: answered by the tensor, not counted (as FlopCounterMode)."""
    aten = torch.ops.aten
    names = (
        ("sym_is_contiguous", "default"), ("is_contiguous", "default"),
        ("is_contiguous", "memory_format"), ("is_strides_like_format", "default"),
        ("is_non_overlapping_and_dense", "default"), ("size", "default"),
        ("sym_size", "default"), ("stride", "default"), ("sym_stride", "default"),
        ("storage_offset", "default"), ("sym_storage_offset", "default"),
        ("numel", "default"), ("sym_numel", "default"), ("dim", "default"),
    )  # fmt: skip
    out = []
    for packet, overload in names:
        found = getattr(getattr(aten, packet, None), overload, None)
        if found is not None:
            out.append(found)
    layout = getattr(getattr(torch.ops.prim, "layout", None), "default", None)
    return frozenset([*out, *([layout] if layout is not None else [])])


def _count(
    info: _OpInfo, func: Any, args: Any, kwargs: Any, out: Any
) -> tuple[int, int, str | None]:
    """(tensor FLOPs, elementwise FLOPs, why uncounted or None)."""
    rule = info.rule
    if info.view:
        return 0, 0, None
    if rule is None:
        return 0, 0, _NO_FORMULA
    if rule.zero is not None:
        return 0, 0, None
    problem = _input_problem(args, kwargs)
    if problem is not None:
        return 0, 0, problem
    dtype = _first_dtype(args, kwargs)
    if dtype is not None and dtype.is_complex:
        return 0, 0, f"dtype {_dtype_name(dtype)} has no formula"
    if dtype is not None and not dtype.is_floating_point:
        if rule.tensor is not None:
            return 0, 0, f"dtype {_dtype_name(dtype)}: integer work, not FLOPs"
        return 0, 0, None  # elementwise integer ops: no floating-point work
    try:
        shapes = [_shape_of(a) for a in args]
        kw = {k: _shape_of(v) for k, v in kwargs.items()}
        out_shape = _shape_of(out)
        tensor = 0
        if rule.tensor is not None and rule.raw:
            tensor = _as_int(rule.tensor(*args, **kwargs, out_val=out))
        elif rule.tensor is not None:
            tensor = _as_int(rule.tensor(*shapes, out_shape=out_shape, **kw))
        elementwise = 0
        if rule.elementwise is not None:
            elementwise = _as_int(rule.elementwise(*shapes, out_shape=out_shape, **kw))
    except _Symbolic:
        return 0, 0, "symbolic shapes"
    except Exception as exc:  # a formula that does not fit these arguments
        first = str(exc).splitlines()[0][:80] if str(exc) else ""
        return 0, 0, f"formula failed: {type(exc).__name__}{': ' + first if first else ''}"
    return tensor, elementwise, None


def _shape_of(value: Any) -> Any:
    """Tensors -> their shapes, one level into lists and tuples (``Tensor[]`` arguments,
    tuple outputs); what torch's ``shape_wrapper`` does, without pytree's cost."""
    if _is_tensor(value):
        return value.shape
    if isinstance(value, (list, tuple)):
        return type(value)(v.shape if _is_tensor(v) else v for v in value)
    return value


class _Symbolic(Exception):
    """A formula produced a symbolic (not concrete) count."""


def _as_int(value: Any) -> int:
    if isinstance(value, int):
        return value
    if type(value).__name__.startswith("Sym"):
        raise _Symbolic
    try:
        return int(value)
    except Exception as exc:
        raise _Symbolic from exc


def _tensors(args: Any, kwargs: Any) -> Iterator[Any]:
    """The tensors among an op's arguments (one level of lists: Tensor[] arguments)."""
    for value in (*args, *kwargs.values()):
        if _is_tensor(value):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if _is_tensor(item):
                    yield item


def _is_tensor(value: Any) -> bool:
    # asked of the type: a nested tensor raises (not AttributeError) on .shape
    kind = type(value)
    return hasattr(kind, "dtype") and hasattr(kind, "shape") and hasattr(kind, "element_size")


def _input_problem(args: Any, kwargs: Any) -> str | None:
    for t in _tensors(args, kwargs):
        if getattr(t, "is_nested", False):
            return "nested tensor input"
        shape = _shape(t)
        if shape is None or any(not isinstance(d, int) for d in shape):
            return "symbolic shapes"
    return None


def _shape(t: Any) -> tuple[Any, ...] | None:
    try:
        return tuple(t.shape)
    except Exception:  # a tensor whose sizes cannot be read as one shape
        return None


def _first_dtype(args: Any, kwargs: Any) -> Any:
    for t in _tensors(args, kwargs):
        return t.dtype
    return None


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _nbytes(t: Any) -> int:
    try:
        return int(t.numel()) * int(t.element_size())
    except Exception:  # nested or symbolic: sizes without one number
        return 0


def _op_bytes(info: _OpInfo, args: Any, kwargs: Any, out: Any) -> int:
    """Bytes an op moves: none for a view; a lookup reads the rows it returns (not the
    whole table) and writes them; any other op reads its inputs and writes its outputs."""
    if info.view:
        return 0
    if info.rule is not None and info.rule.zero == "lookup":
        return 2 * sum(_nbytes(t) for t in _tensors(_as_tuple(out), {}))
    return _bytes(args, kwargs, out)


def _bytes(args: Any, kwargs: Any, out: Any) -> int:
    """Tensor bytes an op reads (inputs) and writes (outputs), each tensor once."""
    seen: set[int] = set()
    total = 0
    for t in (*_tensors(args, kwargs), *_tensors(_as_tuple(out), {})):
        if id(t) not in seen:
            seen.add(id(t))
            total += _nbytes(t)
    return total


def _as_tuple(out: Any) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, (list, tuple)) else (out,)


# ---- the runner's entry points ----------------------------------------------------------


def count_model(
    model: torch.nn.Module,
    forward: Callable[[], Any],
    *,
    device: str = "cpu",
    step: Callable[[], None] | None = None,
) -> FlopCount:
    """One counted forward, plus one counted training step's backward when ``step`` is
    given (``--backward``); ops timed with CUDA events on CUDA."""
    count = count_flops(model, forward, clock=_clock(device))
    if step is None:
        return count

    with backward_state(model):
        return count.with_backward(count_backward(model, step, clock=_clock(device)))


def _clock(device: str) -> Clock:
    return CudaEventClock(device) if device.startswith("cuda") else HostClock()


def flop_sections(
    layers: tuple[LayerInfo, ...],
    count: FlopCount | None,
    *,
    device: str,
    dtype: str,
    threads: int,
    given: GivenPeak | None = None,
) -> tuple[tuple[LayerInfo, ...], FlopSummary | None]:
    """The layer rows with their counted detail, and the model's summary with the
    device's peak (``layerprof.capture.flops.peaks``); unchanged when nothing was counted."""
    if count is None:
        return layers, None
    peak = device_peak(device, dtype, threads, given=given)
    rows = tuple(replace(info, flop_detail=count.layers.get(info.path)) for info in layers)
    return rows, replace(count.summary, peak=peak)


def count_flops(
    model: torch.nn.Module,
    forward: Callable[[], Any],
    *,
    clock: Clock | None = None,
) -> FlopCount:
    """Count one forward (``forward()``) of ``model``."""
    with _quiet_compiled(), FlopCounter(model, clock) as counter:
        forward()
    return counter.result()


def count_backward(
    model: torch.nn.Module,
    step: Callable[[], None],
    *,
    clock: Clock | None = None,
) -> FlopCount:
    """Count one training step (forward, loss, backward); its backward numbers are the ones kept."""
    with _quiet_compiled(), FlopCounter(model, clock) as counter:
        step()
    return counter.result()


@contextlib.contextmanager
def _quiet_compiled() -> Iterator[None]:
    """torch.compile-d submodules warn about hooks; the counting pass is not timed."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*global hooks on modules")
        yield
