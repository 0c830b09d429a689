"""Activation memory per layer: exact saved-for-backward bytes on real models built here,
the tree adding up, parameters/gradients/optimizer state per layer, the allocator's peak
per phase with a fake counter, the JSON, the run, and the relation to PyTorch's MemTracker.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from layerprof.capture.memory.activations import ActivationCapture, measure_step
from layerprof.pivot.sections.memory import ActivationMemory
from tests.support.fake_allocator import FakeAllocator

F32 = 4


def nbytes(*shape: int) -> int:
    n = F32
    for s in shape:
        n *= s
    return n


def check_tree(section: ActivationMemory) -> None:
    """total == self + sum(children totals) for every layer and every kind."""
    totals = {t.path: t for t in section.totals()}
    for t in totals.values():
        kids = [k for k in totals.values() if k.parent == t.path and k.path != t.path]
        assert t.activations == t.activations_self + sum(k.activations for k in kids), t.path
        own = next(r for r in section.rows if r.path == t.path)
        assert t.params == own.params_self + sum(k.params for k in kids), t.path
    assert totals[""].activations + section.outside_bytes == section.saved_bytes


class ResBlock(nn.Module):
    """A ResNet basic block: in-place ReLUs and an in-place residual add."""

    def __init__(self, c: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x
        return self.relu(out)


class Scaled(nn.Module):
    """``x * x * weight * buffer``: x saved twice, a parameter and a buffer saved too."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(6))
        self.register_buffer("shift", torch.ones(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * x) * self.weight * self.shift


def mlp() -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)
    )


def grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


# ---- analytic counts ----------------------------------------------------------------------


def test_linear_and_gelu_save_their_inputs_and_weights_are_not_activations() -> None:
    torch.manual_seed(0)
    model, x = mlp(), torch.randn(5, 8)
    section = measure_step(model, (x,), {})
    own = {r.path: r.activations_self for r in section.rows}
    assert own == {
        "": 0,
        "0": nbytes(5, 8),  # the input x
        "1": nbytes(5, 16),  # GELU's input
        "2": nbytes(5, 16),  # GELU's output, the next Linear's input
        "3": nbytes(5, 32),
        "4": nbytes(5, 32),
    }
    assert section.total("").activations == sum(own.values())  # a Sequential: its children
    assert section.outside_bytes == 0 and section.forwards == 1
    check_tree(section)


def test_relu_saves_its_output_and_the_first_saver_keeps_a_storage() -> None:
    model, x = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)), torch.randn(3, 8)
    own = {r.path: r.activations_self for r in measure_step(model, (x,), {}).rows}
    # the ReLU saves its output; the Linear after it saves the same storage: not again
    assert own == {"": 0, "0": nbytes(3, 8), "1": nbytes(3, 16), "2": 0}


def test_a_storage_saved_twice_counts_once_and_parameters_and_buffers_not_at_all() -> None:
    model, x = Scaled(), torch.randn(2, 6, requires_grad=True)
    section = measure_step(model, (x,), {})
    # x (saved twice by x*x) and x*x (saved by the mul with the weight); never the weight
    # nor the buffer (the last mul saves the buffer only: it needs no grad itself)
    assert section.total("").activations == 2 * nbytes(2, 6)


