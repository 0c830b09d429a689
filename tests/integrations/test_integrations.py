"""The Hugging Face and Lightning callbacks record the real training loop, step by step.

Tiny models from configs, built in the test (nothing downloaded); skipped where the
framework is not installed (extras ``layerprof[hf]``, ``layerprof[lightning]``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

import layerprof
from tests.support.fake_clock_models import FakeSpinLayer


def _dataset(n: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        {
            "input_ids": torch.randint(0, 64, (8,), generator=g),
            "attention_mask": torch.ones(8, dtype=torch.long),
            "labels": torch.tensor(i % 2),
        }
        for i in range(n)
    ]


def test_hf_trainer_callback_writes_a_profile_of_each_step(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from layerprof.integrations.hf import LayerprofCallback

    config = transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=16,
    )  # fmt: skip
    model = transformers.BertForSequenceClassification(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, report_to=[], save_strategy="no",
        logging_strategy="no", use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    callback = LayerprofCallback()
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=_dataset(24), callbacks=[callback]
    )
    trainer.train()
    written = tmp_path / "layerprof-profile.json"
    assert written.exists()
    prof = layerprof.Profile.load(written)
    assert callback.profile is not None
    # 3 steps: the callbacks' default schedule drops the first (cold) one
    check_training_profile(prof, steps=2, forwards_per_step=2, layer="bert.encoder.layer.0")
    assert not model._forward_hooks and not model._forward_pre_hooks  # hooks off after training


def test_lightning_callback_writes_a_profile_of_each_step(tmp_path: Path) -> None:
    lightning = pytest.importorskip("lightning")
    from torch import nn

    from layerprof.integrations.lightning import LayerprofCallback

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

        def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 2, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    out = tmp_path / "fit.json"
    callback = LayerprofCallback(out)
    trainer = lightning.Trainer(
        max_steps=3, accumulate_grad_batches=2, accelerator="cpu", logger=False, callbacks=[callback],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )  # fmt: skip
    module = Module()
    trainer.fit(module, loader)
    prof = layerprof.Profile.load(out)
    check_training_profile(
        prof, steps=2, forwards_per_step=2, layer="body.0"
    )  # 3 less the cold one


def check_training_profile(
    prof: layerprof.Profile, *, steps: int, forwards_per_step: int, layer: str
) -> None:
    """One step per optimizer step, its parts adding up, each layer timed both ways."""
    loop = prof.loop
    assert loop is not None and len(loop.steps) == steps
    for step in loop.steps:
        assert step.forwards == forwards_per_step and step.backwards == forwards_per_step
        assert sum(ns for _, ns in step.parts()) == step.wall_ns
        assert step.forward_ns > 0 and step.backward_ns > 0 and step.optimizer_ns > 0
    (row,) = [r for r in loop.layers if r.path == layer]
    assert len(row.forward_total_ns) == steps and min(row.forward_total_ns) > 0
    assert row.backward_total_ns is not None and min(row.backward_total_ns) > 0


def test_a_failed_write_warns_and_keeps_the_profile(tmp_path: Path) -> None:
    """Training has run; a profile that cannot be written must not fail it."""
    from torch import nn

    from layerprof.integrations.session import TrainingSession

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    session = TrainingSession(tmp_path)  # a directory: the write fails
    session.start(model)
    for _ in range(2):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        session.step()
    with pytest.warns(RuntimeWarning, match=str(tmp_path)):
        session.finish()
    assert session.profile is not None and session.profile.loop is not None
    assert len(session.profile.loop.steps) == 1  # the default schedule drops the first step
    assert not model._forward_pre_hooks and session.recorder is None


def test_a_schedule_that_never_became_active_warns_and_training_still_ends(tmp_path: Path) -> None:
    from torch import nn

    from layerprof.capture.recording.loop import StepSchedule
    from layerprof.integrations.session import TrainingSession

    model = nn.Linear(4, 4)
    session = TrainingSession(tmp_path / "p.json", schedule=StepSchedule(skip=1, warmup=2))
    session.start(model)
    for _ in range(2):
        model(torch.randn(2, 4)).sum().backward()
        session.step()
    with pytest.warns(RuntimeWarning, match="no profile"):
        session.finish()
    assert session.profile is None and not (tmp_path / "p.json").exists()
    assert "forward" not in model.__dict__  # the wrapper is gone


def test_lightning_training_that_raises_leaves_no_hook_and_no_file(tmp_path: Path) -> None:
    lightning = pytest.importorskip("lightning")
    from torch import nn

    from layerprof.integrations.lightning import LayerprofCallback

    class Failing(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 2))

        def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
            if index == 2:
                raise RuntimeError("boom")
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 2, (64,)))
    out = tmp_path / "fit.json"
    callback = LayerprofCallback(out, module="net")  # training_step calls self.net(x)
    trainer = lightning.Trainer(
        max_steps=5, accelerator="cpu", logger=False, callbacks=[callback],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )  # fmt: skip
    module = Failing()
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))
    assert "forward" not in module.net[0].__dict__ and not module.net._forward_pre_hooks
    assert callback.session.recorder is None and not out.exists()
    assert callback.profile is not None and callback.profile.loop is not None
    assert [s.forwards for s in callback.profile.loop.steps] == [1]  # the first one dropped


# ---- issue 43, item 1: Lightning's automatic optimization runs opt.step(closure) ---------------

COLLATE_S = 0.03


def _fit_with_a_slow_collate(tmp_path: Path, wait: Any, clock: Any = None) -> layerprof.Profile:
    """Lightning's default loop (``optimizer.step(closure)``) over a loader whose collate
    calls ``wait`` per batch; 4 optimizer steps, the callbacks' default schedule keeps 3."""
    lightning = pytest.importorskip("lightning")
    from torch import nn

    from layerprof.integrations.lightning import LayerprofCallback

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
            if clock is not None:
                self.spin = FakeSpinLayer(clock, 1_000_000, 2_000_000)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.body(x)
            return self.spin(out) if clock is not None else out

        def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def collate(rows: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
        wait()
        return torch.utils.data.default_collate(rows)

    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 2, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8, collate_fn=collate)
    options = {} if clock is None else {"clock": clock}
    callback = LayerprofCallback(tmp_path / "fit.json", **options)
    trainer = lightning.Trainer(
        max_steps=4, accelerator="cpu", logger=False, callbacks=[callback],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )  # fmt: skip
    trainer.fit(Module(), loader)
    prof = callback.profile
    assert prof is not None and prof.loop is not None and len(prof.loop.steps) == 3
    return prof


