"""Device peaks: the GPU table behind a fake device query, the CPU measurement's cache,
``--peak``; and the CUDA-only FLOP formulas, fed shapes (no GPU here)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from layerprof.capture.flops import peaks
from layerprof.capture.flops.formulas import rules
from layerprof.capture.flops.gpus import find_gpu, gpu_peak
from layerprof.capture.flops.peaks import device_peak
from layerprof.capture.options import GivenPeak, parse_peak
from layerprof.errors import UsageError
from layerprof.pivot.sections.flops import Peak
from tests.support.paths import SUPPORT

QUIET = {"cpus": 64, "load_avg": 0.0}
BUSY = {"cpus": 2, "load_avg": 7.9}


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU cache's tests on a quiet machine unless they say otherwise: a measurement
    on a busy one is measured again, and the real load must not decide a verdict."""
    monkeypatch.setattr(peaks, "host_load", lambda: dict(QUIET))


@dataclass
class FakeCuda:
    reported: str
    allow_tf32: bool = False

    def name(self, device: str) -> str:
        return self.reported

    def tf32(self) -> bool:
        return self.allow_tf32


@pytest.mark.parametrize(
    "reported,dtype,tf32,flops,bandwidth",
    [
        ("NVIDIA H100 80GB HBM3", "bfloat16", False, 989.4e12, 3.35e12),
        ("NVIDIA H100 80GB HBM3", "float32", False, 67e12, 3.35e12),
        ("NVIDIA H100 80GB HBM3", "float32", True, 494.7e12, 3.35e12),
        ("NVIDIA H100 PCIe", "float16", False, 756e12, 2.0e12),
        ("NVIDIA H100 NVL", "bfloat16", False, 835.5e12, 3.9e12),
        ("NVIDIA H200", "bfloat16", False, 989.4e12, 4.8e12),
        ("NVIDIA A100-SXM4-80GB", "bfloat16", False, 312e12, 2.039e12),
        ("NVIDIA A100-SXM4-40GB", "float32", True, 156e12, 1.555e12),
        ("NVIDIA A100 80GB PCIe", "float16", False, 312e12, 1.935e12),
        ("NVIDIA A10", "float16", False, 125e12, 600e9),
        ("NVIDIA L4", "bfloat16", False, 121e12, 300e9),
        ("NVIDIA L40S", "bfloat16", False, 362e12, 864e9),
        ("Tesla V100-SXM2-16GB", "float16", False, 125e12, 900e9),
        ("Tesla T4", "float32", True, 8.1e12, 320e9),  # no TF32 cores: FP32
        ("AMD Instinct MI300X", "bfloat16", False, 1307.4e12, 5.3e12),
    ],
)
def test_gpu_table_by_name(
    reported: str, dtype: str, tf32: bool, flops: float, bandwidth: float
) -> None:
    peak = gpu_peak("cuda:0", dtype, FakeCuda(reported, tf32))
    assert peak.flops_per_s == pytest.approx(flops)
    assert peak.bytes_per_s == pytest.approx(bandwidth)
    assert peak.source == "table" and reported in peak.detail


def test_names_that_contain_others_do_not_match_them() -> None:
    assert find_gpu("NVIDIA A10G") is None  # not an A10
    assert find_gpu("NVIDIA A100-SXM4-80GB").name == "A100 SXM 80GB"  # type: ignore[union-attr]
    assert find_gpu("NVIDIA L40").name == "L40"  # type: ignore[union-attr]


def test_unknown_gpu_and_missing_dtype_say_so() -> None:
    unknown = gpu_peak("cuda:0", "float32", FakeCuda("NVIDIA GeForce GT 710"))
    assert unknown.flops_per_s is None and "--peak" in unknown.detail
    v100_bf16 = gpu_peak("cuda:0", "bfloat16", FakeCuda("Tesla V100-SXM2-32GB"))
    assert v100_bf16.flops_per_s is None and v100_bf16.bytes_per_s == 900e9
    assert "no BF16" in v100_bf16.detail


def test_device_peak_on_cuda_uses_the_table() -> None:
    peak = device_peak("cuda:1", "float16", 4, query=FakeCuda("NVIDIA H100 80GB HBM3"))
    assert peak.flops_per_s == 989.4e12 and peak.ridge == pytest.approx(989.4 / 3.35)


@pytest.mark.parametrize(
    "text,expected",
    [("2.5T", GivenPeak(2.5e12)), ("312e12,2T", GivenPeak(312e12, 2e12)),
     (" 50 G , 10G ", GivenPeak(50e9, 10e9))],
)  # fmt: skip
def test_parse_peak(text: str, expected: GivenPeak) -> None:
    assert parse_peak(text) == expected


