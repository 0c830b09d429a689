"""The torch internals ``--compile`` stands on, pinned: a torch upgrade that moves one
fails here, by name, before any compiled table goes wrong (docs/compile.md).

The end-to-end tests (tests/capture/compiled/test_compiled.py) pin what only a run shows: the
profiler's event names, the kernel profile, the provenance of each call site.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

from layerprof.capture.compiled import gate as compiled_gate
from layerprof.errors import UsageError
from layerprof.trace.compiled import CALL_PREFIX, REGION_PREFIXES

TORCH = Path(torch.__file__).parent


def source(relative: str) -> str:
    return (TORCH / relative).read_text()


def test_this_torch_has_every_internal() -> None:
    if compiled_gate._torch_version() < compiled_gate._MIN_TORCH:
        # an older torch is refused by its version, in one line (2.11 lacks no internal,
        # yet its compiled view put 51 % of the time on layers on a real H200)
        with pytest.raises(UsageError, match=r"--compile needs torch >= "):
            compiled_gate.check_compile_support()
        return
    assert compiled_gate.missing_internals() == []
    compiled_gate.check_compile_support()


def test_compile_fx_takes_an_inner_compile_and_config_patches() -> None:
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    params = inspect.signature(compile_fx).parameters
    assert "inner_compile" in params and "config_patches" in params
    assert params["inner_compile"].default is compile_fx_inner


def test_inner_compile_is_told_which_graphs_are_backward() -> None:
    from torch._inductor.compile_fx import _CompileFxKwargs

    assert "is_backward" in _CompileFxKwargs.__annotations__


def test_compiled_graphs_keep_their_cache_key_and_provenance() -> None:
    from torch._inductor.output_code import CompiledFxGraph

    fields = CompiledFxGraph.__dataclass_fields__
    assert "_fx_graph_cache_key" in fields and "inductor_provenance_mapping_str" in fields


def test_the_call_event_names_the_cache_key() -> None:
    text = source("_inductor/output_code.py")
    assert '"## Call CompiledFxGraph {self._fx_graph_cache_key} ##"' in text.replace('f"', '"')
    assert CALL_PREFIX == "## Call CompiledFxGraph "


def test_provenance_maps_call_sites_to_post_grad_nodes() -> None:
    import torch._inductor.config as config
    import torch._inductor.debug as debug

    assert config.trace.provenance_tracking_level in (0, 1, 2, 3)
    assert isinstance(debug._inductor_triton_kernel_to_post_grad_node_info, dict)
    assert '"cppCodeToPost"' in source("_inductor/debug.py")


def test_cpu_kernels_are_profiled_under_a_graph_prefix() -> None:
    import torch._inductor.config as config

    assert isinstance(config.cpp.enable_kernel_profile, bool)
    assert 'prefix = "graph_" + str(graph_id) + "_"' in source("_inductor/codegen/cpp.py")


def test_dynamo_names_its_regions_and_backward_graphs() -> None:
    assert REGION_PREFIXES[0] in source("_dynamo/convert_frame.py")
    assert "class CompiledFunction(torch.autograd.Function)" in source(
        "_functorch/_aot_autograd/runtime_wrappers.py"
    )  # its backward node is "CompiledFunctionBackward"


def test_backward_nodes_carry_their_forward_module_stack() -> None:
    assert "fwd_nn_module_stack" in source("_functorch/_aot_autograd/utils.py")


def test_the_autograd_cache_can_be_switched_off() -> None:
    import torch._functorch.config as config

    with config.patch(enable_autograd_cache=False):
        assert config.enable_autograd_cache is False


def test_an_older_torch_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "__version__", "2.12.1+cpu")
    with pytest.raises(UsageError) as err:
        compiled_gate.check_compile_support()
    assert str(err.value).startswith("--compile needs torch >= 2.13 (found 2.12.1+cpu)")
    assert "\n" not in str(err.value)


def test_a_missing_internal_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def gone() -> bool:
        raise ImportError("moved")

    monkeypatch.setattr(
        compiled_gate, "REQUIREMENTS", (("torch._inductor.somewhere", gone),
                                        *compiled_gate.REQUIREMENTS)
    )  # fmt: skip
    monkeypatch.setattr(compiled_gate, "_MIN_TORCH", (0, 0))  # past the version test
    with pytest.raises(UsageError) as err:
        compiled_gate.check_compile_support()
    assert "lacks torch._inductor.somewhere" in str(err.value)
