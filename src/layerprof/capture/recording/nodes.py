"""Graph-node marks: each layer's backward from hooks on the autograd nodes its forward made.

Forward pre/post hooks give every module call the range of autograd sequence
numbers its ops took (``torch.autograd._get_sequence_nr`` at entry and exit:
numbers are handed out per thread, in creation order). Before a backward (or,
in a training loop, right after each forward) the graph is walked from its
roots, and every node created inside a recorded call gets a pre-hook and a
post-hook (``Node.register_prehook`` / ``register_hook``) that mark when it
starts and ends; the innermost call whose range holds the node's sequence
number owns it. A call's backward runs from the first of its subtree's nodes to
start to the last to end. One implementation for ``profile_backward``
(layerprof.capture.hooks.backward), the training loop's Recorder and the FLOP
counter's backward.

Why the intervals nest: the CPU autograd engine runs ready nodes highest
sequence number first, and running a node only makes older (lower-numbered)
nodes ready, so the nodes of one call run as one block and a child's block
lies inside its parent's. Intervals are nested by containment
(``nest_intervals``: a child that ends after its parent extends the parent),
so per iteration ``total == self + sum(children)`` and ``self >= 0`` hold
exactly. Marks are resolved in one batch (``take``/``take_forwards``): with
CUDA events, one synchronize per step, never one per layer.

Reentrant activation checkpointing (``checkpoint(..., use_reentrant=True)``) runs
the block's forward under ``no_grad``: its calls make no graph node, and the
graph holds one ``CheckpointFunctionBackward`` node, owned by the block's
caller. In backward that node runs the block's forward again with grad enabled,
then a backward of its own over the nodes the recompute made, which no hook
saw: the block and its layers read 0 and the caller (the root) got their time.
A module call that starts inside a running graph node is such a recompute
(``_begin_recompute``): it nests under the call that owns the running node, in
that call's forward, and when its outermost call returns, the graph its output
holds is hooked before the inner backward runs it. The block's backward then
runs from the start of its recompute (which it pays for) to its last node.
Non-reentrant checkpointing recomputes in a saved-tensor hook and stops early
by raising: nothing of that recompute is hooked (its nodes are never run), and
the nodes its forward made were hooked after the forward as usual.
"""

from __future__ import annotations

import bisect
import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from layerprof.capture.compilewatch import dynamo_compiling
from layerprof.capture.modules import HookHandles, compiled_in_place, hookable_modules
from layerprof.capture.platform.clocks import Clock
from layerprof.pivot.records import LayerCall

if TYPE_CHECKING:
    import torch


#: The sequence number of a leaf's ``AccumulateGrad`` node (UINT64_MAX): made outside any
#: forward, shared by every graph that reaches the leaf.
SHARED_SEQ = (1 << 64) - 1


class NodeHooksUnavailable(Exception):
    """This torch or this graph does not take node hooks: use ops mode instead."""


@dataclass
class _Call:
    """One module call of the current iteration: its range of sequence numbers and
    the marks of its first node to start and its last node to end in backward."""

    path: str
    parent: int
    first: int
    end: int = -1
    start_mark: Any = None
    end_mark: Any = None
    # the outermost call of a recompute (reentrant checkpointing): when it started,
    # the start of its backward when its nodes ran
    recompute_mark: Any = None
    forward: int = 0  # which forward of the step made it (a training loop's Recorder)
    top: int = -1  # the outermost call this one lies in (itself when outermost)


