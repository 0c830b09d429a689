"""The ``compiled`` section: how a ``torch.compile``-d run's time was attributed to layers.

``layerprof run --compile`` (``layerprof.capture.compiled.run``) compiles the model
through inductor, profiles it, and puts each layer's share of the compiled
kernels' time in the usual per-layer rows. This section says how far those
rows can be trusted: which graphs ran, the graph breaks and recompiles, the
split rule for fused kernels, how much of the measured forward the kernels
cover, and every kernel with the module paths its time went to.

Value objects only (no torch). Times are integer nanoseconds per forward:
the means over the profiled iterations, so that the coverage parts add up to
the forward exactly (the layer rows keep their own per-iteration samples).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: How a kernel whose nodes belong to several module paths is split among them.
SPLIT_RULES = ("cost", "lca", "equal")
PHASES = ("forward", "backward")
_HOOK_DICT = re.compile(r"\._(?:forward|backward)(?:_pre)?_hooks\b")


@dataclass(frozen=True)
class CompiledGraph:
    """One compiled graph that ran in the profiled forwards.

    ``key`` is inductor's FX-graph cache key (None when the cache was bypassed);
    ``compile_id`` is Dynamo's ``frame/recompile`` id (``1/0``); ``frame`` the
    function it compiled; ``calls`` its calls per forward; ``sites`` the
    kernel call sites inductor generated for it.
    """

    key: str | None
    compile_id: str
    frame: str
    phase: str  # "forward" | "backward"
    sites: int
    calls: float
    kernel_ns: int


@dataclass(frozen=True)
class GraphBreak:
    reason: str  # the first line of Dynamo's message
    count: int


@dataclass(frozen=True)
class Recompile:
    compile_id: str
    frame: str
    reason: str  # the first line of Dynamo's recompile reason

    @property
    def autograd_switch(self) -> bool:
        """The guard that failed is autograd's state: grad mode itself, or an input's
        autograd dispatch key (inference mode off). A ``--backward`` run causes both:
        its forwards are timed without autograd, its backward pass needs it."""
        r = self.reason
        return "grad_mode" in r or ("dispatch key set mismatch" in r and "Autograd" in r)

    @property
    def hook_guard(self) -> bool:
        """The guard that failed is a module's hook dict (``not module._forward_hooks``,
        torch >= 2.14): hooks were added or removed after the module compiled, which
        no input shape explains."""
        return _HOOK_DICT.search(self.reason) is not None


@dataclass(frozen=True)
class Coverage:
    """Where one measured compiled forward went (means per forward, ns).

    ``forward_ns`` = ``attributed_ns`` + ``overhead_ns`` + ``outside_ns``.
    ``region_ns`` is the time inside compiled regions; of it, ``attributed_ns``
    went to module paths through kernel events and ``shared_ns`` of that was
    split by the rule (an estimate). ``overhead_ns`` is the compiled regions'
    time outside kernels (wrappers, allocations, guards, and ``unmatched_ns``
    of kernel events no call site explained); ``outside_ns`` ran outside any
    compiled region.
    """

    forward_ns: int
    region_ns: int
    attributed_ns: int
    shared_ns: int
    overhead_ns: int
    outside_ns: int
    unmatched_ns: int = 0

    @property
    def attributed_share(self) -> float:
        """Share of the compiled regions' time attributed to module paths."""
        return self.attributed_ns / self.region_ns if self.region_ns > 0 else 0.0


@dataclass(frozen=True)
class KernelShare:
    path: str
    share: float


@dataclass(frozen=True)
class CompiledKernel:
    """One kernel (an event name) summed over its call sites, per forward.

    ``extern`` kernels (aten matmul, convolution, attention, mkl linear) go
    exactly to their op's module path; generated (fused) kernels go to the
    paths of the graph nodes they compute; ``estimated`` says the time was
    split among several paths by the rule.
    """

    name: str
    extern: bool
    phase: str
    calls: float
    time_ns: int
    estimated: bool
    split: tuple[KernelShare, ...]


@dataclass(frozen=True)
class PathTime:
    """One module path's compiled time per forward, and how much of it is an estimate."""

    path: str
    exact_ns: int
    estimated_ns: int
    phase: str = "forward"

    @property
    def estimated_share(self) -> float:
        total = self.exact_ns + self.estimated_ns
        return self.estimated_ns / total if total > 0 else 0.0


@dataclass(frozen=True)
class UnmatchedKernel:
    """Kernel events inside a compiled graph's call that no call site explained."""

    name: str
    calls: float
    time_ns: int


@dataclass(frozen=True)
class CompiledSection:
    """How a compiled run was profiled and how its time was attributed.

    ``regions`` are the module paths that were compiled (``""``: the whole
    model); ``recompiled`` says the model came already compiled and layerprof
    compiled it again with its own backend. ``device_time`` says the kernel
    times are GPU durations (CUDA), not host times. ``compile_ns`` is what
    compiling cost (on the first calls), apart from the steady-state latency.
    """

    torch: str
    mode: str
    dynamic: bool | None
    split: str
    regions: tuple[str, ...]
    recompiled: bool
    device_time: bool
    compile_ns: int
    iterations: int
    graphs: tuple[CompiledGraph, ...]
    breaks: tuple[GraphBreak, ...]
    recompiles: tuple[Recompile, ...]
    coverage: Coverage
    backward: Coverage | None
    kernels: tuple[CompiledKernel, ...]
    paths: tuple[PathTime, ...]
    unmatched: tuple[UnmatchedKernel, ...] = ()

    def estimated_share(self, path: str, phase: str = "forward") -> float:
        """Share of a path's compiled time that the split rule estimated (0 when exact)."""
        for p in self.paths:
            if p.path == path and p.phase == phase:
                return p.estimated_share
        return 0.0