def test_a_view_counts_its_whole_storage_once() -> None:
    class Halves(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x * 2
            return h[:, :3].sin() + h[:, 3:].sin()  # two views of one storage saved

    x = torch.randn(2, 6, requires_grad=True)
    section = measure_step(Halves(), (x,), {})
    assert section.total("").activations == nbytes(2, 6)


def test_a_tensor_a_child_saved_is_the_childs() -> None:
    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = nn.GELU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(x).exp() * x  # exp saves its output; the mul it and x again

    x = torch.randn(4, 5, requires_grad=True)
    rows = {r.path: r for r in measure_step(Outer(), (x,), {}).rows}
    assert rows["act"].activations_self == nbytes(4, 5)  # x, saved first by the GELU
    assert rows[""].activations_self == nbytes(4, 5)  # exp's output, counted once


def test_the_loss_is_outside_every_layer() -> None:
    model, x, y = nn.Linear(4, 3), torch.randn(2, 4), torch.randn(2, 3)
    section = measure_step(model, (x,), {}, loss=lambda out: ((out - y) ** 2).mean())
    assert section.total("").activations == nbytes(2, 4)
    assert section.outside_bytes == nbytes(2, 3)  # pow saves out - y


# ---- real models: in-place residuals, a transformer layer ---------------------------------


@pytest.mark.parametrize("train", [True, False])
def test_resnet_block_with_in_place_adds(train: bool) -> None:
    torch.manual_seed(0)
    model, x = ResBlock(), torch.randn(2, 4, 6, 6, requires_grad=True)
    model.train(train)
    section = measure_step(model, (x,), {})
    rows = {r.path: r.activations_self for r in section.rows}
    act = nbytes(2, 4, 6, 6)
    assert rows["conv1"] == act  # its input
    # the in-place ReLU saves its output, bn1's storage, first: conv2's input is the same
    assert rows["relu"] == 2 * act  # called twice: bn1's output and the block's output
    assert rows["conv2"] == 0
    assert rows["bn1"] >= act and rows["bn2"] >= act  # input (+ per-channel stats)
    check_tree(section)
    # the capture changes nothing autograd computes
    model.zero_grad()
    model(x).sum().backward()
    plain = grads(model)
    model.zero_grad()
    with ActivationCapture(model):
        model(x).sum().backward()
    assert all(torch.equal(a, b) for a, b in zip(plain, grads(model), strict=True))


def test_transformer_encoder_layer() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0)
    model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    x = torch.randn(5, 3, 16)
    section = measure_step(model, (x,), {})
    check_tree(section)
    totals = {t.path: t for t in section.totals()}
    for i in (0, 1):
        block = totals[f"layers.{i}"]
        assert block.activations > 0
        assert totals[f"layers.{i}.linear1"].activations == nbytes(5, 3, 16)  # its input
        assert block.params == sum(p.numel() * F32 for p in model.layers[i].parameters())
    assert totals[""].grads == totals[""].params  # every parameter got a gradient


# ---- parameters, gradients, optimizer state -----------------------------------------------


def test_params_grads_and_adam_state_per_layer() -> None:
    model, x = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)), torch.randn(3, 8)
    opt = torch.optim.Adam(model.parameters())
    section = measure_step(model, (x,), {}, optimizer=opt)
    rows = {r.path: r for r in section.rows}
    first = (8 * 16 + 16) * F32
    assert rows["0"].params_self == first and rows["0"].grads_self == first
    # exp_avg and exp_avg_sq per parameter, plus a float32 step counter each
    assert rows["0"].optimizer_self == 2 * first + 2 * F32
    assert rows["1"].params_self == 0 and rows["1"].optimizer_self == 0
    assert section.total("").optimizer == 2 * section.total("").params + 4 * F32
    assert all(p.grad is None for p in model.parameters())  # the users' grads restored


def test_without_backward_or_optimizer_those_columns_are_absent() -> None:
    model = nn.Linear(3, 3)
    with ActivationCapture(model) as capture:
        model(torch.randn(2, 3))
        section = capture.step()
    assert section.rows[0].grads_self is None and section.rows[0].optimizer_self is None
    assert not section.has_grads and not section.has_optimizer


def test_tied_weights_count_once() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4, bias=False)
            self.b = nn.Linear(4, 4, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    section = measure_step(Tied(), (torch.randn(2, 4),), {})
    assert section.total("").params == 16 * F32
    assert section.total("a").params == 16 * F32 and section.total("b").params == 0


# ---- steps: gradient accumulation, phase peaks --------------------------------------------


def test_gradient_accumulation_keeps_the_largest_forward() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU())
    with ActivationCapture(model) as capture:
        model(torch.randn(2, 4)).sum().backward()
        model(torch.randn(6, 4)).sum().backward()
        section = capture.step()
        assert section.forwards == 2
        assert section.total("").activations == nbytes(6, 4) + nbytes(6, 8)
        model(torch.randn(1, 4)).sum().backward()
        after = capture.step()  # the next step starts from zero
    assert after.forwards == 1 and after.total("").activations == nbytes(1, 4) + nbytes(1, 8)