@pytest.mark.parametrize("text", ["", "fast", "1T,2T,3T", "-1T", "0", "1X", "inf"])
def test_parse_peak_refuses(text: str) -> None:
    with pytest.raises(UsageError, match="--peak"):
        parse_peak(text)


def test_given_peak_wins_and_fills_in_the_rest() -> None:
    def never(dtype: str, threads: int) -> Peak:
        raise AssertionError("measured although --peak gave both rates")

    both = device_peak("cpu", "float32", 2, given=GivenPeak(1e12, 1e11), measure=never)
    assert (both.flops_per_s, both.bytes_per_s, both.source) == (1e12, 1e11, "given")
    measured = Peak(5e10, 2e10, "measured", "fake")
    half = device_peak("cpu", "float32", 2, given=GivenPeak(1e12), measure=lambda d, t: measured)
    assert (half.flops_per_s, half.bytes_per_s, half.source) == (1e12, 2e10, "given")


def test_a_cpu_that_cannot_measure_gives_no_peak_and_says_why() -> None:
    def broken(dtype: str, threads: int) -> Peak:
        raise RuntimeError("addmm_impl_cpu_ not implemented for 'Half'")

    peak = device_peak("cpu", "float16", 1, measure=broken)
    assert peak.flops_per_s is None and "not implemented" in peak.detail


def test_cpu_peak_is_measured_once_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAYERPROF_CACHE_DIR", str(tmp_path))
    calls: list[tuple[str, int]] = []

    def fake_measure(dtype: str, threads: int) -> Peak:
        calls.append((dtype, threads))
        return Peak(4e10, 1e10, "measured", "fake measurement")

    monkeypatch.setattr(peaks, "measure_cpu_peak", fake_measure)
    first = peaks.cached_cpu_peak("float32", 2)
    again = peaks.cached_cpu_peak("float32", 2)
    other = peaks.cached_cpu_peak("bfloat16", 2)
    assert calls == [("float32", 2), ("bfloat16", 2)]
    assert first.source == "measured" and again.source == "cached"
    assert again.flops_per_s == 4e10 and other.bytes_per_s == 1e10
    data = json.loads((tmp_path / "peaks.json").read_text())
    assert data["schema"] == "layerprof.peaks/1" and len(data["entries"]) == 2


