"""Known GPUs by name: peak compute per dtype and memory bandwidth (vendor datasheets, dense).

What torch reports (``torch.cuda.get_device_name``) is matched against the
table in order, first match wins, so the more specific names come first
(``H100 NVL`` before ``H100``). Rates are dense (no structured sparsity), in
FLOP/s and bytes/s. A dtype a GPU has no figure for (V100 has no BF16 or
TF32 tensor cores) gives None, and the peak then says so rather than guess.

The device is read through :class:`DeviceQuery`, so tests give a fake one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from layerprof.pivot.sections.flops import Peak

T = 1e12
G = 1e9


@dataclass(frozen=True)
class _GpuSpec:
    """One GPU model: FP32 (CUDA cores), TF32, BF16 and FP16 tensor cores, bandwidth."""

    name: str
    fp32: float
    tf32: float | None
    bf16: float | None
    fp16: float | None
    bandwidth: float


#: (pattern on the reported name, spec); the first match wins.
_GPUS: tuple[tuple[str, _GpuSpec], ...] = (
    (r"H200 NVL", _GpuSpec("H200 NVL", 60 * T, 417.5 * T, 835.5 * T, 835.5 * T, 4.8 * T)),
    (r"H200", _GpuSpec("H200 SXM", 67 * T, 494.7 * T, 989.4 * T, 989.4 * T, 4.8 * T)),
    (r"H100 NVL", _GpuSpec("H100 NVL", 60 * T, 417.5 * T, 835.5 * T, 835.5 * T, 3.9 * T)),
    (r"H100.*PCI", _GpuSpec("H100 PCIe", 51.2 * T, 378 * T, 756 * T, 756 * T, 2.0 * T)),
    (r"H100", _GpuSpec("H100 SXM", 67 * T, 494.7 * T, 989.4 * T, 989.4 * T, 3.35 * T)),
    (r"A100.*PCI.*80|A100.*80.*PCI",
     _GpuSpec("A100 PCIe 80GB", 19.5 * T, 156 * T, 312 * T, 312 * T, 1.935 * T)),
    (r"A100.*80", _GpuSpec("A100 SXM 80GB", 19.5 * T, 156 * T, 312 * T, 312 * T, 2.039 * T)),
    (r"A100", _GpuSpec("A100 40GB", 19.5 * T, 156 * T, 312 * T, 312 * T, 1.555 * T)),
    (r"L40S", _GpuSpec("L40S", 91.6 * T, 183 * T, 362 * T, 362 * T, 864 * G)),
    (r"L40\b", _GpuSpec("L40", 90.5 * T, 90.5 * T, 181 * T, 181 * T, 864 * G)),
    (r"\bL4\b", _GpuSpec("L4", 30.3 * T, 60 * T, 121 * T, 121 * T, 300 * G)),
    (r"\bA10\b", _GpuSpec("A10", 31.2 * T, 62.5 * T, 125 * T, 125 * T, 600 * G)),
    (r"V100.*PCI", _GpuSpec("V100 PCIe", 14 * T, None, None, 112 * T, 900 * G)),
    (r"V100", _GpuSpec("V100 SXM2", 15.7 * T, None, None, 125 * T, 900 * G)),
    (r"\bT4\b", _GpuSpec("T4", 8.1 * T, None, None, 65 * T, 320 * G)),
    (r"MI300X", _GpuSpec("MI300X", 163.4 * T, 653.7 * T, 1307.4 * T, 1307.4 * T, 5.3 * T)),
    (r"MI250X", _GpuSpec("MI250X", 95.7 * T, None, 383 * T, 383 * T, 3.2768 * T)),
    (r"MI250\b", _GpuSpec("MI250", 90.5 * T, None, 362.1 * T, 362.1 * T, 3.2768 * T)),
)  # fmt: skip


class DeviceQuery(Protocol):
    """What the table needs to know about a CUDA device."""

    def name(self, device: str) -> str: ...

    def tf32(self) -> bool:
        """Whether float32 matmuls may use TF32 tensor cores."""
        ...


class _TorchCuda:
    """The device torch sees."""

    def name(self, device: str) -> str:
        import torch

        return str(torch.cuda.get_device_name(torch.device(device)))

    def tf32(self) -> bool:
        import torch

        return bool(
            torch.backends.cuda.matmul.allow_tf32
            or torch.get_float32_matmul_precision() != "highest"
        )


def find_gpu(name: str) -> _GpuSpec | None:
    for pattern, spec in _GPUS:
        if re.search(pattern, name, re.IGNORECASE):
            return spec
    return None


def gpu_peak(device: str, dtype: str, query: DeviceQuery | None = None) -> Peak:
    """The table's peak for ``device`` running ``dtype`` (rates None where unknown)."""
    q = query or _TorchCuda()
    name = q.name(device)
    spec = find_gpu(name)
    if spec is None:
        return Peak(None, None, "table", f"{name} is not in the table of known GPUs: give --peak")
    rate, unit = _rate(spec, dtype, q.tf32() if dtype == "float32" else False)
    detail = f"{name} ({spec.name}): {unit}, dense; {spec.bandwidth / T:.2f} TB/s"
    if rate is None:
        detail = f"{name} ({spec.name}): no {unit} figure in the table; give --peak"
    return Peak(rate, spec.bandwidth, "table", detail)


def _rate(spec: _GpuSpec, dtype: str, tf32: bool) -> tuple[float | None, str]:
    if dtype == "bfloat16":
        return spec.bf16, "BF16 tensor cores"
    if dtype == "float16":
        return spec.fp16, "FP16 tensor cores"
    if dtype == "float32" and tf32 and spec.tf32 is not None:
        return spec.tf32, "TF32 tensor cores"
    if dtype == "float32":
        return spec.fp32, "FP32"
    return None, dtype.upper()
