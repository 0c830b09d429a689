"""Whether the per-layer pass ran the same code as the clean latency pass.

A live run times the latency in a clean pass and the layers in a second,
instrumented one (hooks, or torch.profiler ranges). Some modules take another
code path when they are watched: ``nn.TransformerEncoderLayer`` skips torch's
fused kernel when forward hooks are attached to it, and
``nn.MultiheadAttention`` / ``nn.TransformerEncoderLayer`` run one fused
kernel instead of their submodules in inference, so those submodules
(``out_proj``, ``linear1``...) are never called. ``layerprof.capture.fastpath``
watches one clean forward without changing its path and fills these records;
findings (``layerprof.analysis.passes``) explain them. Value objects only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FusedLayer:
    """A layer that ran one of torch's fused fast-path kernels in the clean pass.

    ``op`` is the fused operator (``aten::_native_multi_head_attention``);
    ``calls`` how often it ran per forward inside this layer; ``skipped`` the
    submodules the kernel replaced (never called in the clean pass);
    ``in_layer_pass`` whether the per-layer pass took the fused path too
    (its rows then time the same code; when False they time the unfused path).
    """

    layer: str
    type: str
    op: str
    calls: int
    skipped: tuple[str, ...] = ()
    in_layer_pass: bool = True


@dataclass(frozen=True)
class PassCheck:
    """What one watched clean forward called, against the per-layer pass.

    ``fused``: layers that ran fused kernels; ``clean_only``: modules the clean
    pass called and the per-layer pass never did; ``layer_only``: the other
    way round. Either list non-empty means the per-layer rows time other code
    than the latency line.
    """

    fused: tuple[FusedLayer, ...] = ()
    clean_only: tuple[str, ...] = ()
    layer_only: tuple[str, ...] = ()

    @property
    def diverged(self) -> tuple[str, ...]:
        """Layers whose code path differs between the passes (fused ones first)."""
        fused = tuple(f.layer for f in self.fused if not f.in_layer_pass)
        return fused + tuple(p for p in (*self.clean_only, *self.layer_only) if p not in fused)