@pytest.mark.parametrize(
    "content",
    [b"not json", b'{"schema": "other"}', b'{"schema": "layerprof.peaks/1", "entries": 3}',
     b'{"schema": "layerprof.peaks/1", "entries": {"k": {"flops_per_s": -1, "bytes_per_s": 1}}}',
     b"x" * (peaks.MAX_CACHE_BYTES + 1)],
)  # fmt: skip
def test_a_bad_cache_file_is_measured_again(
    content: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAYERPROF_CACHE_DIR", str(tmp_path))
    (tmp_path / "peaks.json").write_bytes(content)
    monkeypatch.setattr(peaks, "measure_cpu_peak", lambda d, t: Peak(1e9, 1e9, "measured", "m"))
    assert peaks.cached_cpu_peak("float32", 1).source == "measured"


def test_an_unwritable_cache_only_means_measuring_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("LAYERPROF_CACHE_DIR", str(blocked / "sub"))  # a file in the way
    monkeypatch.setattr(peaks, "measure_cpu_peak", lambda d, t: Peak(1e9, 1e9, "measured", "m"))
    assert peaks.cached_cpu_peak("float32", 1).flops_per_s == 1e9


def test_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LAYERPROF_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(peaks.sys, "platform", "linux")
    assert peaks.cache_dir() == tmp_path / "layerprof"


def test_real_cpu_measurement_is_plausible() -> None:
    peak = peaks.measure_cpu_peak("float32", torch.get_num_threads())
    assert peak.flops_per_s is not None and 1e8 < peak.flops_per_s < 1e15
    assert peak.bytes_per_s is not None and 1e7 < peak.bytes_per_s < 1e13
    assert "matmul" in peak.detail


# ---- CUDA-only formulas, from shapes ----------------------------------------------------


def _tensor_formula(name: str) -> Any:
    rule = rules()[getattr(torch.ops.aten, name)]
    assert rule.tensor is not None
    return rule


Q = (2, 8, 128, 64)  # batch, heads, length, head dim
FULL = 2 * 2 * 8 * 128 * 128 * (64 + 64)


@pytest.mark.parametrize("causal", [False, True])
def test_cuda_attention_kernels_halve_when_causal(causal: bool) -> None:
    expected = FULL // 2 if causal else FULL
    flash = _tensor_formula("_scaled_dot_product_flash_attention")
    assert flash.tensor(Q, Q, Q, 0.0, causal, out_shape=None) == expected
    for name in ("_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"):
        rule = _tensor_formula(name)
        assert rule.tensor(Q, Q, Q, None, True, 0.0, causal, out_shape=None) == expected
    bwd = _tensor_formula("_scaled_dot_product_flash_attention_backward")
    args = (Q, Q, Q, Q, Q, (2, 8, 128), None, None, 128, 128, 0.0, causal, None, None)
    assert bwd.tensor(*args, out_shape=None) == 2 * expected
    eff_bwd = _tensor_formula("_scaled_dot_product_efficient_attention_backward")
    args = (Q, Q, Q, Q, None, Q, (2, 8, 128), None, None, 0.0, [True] * 4, causal)
    assert eff_bwd.tensor(*args, out_shape=None) == 2 * expected


def test_flash_and_efficient_kernel_ops_dense_and_varlen() -> None:
    """The kernels' own ops take (batch, length, heads, dim), or packed sequences."""
    q = torch.empty(2, 128, 8, 64, device="meta")
    flash = _tensor_formula("_flash_attention_forward")
    efficient = _tensor_formula("_efficient_attention_forward")
    assert flash.raw and efficient.raw
    for causal, expected in ((False, FULL), (True, FULL // 2)):
        assert flash.tensor(q, q, q, None, None, 128, 128, 0.0, causal, False) == expected
        mask_type = 1 if causal else 0
        args = (q, q, q, None, None, None, 128, 128, 0.0, mask_type)
        assert efficient.tensor(*args) == expected
    packed = torch.empty(128 + 64, 8, 64, device="meta")  # two sequences: 128 and 64 long
    cum = torch.tensor([0, 128, 192])
    varlen = 2 * 8 * (128 * 128 + 64 * 64) * (64 + 64)
    assert flash.tensor(packed, packed, packed, cum, cum, 128, 128, 0.0, False, False) == varlen
    grad = _tensor_formula("_flash_attention_backward")
    args = (q, q, q, q, q, None, None, None, 128, 128, 0.0, True)
    assert grad.tensor(*args) == 2 * (FULL // 2)


def test_cudnn_rnn_counts_every_layer_and_direction() -> None:
    rule = _tensor_formula("_cudnn_rnn")
    hidden, inp = 32, 16
    weights = [(4 * hidden, inp), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,)] * 2
    shapes = ((10, 3, inp), weights, 4, None, (2, 3, hidden), (2, 3, hidden), 2, hidden, 0, 1,
              False, 0.0, False, True, [], None)  # fmt: skip
    tokens = 30
    assert rule.tensor(*shapes, out_shape=None) == 2 * tokens * 2 * 4 * hidden * (inp + hidden)


def test_cli_peak_reaches_the_saved_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from layerprof.cli import main

    monkeypatch.chdir(SUPPORT)
    out = tmp_path / "p.json"
    argv = ["run", "--arch", "cli_models:Net", "--input", "2x4", "--iters", "2", "--warmup", "0",
            "--peak", "1T,100G", "--json", str(out), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    peak = json.loads(out.read_text())["flops"]["peak"]
    assert (peak["flops_per_s"], peak["bytes_per_s"], peak["source"]) == (1e12, 1e11, "given")
    assert peak["ridge"] == pytest.approx(10.0)
    assert main([*argv[:-3], "--peak", "fast"]) == 2
    assert "argument --peak: 'fast' is not a number" in capsys.readouterr().err


def test_python_api_peak_is_given_like_the_cli() -> None:
    import layerprof

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
    prof = layerprof.profile(model, torch.randn(2, 4), warmup=0, iters=2, peak="2T,50G")
    assert prof.flops is not None and prof.flops.peak is not None
    given = prof.flops.peak
    assert (given.flops_per_s, given.bytes_per_s, given.source) == (2e12, 5e10, "given")
    with pytest.raises(UsageError, match="fast"):
        layerprof.profile(model, torch.randn(2, 4), warmup=0, iters=2, peak="fast")
    assert not model[0]._forward_hooks  # refused before any hook went on


def test_a_cached_peak_below_fewer_threads_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 2-thread peak cached on a busy machine (below the 1-thread one) is not trusted:
    measured again, and the better of the two kept."""
    monkeypatch.setenv("LAYERPROF_CACHE_DIR", str(tmp_path))
    rates = iter([9e10, 3e10, 1.5e11])  # 1 thread; 2 threads while busy; 2 threads again
    monkeypatch.setattr(
        peaks, "measure_cpu_peak", lambda d, t: Peak(next(rates), 1e10, "measured", "m")
    )
    assert peaks.cached_cpu_peak("float32", 1).flops_per_s == 9e10
    assert peaks.cached_cpu_peak("float32", 2).flops_per_s == 3e10  # the busy measurement
    again = peaks.cached_cpu_peak("float32", 2)  # below 1 thread's 9e10: measured again
    assert again.source == "measured" and again.flops_per_s == 1.5e11
    assert peaks.cached_cpu_peak("float32", 2).source == "cached"


# ---- a peak measured on a busy machine does not stick (issue 43, item 7) ---------------


def _measuring(monkeypatch: pytest.MonkeyPatch, rates: list[float]) -> list[float]:
    """measure_cpu_peak replaced by one giving ``rates`` in turn; returns what it gave."""
    given: list[float] = []
    left = iter(rates)

    def fake(dtype: str, threads: int) -> Peak:
        given.append(next(left))
        return Peak(given[-1], 1e10, "measured", "fake matmul")

    monkeypatch.setattr(peaks, "measure_cpu_peak", fake)
    return given


def test_a_peak_measured_while_busy_is_measured_again_when_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """42.9 GFLOP/s measured under load no longer poisons later runs: the next run on a
    quiet machine measures again and keeps the best (124 GFLOP/s), then uses the cache."""
    monkeypatch.setenv("LAYERPROF_CACHE_DIR", str(tmp_path))
    given = _measuring(monkeypatch, [42.9e9, 124e9])
    busy = peaks.cached_cpu_peak("float32", 2, load=lambda: dict(BUSY))
    assert busy.flops_per_s == 42.9e9
    assert "measured while the machine was busy (load 7.9 on 2 CPUs)" in busy.detail
    quiet = peaks.cached_cpu_peak("float32", 2, load=lambda: dict(QUIET))
    assert (quiet.flops_per_s, quiet.source) == (124e9, "measured")
    assert "busy" not in quiet.detail and "best of 2 measurements" in quiet.detail
    again = peaks.cached_cpu_peak("float32", 2, load=lambda: dict(BUSY))
    assert (again.flops_per_s, again.source) == (124e9, "cached") and len(given) == 2


def test_a_machine_always_busy_keeps_the_best_of_three_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAYERPROF_CACHE_DIR", str(tmp_path))
    given = _measuring(monkeypatch, [50e9, 90e9, 70e9])
    seen = [peaks.cached_cpu_peak("float32", 2, load=lambda: dict(BUSY)) for _ in range(5)]
    assert len(given) == peaks.ENOUGH_MEASUREMENTS == 3  # then the cache is used
    assert [p.flops_per_s for p in seen] == [50e9, 90e9, 90e9, 90e9, 90e9]
    assert [p.source for p in seen] == ["measured"] * 3 + ["cached"] * 2
    last = seen[-1].detail
    assert "best of 3 measurements" in last and "busy (load 7.9 on 2 CPUs)" in last


def test_a_quiet_measurement_is_trusted_and_an_old_cache_entry_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A peak measured on a quiet machine is kept however busy later runs are; one from a
    cache written before busyness was recorded is measured again once, the best kept."""
    monkeypatch.setenv("LAYERPROF_CACHE_DIR", str(tmp_path))
    given = _measuring(monkeypatch, [100e9, 80e9])
    assert peaks.cached_cpu_peak("float32", 2).flops_per_s == 100e9
    assert peaks.cached_cpu_peak("float32", 2, load=lambda: dict(BUSY)).source == "cached"
    assert len(given) == 1
    key = peaks._machine_key("float32", 1)
    old = {"flops_per_s": 42.9e9, "bytes_per_s": 1e10, "detail": "old"}
    path = tmp_path / "peaks.json"
    data = json.loads(path.read_text())
    data["entries"][key] = old
    path.write_text(json.dumps(data))
    again = peaks.cached_cpu_peak("float32", 1)
    assert (again.flops_per_s, again.source) == (80e9, "measured") and len(given) == 2
    assert json.loads(path.read_text())["entries"][key]["measurements"] == 2


def test_no_load_average_counts_as_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYERPROF_CACHE_DIR", str(tmp_path))
    given = _measuring(monkeypatch, [100e9])
    for _ in range(2):
        peaks.cached_cpu_peak("float32", 2, load=dict)  # Windows: no load average
    assert len(given) == 1