def test_lightning_closure_steps_read_the_collate_as_data_wait(tmp_path: Path) -> None:
    """A 30 ms collate gave data wait 0.000 and rest 31.9 ms: the loader's time before
    ``optimizer.step(closure)`` was rest, and the data-bound finding never fired. On a fake
    clock that only the collate and the model move, each part is exact."""
    from layerprof.analysis.diagnose import diagnose
    from layerprof.capture.platform.clocks import FakeClock

    clock = FakeClock()
    prof = _fit_with_a_slow_collate(tmp_path, lambda: clock.advance(30_000_000), clock)
    assert prof.loop is not None
    for step in prof.loop.steps:
        assert (step.forwards, step.backwards) == (1, 1)
        assert dict(step.parts()) == {
            "data_wait": 30_000_000, "forward": 1_000_000, "backward": 2_000_000,
            "closure": 0, "optimizer": 0, "rest": 0,
        }  # fmt: skip
    found = [f for f in diagnose(prof) if "data-bound" in f.title]
    assert len(found) == 1 and found[0].severity == "high", found


def test_lightning_closure_steps_on_the_host_clock(tmp_path: Path) -> None:
    """The same with a real sleep: a sleep lasts at least its time, so the bound holds on
    any machine, however loaded; the closure's own code (training_step's loss, Lightning's
    hooks and backward call around it) is its own part, not the optimizer's."""
    prof = _fit_with_a_slow_collate(tmp_path, lambda: time.sleep(COLLATE_S))
    assert prof.loop is not None
    for step in prof.loop.steps:
        assert step.data_wait_ns >= COLLATE_S * 1e9, dict(step.parts())
        assert step.closure_ns > 0 and step.forward_ns > 0 and step.backward_ns > 0
        assert sum(ns for _, ns in step.parts()) == step.wall_ns


def test_lightning_training_step_calling_a_part_names_the_module_option(tmp_path: Path) -> None:
    """A training_step that calls ``self.net(x)`` (common: no ``forward`` of its own) never
    runs the LightningModule's forward, so the profile has no layers and forward and
    backward read 0. The profile's note said 'record that submodule', which a callback
    user cannot do without knowing ``module=``: the callback says which, by name."""
    lightning = pytest.importorskip("lightning")
    from torch import nn

    from layerprof.integrations.lightning import LayerprofCallback

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 2))
            self.loss = nn.CrossEntropyLoss()

        def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
            x, y = batch
            out: torch.Tensor = self.loss(self.net(x), y)
            return out

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(32, 16), torch.randint(0, 2, (32,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    callback = LayerprofCallback(tmp_path / "fit.json")
    trainer = lightning.Trainer(
        max_steps=3, accelerator="cpu", logger=False, callbacks=[callback],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )  # fmt: skip
    with pytest.warns(RuntimeWarning, match=r"LayerprofCallback\(module='net'\)") as caught:
        trainer.fit(Module(), loader)
    said = [str(w.message) for w in caught if "module=" in str(w.message)]
    assert len(said) == 1 and "'loss'" not in said[0], said  # no parameters: not a candidate
    prof = callback.profile
    assert prof is not None
    (note,) = [n.text for n in prof.notes if "own forward" in n.text]
    assert "LayerprofCallback(module='net')" in note, note