class Costly(torch.autograd.Function):
    """Allocates known bytes in forward (kept) and backward (temporary)."""

    mem: FakeAllocator

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        Costly.mem.alloc(1000)
        return x * 1

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        Costly.mem.alloc(300)
        Costly.mem.free(300)
        Costly.mem.free(1000)
        return grad


class CostlyLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Costly.apply(x * self.w)


class CostlyOptimizer(torch.optim.SGD):
    mem: FakeAllocator

    def step(self, closure: Any = None) -> Any:
        self.mem.alloc(50)
        self.mem.free(50)
        return super().step(closure)


def test_allocator_peak_per_phase_with_a_fake_counter() -> None:
    mem = FakeAllocator()
    mem.alloc(10_000)  # weights already there
    Costly.mem = CostlyOptimizer.mem = mem
    model = CostlyLayer()
    opt = CostlyOptimizer(model.parameters(), lr=0.1)
    section = measure_step(model, (torch.ones(3),), {}, counter=mem, optimizer=opt)
    peaks = {p.phase: (p.start_bytes, p.peak_bytes, p.rise_bytes) for p in section.peaks}
    assert peaks == {
        "forward": (10_000, 11_000, 1000),
        "backward": (11_000, 11_300, 300),
        "optimizer": (10_000, 10_050, 50),
    }