class NodeMarks:
    """Forward hooks that give each module call its sequence-number range, and the
    node hooks that time the graph nodes created in each call (module docstring)."""

    def __init__(
        self,
        model: torch.nn.Module,
        clock: Clock,
        *,
        process_wide: bool = False,
        on_backward: Callable[[], None] | None = None,
    ) -> None:
        self.model = model
        self.clock = clock
        # process-wide module hooks: torch's fast-path checks (TransformerEncoderLayer
        # refuses its fused kernel when a module carries hooks) do not see them, so the
        # model runs the code its clean forward runs (the FLOP counter uses this)
        self.process_wide = process_wide
        # True only while Dynamo traces a hook into a compiled caller's graph (the
        # Recorder's model run by torch.compile(model)): a hook that read the sequence
        # number there broke the graph (layerprof.capture.compilewatch)
        self._compiling = dynamo_compiling()
        self.calls: list[_Call] = []
        self.failed: str | None = None  # innermost layer a forward raised in
        self._stack: list[int] = []
        self._running: list[int] = []  # owners of nodes started and not finished
        self._hooks = HookHandles()
        self._next_seq = next_sequence_nr()
        self._firsts: list[int] = []
        # called when the first hooked node of a backward pass starts (the loop's
        # step anatomy); ``backward_done`` re-arms it when that pass ends
        self.on_backward = on_backward
        self._in_backward = False
        self.forward = 0  # the forward that calls made now belong to
        # paths compiled in place (m.compile()): no module hooks, marked by enter/exit
        self.outside: set[str] = set()
        self._generation = 0  # bumped by take(): hooks on older graphs fall silent
        # open recomputes: the stack's length with the owner pushed, the forward to put
        # back, and the mark of the recompute's start
        self._recomputing: list[tuple[int, int, Any]] = []
        # leaves' AccumulateGrad nodes hooked in this generation, by id (kept, so an id
        # is not reused): such a node is shared by every graph that reaches the leaf
        self._shared: dict[int, Any] = {}
        self._top = -1  # the outermost call of the last node to start (a shared node's owner)

    def __enter__(self) -> NodeMarks:
        if self.process_wide:
            return self._enter_process_wide()
        with self._hooks.registering() as hooks:
            for path, module in hookable_modules(self.model):
                if compiled_in_place(module):
                    # m.compile(): dynamo traces the module's hooks, and reading the
                    # sequence number in one breaks its graph (3 breaks in 3 steps);
                    # the Recorder's wrapper, outside the compiled call, marks it instead
                    self.outside.add(path)
                    continue
                hooks.add(module.register_forward_pre_hook(functools.partial(self._enter, path)))
                hooks.add(
                    module.register_forward_hook(
                        functools.partial(self._exit, path), always_call=True
                    )
                )
        return self

    def _enter_process_wide(self) -> NodeMarks:
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        paths = {id(m): p for p, m in hookable_modules(self.model)}

        def pre(module: Any, args: Any) -> None:
            path = paths.get(id(module))
            if path is not None:
                self._enter(path, module, args)

        def post(module: Any, args: Any, output: Any) -> None:
            path = paths.get(id(module))
            if path is not None:
                self._exit(path, module, args, output)

        with self._hooks.registering() as hooks:
            hooks.add(register_module_forward_pre_hook(pre))
            hooks.add(register_module_forward_hook(post, always_call=True))
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.remove()

    def enter(self, path: str) -> None:
        """A call of ``path`` starts (for modules marked from outside their call)."""
        self._enter(path, None, None)

    def exit(self, path: str) -> None:
        """The call of ``path`` ended (returned or raised)."""
        self._exit(path, None, None, None)

    def _enter(self, path: str, module: Any, args: Any) -> None:
        if self._compiling():
            return
        if not self._stack and self._running and _inside_graph_node():
            self._begin_recompute()
        parent = self._stack[-1] if self._stack else -1
        here = len(self.calls)
        top = self.calls[parent].top if parent >= 0 else here
        first = self._next_seq()
        self.calls.append(_Call(path, parent, first, forward=self.forward, top=top))
        self._firsts.append(first)
        self._stack.append(here)

    def _exit(self, path: str, module: Any, args: Any, output: Any) -> None:
        if self._compiling():
            return
        # always_call: also runs when the forward raised; the innermost unwinds first
        if self.failed is None and sys.exc_info()[0] is not None:
            self.failed = path
        floor = self._recomputing[-1][0] if self._recomputing else 0
        index = -1
        while len(self._stack) > floor:  # a recompute never closes its owner
            index = self._stack.pop()
            call = self.calls[index]
            call.end = self._next_seq()
            if call.path == path:
                break
        if self._recomputing and len(self._stack) == floor and index >= 0:
            self._end_recompute(index, output)

    def _begin_recompute(self) -> None:
        """A module call starts inside a running graph node: checkpointing runs a block's
        forward again (module docstring). The node's owner stands in as its caller."""
        owner = self._running[-1]
        mark = self.clock.mark()
        self._stack.append(owner)
        self._recomputing.append((len(self._stack), self.forward, mark))
        self.forward = self.calls[owner].forward

    def _end_recompute(self, index: int, output: Any) -> None:
        """The recompute's outermost call (``index``) ended: hook the graph its output
        holds, which a reentrant checkpoint's backward runs next (an early-stopped,
        non-reentrant recompute raised: no output)."""
        _, self.forward, mark = self._recomputing.pop()
        self._stack.pop()  # the owner
        self.calls[index].recompute_mark = mark
        if output is not None and sys.exc_info()[0] is None:
            self.hook_graph(output, index)

    # ---- backward ----------------------------------------------------------------
    def hook_graph(self, loss: Any, since: int = 0) -> int:
        """Pre- and post-hook every node that a recorded call created; returns how many.

        ``loss`` is a tensor or any nest of tensors (a model's outputs); only the
        calls from index ``since`` on are looked for (a training loop hooks each
        forward's graph once, after that forward). The hooks live on this
        iteration's graph, which autograd frees after ``backward()``: nothing
        stays behind on the model.
        """
        roots = [t.grad_fn for t in _tensors(loss) if getattr(t, "grad_fn", None) is not None]
        if len(self.calls) <= since or not roots:
            return 0
        firsts = self._call_firsts()  # kept as calls are made: a step of 16k forwards
        lowest = firsts[since]
        seen: set[Any] = set()
        todo = roots
        hooked = 0
        gen = self._generation
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            seq = node._sequence_nr()
            if seq < lowest:
                continue  # made before the forward: so is everything behind it
            owner = self._owner(seq, firsts, since)
            if owner >= 0:
                hooked += self._hook_node(node, seq, owner, gen)
            todo.extend(fn for fn, _ in node.next_functions)
        return hooked

    def _hook_node(self, node: Any, seq: int, owner: int, gen: int) -> int:
        """Pre- and post-hook ``node`` for ``owner``; returns 1 when hooked.

        A leaf's ``AccumulateGrad`` node (sequence number ``SHARED_SEQ``) is shared by
        every graph that reaches the leaf while an earlier graph still holds it (a loss
        kept past its backward: accumulation without ``del loss``, LBFGS's first loss).
        Hooked once per forward, it carried one owner per forward, and every later
        backward extended each earlier forward's root to its own end (root backward
        16.6 us in a step whose backward was 4 us). It is hooked once per step instead,
        and owned by the outermost call whose node started last: the forward whose
        backward is running."""
        if seq == SHARED_SEQ:
            if id(node) in self._shared:
                return 0
            self._shared[id(node)] = node
            start: Any = functools.partial(self._shared_start, gen)
            end: Any = functools.partial(self._shared_end, gen)
        else:
            start = functools.partial(self._node_start, gen, owner)
            end = functools.partial(self._node_end, gen, owner)
        try:
            node.register_prehook(start)
            node.register_hook(end)
        except (RuntimeError, TypeError, AttributeError) as exc:
            raise NodeHooksUnavailable(f"{node.name()}: {exc}") from exc
        return 1

    def current(self) -> int:
        """The innermost module call running forward now (-1: none)."""
        return self._stack[-1] if self._stack else -1

    def owner(self, seq: int) -> int:
        """The innermost recorded call whose forward created the graph node numbered ``seq``
        (-1: none, e.g. gradient accumulation or the loss); for the FLOP counter's backward."""
        firsts = self._call_firsts()
        if not firsts or seq < firsts[0]:
            return -1
        return self._owner(seq, firsts)

    def _call_firsts(self) -> list[int]:
        """Each call's first sequence number (``_enter`` appends them; rebuilt when a
        caller set ``calls`` itself)."""
        if len(self._firsts) != len(self.calls):
            self._firsts = [c.first for c in self.calls]
        return self._firsts

    def _owner(self, seq: int, firsts: list[int], lo: int = 0) -> int:
        """The innermost call whose sequence range holds ``seq`` (-1: none). A call still
        open (``end`` -1) holds every number from its first on: the root's forward hook
        closes it only after its output's graph was hooked, so the nodes of the root's
        own code (a loss computed inside ``forward``, a final op) were owned by no call,
        and their backward fell outside the step's backward."""
        # from ``lo`` on: a recompute in a device's autograd thread numbers its calls
        # and nodes with that thread's counter, below the forward's
        k = bisect.bisect_right(firsts, seq, lo) - 1
        while k >= 0 and not (seq < self.calls[k].end or self.calls[k].end < 0):
            k = self.calls[k].parent
        return k

    def _node_start(self, gen: int, owner: int, grad_outputs: Any) -> None:
        if gen != self._generation:
            return  # a graph of an earlier step, run after its step ended
        if self.on_backward is not None and not self._in_backward:
            self._in_backward = True
            self.on_backward()
        mark = self.clock.mark()
        call = self.calls[owner]
        if call.start_mark is None:
            call.start_mark = mark
        self._top = call.top
        self._running.append(owner)

    def _node_end(self, gen: int, owner: int, grad_inputs: Any, grad_outputs: Any) -> None:
        if gen != self._generation:
            return
        self.calls[owner].end_mark = self.clock.mark()
        if self._running:
            self._running.pop()

    def _shared_start(self, gen: int, grad_outputs: Any) -> None:
        if gen == self._generation and self._top >= 0:
            self._node_start(gen, self._top, grad_outputs)

    def _shared_end(self, gen: int, grad_inputs: Any, grad_outputs: Any) -> None:
        if gen == self._generation and self._top >= 0:
            self._node_end(gen, self._top, grad_inputs, grad_outputs)

    def failing_path(self) -> str | None:
        """The innermost layer the last step failed in: forward, else backward node."""
        if self.failed is not None:
            return self.failed
        return self.calls[self._running[-1]].path if self._running else None

    def backward_done(self) -> None:
        """The backward pass that ``on_backward`` announced has ended."""
        self._in_backward = False

    def take(self, iteration: int) -> tuple[list[LayerCall], set[str]]:
        """This iteration's backward calls (parents before children) and the paths
        that ran forward; resets for the next iteration."""
        calls, ran = self.calls, {c.path for c in self.calls}
        hull = self._hulls()
        spans = [(c.path, h[0], h[1]) for c, h in zip(calls, hull, strict=True) if h is not None]
        self._reset()
        return nest_intervals(spans, iteration), ran

    def take_forwards(self) -> dict[int, list[LayerCall]]:
        """Per forward of the step that got a backward: its backward calls, nested
        (iteration = the forward's number); resets for the next step."""
        by_forward: dict[int, list[tuple[str, int, int]]] = {}
        for c, h in zip(self.calls, self._hulls(), strict=True):
            if h is not None:
                by_forward.setdefault(c.forward, []).append((c.path, h[0], h[1]))
        self._reset()
        return {f: nest_intervals(spans, f) for f, spans in by_forward.items()}

    def _hulls(self) -> list[tuple[int, int] | None]:
        """Per call: first start to last end of its subtree's nodes (None: none ran).

        One ``resolve`` for the whole batch: on CUDA one synchronize per step."""
        calls = self.calls
        timed = [i for i, c in enumerate(calls) if c.start_mark is not None]
        again = [i for i, c in enumerate(calls) if c.recompute_mark is not None]
        times = self.clock.resolve(
            [m for i in timed for m in (calls[i].start_mark, calls[i].end_mark)]
            + [calls[i].recompute_mark for i in again]
        )
        hull: list[tuple[int, int] | None] = [None] * len(calls)
        for k, i in enumerate(timed):
            hull[i] = (times[2 * k], times[2 * k + 1])
        recomputed = dict(zip(again, times[2 * len(timed) :], strict=True))
        for i in range(len(calls) - 1, -1, -1):  # children after parents: fold upwards
            p, own = calls[i].parent, hull[i]
            if own is not None and i in recomputed:  # its backward pays for its recompute
                own = hull[i] = (min(own[0], recomputed[i]), own[1])
            if p >= 0 and own is not None:
                up = hull[p]
                hull[p] = own if up is None else (min(up[0], own[0]), max(up[1], own[1]))
        return hull

    def _reset(self) -> None:
        self.calls, self._stack, self._running, self.failed = [], [], [], None
        if self._recomputing:  # a backward that raised inside a recompute
            self.forward = self._recomputing[0][1]
            self._recomputing = []
        self._firsts = []
        self._shared, self._top = {}, -1
        self._generation += 1
        self._in_backward = False  # a backward that raised never ran its end callback


def _inside_graph_node() -> bool:
    """Whether this thread runs a graph node now (autograd's current node)."""
    import torch

    current = getattr(torch._C, "_current_autograd_node", None)
    return current is not None and current() is not None


def _tensors(value: Any) -> list[Any]:
    """The tensors in a nest of tuples, lists and dicts (a model's outputs)."""
    import torch

    out: list[Any] = []
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            todo.extend(v)
        elif isinstance(v, dict):
            todo.extend(v.values())
    return out


def next_sequence_nr() -> Callable[[], int]:
    """torch's per-thread autograd sequence counter (the number the next node gets)."""
    import torch

    peek = getattr(torch.autograd, "_get_sequence_nr", None)
    node = getattr(torch.autograd.graph, "Node", None)
    if peek is None or not hasattr(node, "register_prehook"):
        raise NodeHooksUnavailable(f"torch {torch.__version__} has no graph-node hooks")
    return cast(Callable[[], int], peek)


def nest_intervals(spans: Sequence[tuple[str, int, int]], iteration: int) -> list[LayerCall]:
    """Containment nesting; a child ending after its parent extends the parent (and up).

    Spans that coincide nest in the order given (give parents first).
    """
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
