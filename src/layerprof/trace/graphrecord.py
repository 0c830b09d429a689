"""What one compiled graph runs: its kernel call sites and the FX nodes they compute.

The recording backend (``layerprof.capture.compiled.backend``) builds a
:class:`GraphRecord` per graph inductor compiles; the compiled attribution
(``layerprof.trace.compiled``) reads them beside the profiled events. Value
objects and pure helpers only (no torch).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Ops that do a layer's heavy work (matmul, convolution, attention), by the op part of
# their name: ``aten::addmm``, ``mkldnn::_convolution_pointwise``, ``mkl::_mkl_linear``,
# ``aten::_scaled_dot_product_flash_attention_for_cpu`` (not ``upsample_bilinear2d``).
_COMPUTE_OP = re.compile(
    r"(?:^|::)_*(?:"
    r"\w*conv(?:olution|_transpose|_depthwise|_tbc|\d?d)\w*"  # not convert_element_type
    r"|(?:\w*_)?q?linear(?:_\w+)?"  # not upsample_bilinear2d
    r"|\w*attention\w*"
    r"|(?:add|b|baddb|addb|_int_|_scaled_|_weight_int\d+pack_)?mm(?:_\w+)?|matmul"
    r")$"
)


@dataclass(frozen=True)
class NodeInfo:
    """One post-grad FX node: where it comes from and what it costs.

    ``path`` is the module path relative to the compiled frame's ``self``
    (``""``: the frame's own code), None when the node's module stack names
    something that is not a path under it; ``type`` the module's class name;
    ``inferred``: the path came from the node's neighbours (see ``capture.compiled.backend.node_info``);
    ``stackless``: the node had no module stack at all (its path is the frame's own
    code by default, which for a backward node is a guess).
    """

    name: str
    path: str | None
    type: str | None
    op: str
    cost: float
    inferred: bool = False
    stackless: bool = False
    operand_cost: float = 0.0  # elements of its tensor inputs (see KernelSite.operands)

    @property
    def compute(self) -> bool:
        """A matmul, convolution or attention node: a kernel that runs one owns the kernel
        (what else it computes is its epilogue: a bias, a BatchNorm, an activation)."""
        return is_compute_op(self.op)


def is_compute_op(op: str) -> bool:
    return _COMPUTE_OP.search(op) is not None


@dataclass(frozen=True)
class KernelSite:
    """One kernel call in a graph's generated wrapper, in call order.

    ``event`` is the name the profiler shows for it (``aten::addmm`` for
    ``extern_kernels.addmm``; the kernel's own name otherwise, without the
    ``graph_<id>_`` prefix CPU kernels get); ``nodes`` the nodes it is credited with.
    ``operands``: matmul/convolution nodes that an extern call computes and that this
    generated kernel also lists: it lays out their operands (a convolution's weight
    in channels-last order, fused with the previous layer's BatchNorm and ReLU), work
    that is theirs and weighs by the operands' elements.
    """

    kernel: str
    event: str
    extern: bool
    nodes: tuple[str, ...]
    operands: tuple[str, ...] = ()


@dataclass(frozen=True)
class GraphRecord:
    key: str | None
    compile_id: str
    phase: str  # "forward" | "backward"
    sites: tuple[KernelSite, ...]
    nodes: Mapping[str, NodeInfo]
    compile_ns: int = 0

    def site_events(self) -> tuple[str, ...]:
        return tuple(s.event for s in self.sites)


def common_ancestor(paths: Sequence[str]) -> str:
    """The deepest module path that is (or is an ancestor of) every path."""
    shared: list[str] = []
    for level in zip(*(p.split(".") if p else [] for p in paths), strict=False):
        if any(part != level[0] for part in level):
            break
        shared.append(level[0])
    return ".".join(shared)