def test_the_capture_leaves_no_hooks_behind_also_when_the_model_raises() -> None:
    class Boom(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("boom")

    model = Boom()
    with pytest.raises(ValueError), ActivationCapture(model):
        model(torch.zeros(1, 2))
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    x = torch.randn(2, 2, requires_grad=True)
    (x * x).sum().backward()  # no pack hook left: nothing counted, nothing raised


# ---- the run, the JSON --------------------------------------------------------------------


def test_run_with_backward_has_the_section_and_it_round_trips() -> None:
    import layerprof
    from layerprof.codec import from_dict

    model, x = mlp(), torch.randn(5, 8)
    prof = layerprof.profile(model, x, backward=True, warmup=0, iters=2)
    section = prof.activation_memory
    assert (
        section is not None
        and section.total("").activations == measure_step(model, (x,), {}).total("").activations
    )
    doc = prof.to_dict()
    assert doc["activation_memory"]["layers"][1]["activations_self_bytes"] == nbytes(5, 8)
    loaded = from_dict(doc)
    assert isinstance(loaded, layerprof.Profile) and loaded.activation_memory == section
    # a file from before the section loads without it
    del doc["activation_memory"]
    old = from_dict(doc)
    assert isinstance(old, layerprof.Profile) and old.activation_memory is None
    assert layerprof.profile(model, x, warmup=0, iters=1).activation_memory is None


def test_malformed_section_names_the_field() -> None:
    import layerprof
    from layerprof.codec import from_dict
    from layerprof.errors import ProfileFormatError

    prof = layerprof.profile(nn.Linear(2, 2), torch.zeros(1, 2), backward=True, iters=1)
    doc = prof.to_dict()
    doc["activation_memory"]["layers"][0]["activations_self_bytes"] = -5
    with pytest.raises(ProfileFormatError, match="activations_self_bytes"):
        from_dict(doc)


# ---- against PyTorch's MemTracker ---------------------------------------------------------


def _memtracker_deltas(model: nn.Module, x: torch.Tensor) -> dict[str, int]:
    """MemTracker's activation bytes live after each module's forward minus before it."""
    mem_tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    tracker = mem_tracker.MemTracker()
    tracker.track_external(model, x)
    with tracker:
        model(x).sum().backward()
    cpu = torch.device("cpu")
    act = mem_tracker._MemRefType.ACT
    out = {}
    for name, module in model.named_modules():
        snaps = tracker.memory_tracking[module].snapshots
        pre = snaps[mem_tracker._ModState.PRE_FW][-1][cpu][act]
        post = snaps[mem_tracker._ModState.POST_FW][-1][cpu][act]
        out[name] = post - pre
    return out


def test_memtracker_counts_outputs_where_layerprof_counts_saved_inputs() -> None:
    """On a chain of Linear and GELU layers, each of which saves its input: MemTracker's
    figure of layer i (its output, still alive) is layerprof's of layer i+1 (the same
    tensor, saved by its consumer); for the whole model, layerprof counts the saved input
    and not the unsaved output, MemTracker the reverse."""
    torch.manual_seed(0)
    model, x = mlp(), torch.randn(5, 8)
    ours = {t.path: t.activations for t in measure_step(model, (x,), {}).totals()}
    theirs = _memtracker_deltas(model, x)
    for i in range(4):
        assert theirs[str(i)] == ours[str(i + 1)]
    assert theirs["4"] == nbytes(5, 4)  # the output: saved by no layer
    assert ours[""] == theirs[""] - nbytes(5, 4) + nbytes(5, 8)


def test_memtracker_misses_what_in_place_ops_save() -> None:
    """An in-place ReLU allocates nothing (MemTracker: 0) but saves its output, the
    storage the layer before it allocated (layerprof: the ReLU's)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    ours = {t.path: t.activations for t in measure_step(model, (x,), {}).totals()}
    theirs = _memtracker_deltas(model, x)
    assert theirs["1"] == 0 and ours["1"] == nbytes(5, 16)
    assert theirs["0"] == nbytes(5, 16) and ours["0"] == nbytes(5, 8)
    assert ours["2"] == 0  # its input is the ReLU's saved output


# ---- the finding --------------------------------------------------------------------------


def test_finding_names_the_heaviest_block_and_the_checkpointing_estimate() -> None:
    from layerprof.analysis.diagnose import checks, diagnose
    from layerprof.analysis.memory import checkpoint_candidate
    from layerprof.pivot.profile import Profile
    from layerprof.pivot.records import Meta

    def block(width: int) -> nn.Sequential:
        return nn.Sequential(nn.Linear(64, width), nn.GELU(), nn.Linear(width, 64))

    model = nn.Sequential(block(256), block(1024))  # the second block saves the most
    x = torch.randn(512, 64)
    section = measure_step(model, (x,), {})
    pick = checkpoint_candidate(section)
    assert pick is not None
    layer, saving = pick
    assert layer.path == "1"
    # saved: its input (to the first Linear), GELU's input and output; it keeps its input
    assert layer.activations == nbytes(512, 64) + 2 * nbytes(512, 1024)
    assert saving == 2 * nbytes(512, 1024)
    prof = Profile(meta=Meta(model="m"), activation_memory=section)
    found = [f for f in diagnose(prof) if f.layer == "1"]
    assert len(found) == 1 and "4.0 MiB less" in found[0].detail
    assert "torch.utils.checkpoint" in found[0].hint
    assert any("activation memory" in c for c in checks(prof))


def test_no_finding_for_small_activation_memory() -> None:
    from layerprof.analysis.memory import memory_findings
    from layerprof.pivot.profile import Profile
    from layerprof.pivot.records import Meta

    section = measure_step(mlp(), (torch.randn(5, 8),), {})
    assert memory_findings(Profile(meta=Meta(model="m"), activation_memory=section)) == []


# ---- rendering ----------------------------------------------------------------------------


def _profile_with_memory() -> Any:
    from layerprof.pivot.profile import Profile
    from layerprof.pivot.records import LayerInfo, Meta

    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters())
    section = measure_step(model, (torch.randn(4, 8),), {}, optimizer=opt)
    layers = tuple(
        LayerInfo(path=p, type=type(m).__name__, parent=None if not p else "")
        for p, m in model.named_modules()
    )
    return Profile(meta=Meta(model="Sequential"), layers=layers, activation_memory=section)


def test_console_memory_table() -> None:
    from rich.console import Console

    from layerprof.render.console import print_report

    console = Console(record=True, width=120)
    print_report(_profile_with_memory(), console)
    text = console.export_text()
    assert "memory per layer" in text
    for header in ("Activations", "Self", "Params", "Grads", "Optimizer"):
        assert header in text
    assert "128 B" in text  # the first Linear saves its 4x8 float input
    assert "saved for backward: " in text


def test_console_has_no_memory_table_without_the_section() -> None:
    from dataclasses import replace

    from rich.console import Console

    from layerprof.render.console import print_report

    console = Console(record=True, width=120)
    print_report(replace(_profile_with_memory(), activation_memory=None), console)
    assert "memory per layer" not in console.export_text()


def test_html_memory_section() -> None:
    from layerprof.render.html import render_html

    page = render_html(_profile_with_memory())
    assert 'id="activation-memory"' in page and "lp-activation-memory-chart" in page
    assert "Optimizer state" in page and "Gradients" in page


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_counts_and_phase_peaks() -> None:
    from layerprof.capture.memory.allocator import CudaMemory

    model = nn.Sequential(nn.Linear(256, 4096), nn.GELU(), nn.Linear(4096, 256)).cuda()
    x = torch.randn(64, 256, device="cuda")
    opt = torch.optim.Adam(model.parameters())
    section = measure_step(model, (x,), {}, counter=CudaMemory("cuda"), optimizer=opt)
    own = {r.path: r.activations_self for r in section.rows}
    assert own["0"] == nbytes(64, 256) and own["1"] == own["2"] == nbytes(64, 4096)
    peaks = {p.phase: p for p in section.peaks}
    assert set(peaks) == {"forward", "backward", "optimizer"}
    # the forward's rise holds at least what it saved (allocator blocks round up)
    assert peaks["forward"].rise_bytes >= nbytes(64, 4096)
    assert peaks["optimizer"].rise_bytes >= 0


# ---- in the user's training loop ---------------------------------------------------------


def test_the_training_loop_recorder_counts_each_layers_memory_when_asked() -> None:
    """Recorder(backward=True, memory=True): the same counts as one measured step, the
    Adam state of the optimizer that stepped, and a note that the times paid for it."""
    import layerprof
    from layerprof.errors import UsageError

    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.Adam(model.parameters())
    rec = layerprof.Recorder(model, backward=True, memory=True)
    with rec:
        for _ in range(3):
            model(torch.randn(5, 8)).sum().backward()
            opt.step()
            opt.zero_grad()  # before rec.step(), as the README's loop: grads noted at opt.step()
            rec.step()
    prof = rec.profile()
    section = prof.activation_memory
    assert section is not None
    own = {r.path: r.activations_self for r in section.rows}
    assert own == {"": 0, "0": nbytes(5, 8), "1": nbytes(5, 16), "2": nbytes(5, 16),
                   "3": nbytes(5, 32), "4": nbytes(5, 32)}  # fmt: skip
    first = (8 * 16 + 16) * F32
    rows = {r.path: r for r in section.rows}
    assert rows["0"].params_self == first and rows["0"].optimizer_self == 2 * first + 2 * F32
    assert rows["0"].grads_self == first
    check_tree(section)
    assert [n.kind for n in prof.notes] == ["activation-memory-cost"]
    assert not model._forward_pre_hooks and not model[0]._forward_hooks  # all hooks off
    assert layerprof.Profile.from_dict(prof.to_dict()).activation_memory == section
    # without memory=True the loop's times are undisturbed and nothing is counted
    with layerprof.Recorder(model, backward=True) as plain:
        model(torch.randn(5, 8)).sum().backward()
        plain.step()
    assert plain.profile().activation_memory is None
    with pytest.raises(UsageError, match="needs backward=True"):
        layerprof.Recorder(model, memory=True)
