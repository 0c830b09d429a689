"""Replay and capture traces of a CUDA graph, made from code (Kineto JSON dicts).

A capture trace holds, between ``cudaStreamBeginCapture`` and ``cudaStreamEndCapture``,
one launch call per kernel under the module spans and ops that made it, its kernel
named in ``args.kernel`` (as ROCm writes it) and never run; a replay trace holds one
``cudaGraphLaunch`` whose correlation every replayed kernel carries, under a step
annotation. Times are µs from an epoch-scale base, as Kineto writes them.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

BASE_US = 1_700_000_000_000_000.0
#: (module, op, kernel) per launch of a tiny decoder layer, in call order
LAYER = (
    ("RMSNorm", "aten::rms_norm", "rms_kernel"),
    ("Linear_q", "aten::mm", "gemm_q"),
    ("Attention", "attn::decode", "attn_kernel"),
    ("Linear_o", "aten::mm", "gemm_o"),
    ("MLP", "aten::mm", "gemm_up"),
    ("MLP", "aten::silu", "silu_kernel"),
    ("MLP", "aten::mm", "gemm_down"),
)


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def capture_events(
    layers: int = 2,
    *,
    prefix: str = "",
    batch: int = 8,
    base: float = BASE_US,
    corr0: int = 100,
    shapes: bool = False,
) -> list[dict[str, Any]]:
    """A capture of ``layers`` decoder layers: modules ``Decoder_0 > Layer_k > X_k``,
    each kernel's launch under its op; ``prefix`` renames every kernel (another model);
    ``shapes``: each ``aten::mm`` records its inputs, ``[batch, 64] x [64, 64]``."""
    events = [_x("user_annotation", f"capture_{batch}_FULL", base, 10_000.0)]
    events.append(_x("cuda_runtime", "cudaStreamBeginCapture", base + 1, 1.0, correlation=1))
    t = base + 10
    corr = corr0
    start = t
    body: list[dict[str, Any]] = []
    for k in range(layers):
        layer_start = t
        for module, op, kernel in LAYER:
            body.append(_x("python_function", f"nn.Module: {module}_{k}", t, 8.0))
            dims = {"Input Dims": [[batch, 64], [64, 64]]} if shapes and op == "aten::mm" else {}
            body.append(_x("cpu_op", op, t + 1, 6.0, **{"External id": corr}, **dims))
            body.append(
                _x("cuda_runtime", "cudaLaunchKernel", t + 2, 3.0, correlation=corr,
                   kernel=prefix + kernel, **{"External id": corr})
            )  # fmt: skip
            corr += 1
            t += 10
        body.append(
            _x("python_function", f"nn.Module: Layer_{k}", layer_start - 0.5, t - layer_start)
        )
    events.append(_x("python_function", "nn.Module: Decoder_0", start - 1, t - start + 2))
    events += body
    events.append(_x("cuda_runtime", "cudaStreamEndCapture", t + 5, 1.0, correlation=2))
    return events


def replay_events(
    layers: int = 2,
    *,
    drop: int | None = None,
    extra: str | None = None,
    batch: int | None = 8,
    base: float = BASE_US + 1e6,
    kernel_us: float = 20.0,
    corr: int = 9000,
) -> list[dict[str, Any]]:
    """One graph launch replaying ``layers`` decoder layers' kernels, ``kernel_us`` each
    (gemm_up 3x as long); ``drop``: leave out the kernel at that index; ``extra``: add a
    kernel of that name after the first."""
    name = f"execute_{batch}_context_0" if batch is not None else "replay_step"
    events = [_x("user_annotation", name, base, 5_000.0)]
    events.append(_x("cuda_runtime", "cudaGraphLaunch", base + 10, 20.0, correlation=corr))
    kernels = [kernel for _ in range(layers) for _, _, kernel in LAYER]
    if drop is not None:
        del kernels[drop]
    if extra is not None:
        kernels.insert(1, extra)
    t = base + 100
    for kernel in kernels:
        dur = kernel_us * (3 if kernel == "gemm_up" else 1)
        events.append(
            {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": t, "dur": dur,
             "args": {"device": 0, "stream": 7, "correlation": corr}}
        )  # fmt: skip
        t += dur + 1
    return events


def write_trace(path: Path, events: list[dict[str, Any]], *, cut: int | None = None) -> Path:
    """A ``.json.gz`` Kineto trace of ``events``; ``cut``: keep only that many bytes of
    the JSON (a truncated file)."""
    text = json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()
    path.write_bytes(gzip.compress(text[:cut] if cut is not None else text))
    return path


def two_launch_replay(base: float = BASE_US + 1e6) -> list[dict[str, Any]]:
    """A replay with two graph launches: the decoder's graph, then a graph of kernels
    that no capture recorded (``sampler_kernel`` x3)."""
    events = replay_events(base=base)
    events.append(_x("cuda_runtime", "cudaGraphLaunch", base + 3000, 20.0, correlation=9001))
    for i in range(3):
        events.append(
            {"ph": "X", "cat": "kernel", "name": "sampler_kernel", "pid": 0, "tid": 7,
             "ts": base + 3100 + 30 * i, "dur": 25.0,
             "args": {"device": 0, "stream": 7, "correlation": 9001}}
        )  # fmt: skip
    return events
