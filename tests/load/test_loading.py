"""Every way a model reaches layerprof, and every way that can go wrong."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from layerprof.errors import ModelLoadError
from layerprof.load.model import LoadedModel, load_model
from layerprof.load.specs import import_callable
from layerprof.load.weights import CHECKPOINT_KEYS
from tests.support.loading_models import TinyNet, WideNet

ARCH = "tests.support.loading_models:TinyNet"


@pytest.fixture
def net() -> TinyNet:
    torch.manual_seed(1)
    model = TinyNet()
    # Non-default buffers, so that a load that skipped them would show.
    model.norm.running_mean.fill_(0.5)
    return model.eval()


@pytest.fixture
def isolated_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Undo loading's sys.path insertion and forget the modules a test imports."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def same_weights(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def load_error(path: object, **kwargs: object) -> ModelLoadError:
    with pytest.raises(ModelLoadError) as info:
        load_model(path, **kwargs)  # type: ignore[arg-type]
    return info.value


# ----------------------------------------------------------------- --arch


def test_arch_alone_builds_random_weights() -> None:
    loaded = load_model(None, arch=ARCH)
    assert isinstance(loaded, LoadedModel)
    assert isinstance(loaded.module, TinyNet)
    assert (loaded.kind, loaded.name) == ("eager", "TinyNet")
    assert loaded.source == "tests.support.loading_models:TinyNet (random weights)"
    assert loaded.program is None


def test_arch_factory_gets_kwargs() -> None:
    loaded = load_model(
        None, arch="tests.support.loading_models:make_net", arch_kwargs={"hidden": 5}
    )
    assert loaded.module.fc1.out_features == 5


def test_arch_without_colon_splits_at_last_dot() -> None:
    assert import_callable("tests.support.loading_models.TinyNet") is TinyNet


def test_arch_dotted_attribute() -> None:
    assert import_callable("tests.support.loading_models:TinyNet.forward") is TinyNet.forward


def test_arch_module_not_importable() -> None:
    err = load_error(None, arch="no_such_pkg_xyz.nets:Net")
    assert "--arch no_such_pkg_xyz.nets:Net: cannot import module 'no_such_pkg_xyz.nets'" in str(
        err
    )
    assert err.hint is not None and "PYTHONPATH" in err.hint


def test_arch_module_needs_missing_dependency(tmp_path: Path, isolated_path: None) -> None:
    (tmp_path / "needs_dep_5e1b.py").write_text("import not_installed_dep_5e1b\n")
    sys.path.insert(0, str(tmp_path))
    err = load_error(None, arch="needs_dep_5e1b:Net")
    assert str(err) == (
        "--arch needs_dep_5e1b:Net: importing 'needs_dep_5e1b' needs "
        "'not_installed_dep_5e1b', which is not installed"
    )


def test_arch_module_raises_on_import(tmp_path: Path, isolated_path: None) -> None:
    (tmp_path / "broken_9d0c.py").write_text("raise RuntimeError('bad config')\n")
    sys.path.insert(0, str(tmp_path))
    err = load_error(None, arch="broken_9d0c:Net")
    assert (
        str(err)
        == "--arch broken_9d0c:Net: importing 'broken_9d0c' raised RuntimeError: bad config"
    )


def test_arch_no_such_attribute() -> None:
    err = load_error(None, arch="tests.support.loading_models:Nope")
    assert (
        str(err)
        == "--arch tests.support.loading_models:Nope: module 'tests.support.loading_models' has no attribute 'Nope'"
    )
    assert err.hint is not None and "TinyNet" in err.hint


def test_arch_not_callable() -> None:
    err = load_error(None, arch="tests.support.loading_models:NOT_CALLABLE")
    assert "'NOT_CALLABLE' is a int, not a class or function" in str(err)


def test_arch_returns_non_module() -> None:
    err = load_error(None, arch="tests.support.loading_models:not_a_module")
    assert (
        str(err)
        == "--arch tests.support.loading_models:not_a_module returned a dict, not a torch.nn.Module"
    )


def test_arch_constructor_raises() -> None:
    err = load_error(None, arch="tests.support.loading_models:Exploding")
    assert str(err) == (
        "--arch tests.support.loading_models:Exploding: calling it raised ValueError: "
        "depth must be positive"
    )
    assert isinstance(err.__cause__, ValueError)


def test_arch_bad_kwargs_named_in_error() -> None:
    err = load_error(None, arch=ARCH, arch_kwargs={"depth": 3})
    assert "calling it(depth=3) raised TypeError" in str(err)


def test_arch_malformed_spec() -> None:
    err = load_error(None, arch="justaname")
    assert str(err) == "--arch 'justaname' is not of the form module:callable"


def test_neither_file_nor_arch() -> None:
    err = load_error(None)
    assert "no model given" in str(err)


def test_arch_module_in_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_path: None
) -> None:
    (tmp_path / "cwd_nets_7f3a.py").write_text(
        "from torch import nn\nclass Net(nn.Sequential):\n"
        "    def __init__(self):\n        super().__init__(nn.Linear(2, 2))\n"
    )
    monkeypatch.chdir(tmp_path)
    sys.path[:] = [p for p in sys.path if p not in ("", str(tmp_path))]
    loaded = load_model(None, arch="cwd_nets_7f3a:Net")
    assert loaded.name == "Net"


def test_arch_python_file_path(tmp_path: Path, isolated_path: None) -> None:
    source = tmp_path / "filenets.py"
    source.write_text("from torch import nn\ndef build(n=3):\n    return nn.Linear(n, n)\n")
    loaded = load_model(None, arch=f"{source}:build", arch_kwargs={"n": 6})
    assert loaded.module.in_features == 6


def test_arch_python_file_missing(tmp_path: Path) -> None:
    err = load_error(None, arch=f"{tmp_path / 'gone.py'}:Net")
    assert f"no such file {tmp_path / 'gone.py'}" in str(err)


# ------------------------------------------------------------ state dicts


def test_state_dict_with_arch(tmp_path: Path, net: TinyNet) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save(net.state_dict(), path)
    loaded = load_model(str(path), arch=ARCH)
    assert same_weights(loaded.module, net)
    assert loaded.kind == "eager"
    assert loaded.source == f"state_dict {path} -> {ARCH}"
    assert loaded.notes == ()


@pytest.mark.parametrize("key", CHECKPOINT_KEYS)
def test_checkpoint_dict_keys(tmp_path: Path, net: TinyNet, key: str) -> None:
    path = tmp_path / "ckpt.pth"
    torch.save({key: net.state_dict(), "epoch": 7, "optimizer": {"lr": 0.1}}, path)
    loaded = load_model(path, arch=ARCH)
    assert same_weights(loaded.module, net)
    assert loaded.source == f"state_dict {path}[{key!r}] -> {ARCH}"


def test_dataparallel_prefix_stripped(tmp_path: Path, net: TinyNet) -> None:
    path = tmp_path / "dp.pt"
    state = nn.DataParallel(net).state_dict()
    assert all(k.startswith("module.") for k in state)
    torch.save({"state_dict": state}, path)
    loaded = load_model(path, arch=ARCH)
    assert same_weights(loaded.module, net)
    assert [(n.kind, n.data["prefix"]) for n in loaded.notes] == [("stripped-prefix", "module.")]


def test_compile_prefix_stripped(tmp_path: Path, net: TinyNet) -> None:
    path = tmp_path / "compiled.pt"
    # torch.compile(net).state_dict() names keys "_orig_mod.<key>", also nested in DDP.
    state = {f"module._orig_mod.{k}": v for k, v in net.state_dict().items()}
    torch.save(state, path)
    loaded = load_model(path, arch=ARCH)
    assert same_weights(loaded.module, net)
    assert [n.data["prefix"] for n in loaded.notes] == ["module.", "_orig_mod."]


def test_module_prefix_kept_when_model_has_it(tmp_path: Path) -> None:
    from tests.support.loading_models import HasModuleChild

    model = HasModuleChild()
    path = tmp_path / "child.pt"
    torch.save(model.state_dict(), path)
    loaded = load_model(path, arch="tests.support.loading_models:HasModuleChild")
    assert same_weights(loaded.module, model)
    assert loaded.notes == ()


def test_legacy_non_zip_format(tmp_path: Path, net: TinyNet) -> None:
    path = tmp_path / "legacy.pt"
    torch.save(net.state_dict(), path, _use_new_zipfile_serialization=False)
    assert same_weights(load_model(path, arch=ARCH).module, net)


def test_strict_mismatch_lists_keys_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "wide.pt"
    torch.save(WideNet(depth=8).state_dict(), path)
    err = load_error(path, arch=ARCH)
    text = str(err)
    assert text.startswith(f"state_dict {path} does not match --arch {ARCH}: ")
    assert "\n" not in text
    # TinyNet: fc1 w/b, norm w/b/mean/var/num_batches_tracked, fc2 w/b = 9 missing.
    assert (
        "9 missing keys (fc1.weight, fc1.bias, norm.weight, norm.bias, norm.running_mean, " in text
    )
    assert "... (4 more)" in text
    assert "16 unexpected keys (layers.0.weight, layers.0.bias, layers.1.weight" in text
    assert "... (11 more)" in text
    assert err.hint is not None and "--non-strict" in err.hint


def test_strict_size_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "sized.pt"
    torch.save(TinyNet(hidden=6).state_dict(), path)
    err = load_error(path, arch=ARCH)
    assert "size mismatches (fc1.bias: file [6] vs model [8], " in str(err)
    assert "fc1.weight: file [6, 4] vs model [8, 4]" in str(err)
    assert "missing" not in str(err)


def test_non_strict_loads_what_matches(tmp_path: Path, net: TinyNet) -> None:
    state = net.state_dict()
    state.pop("fc2.bias")
    state["fc1.weight"] = torch.zeros(3, 4)  # wrong size: skipped, not fatal
    state["extra.weight"] = torch.zeros(1)
    path = tmp_path / "partial.pt"
    torch.save(state, path)
    loaded = load_model(path, arch=ARCH, strict=False)
    got = loaded.module.state_dict()
    assert torch.equal(got["fc2.weight"], net.state_dict()["fc2.weight"])
    assert torch.equal(got["norm.running_mean"], net.state_dict()["norm.running_mean"])
    assert got["fc1.weight"].shape == (8, 4)
    (note,) = loaded.notes
    assert note.kind == "non-strict-load" and note.data == {"loaded": 7, "tensors": 9}
    assert note.text.endswith("; 1 missing, 1 unexpected, 1 size mismatch(es) skipped")


def test_state_dict_without_arch(tmp_path: Path, net: TinyNet) -> None:
    path = tmp_path / "weights.pt"
    torch.save(net.state_dict(), path)
    err = load_error(path)
    assert str(err) == (
        f"{path} holds a state_dict (9 tensors), not a model: "
        "--arch is needed to build the model it belongs to"
    )
    assert err.hint is not None and "--arch mypkg.nets:ResNetish" in err.hint


def test_state_dict_values_not_tensors(tmp_path: Path) -> None:
    path = tmp_path / "config.pt"
    torch.save({"fc.weight": torch.zeros(2), "epochs": 3}, path)
    err = load_error(path, arch=ARCH)
    assert str(err) == f"{path} is not a state_dict: 'epochs' is an int, not a tensor"
    assert err.hint is not None and "'model_state_dict'" in err.hint


def test_checkpoint_key_with_non_tensors_named(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save({"model": {"name": "resnet"}}, path)
    err = load_error(path, arch=ARCH)
    assert str(err) == f"{path}['model'] is not a state_dict: 'name' is a str, not a tensor"


def test_file_holds_a_tensor(tmp_path: Path) -> None:
    path = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), path)
    err = load_error(path, arch=ARCH)
    assert str(err) == f"{path} holds a Tensor, not a model, state_dict or checkpoint dict"


def test_empty_state_dict(tmp_path: Path) -> None:
    path = tmp_path / "empty.pt"
    torch.save({}, path)
    assert str(load_error(path, arch=ARCH)) == f"{path} is an empty dict: no weights to load"


# ------------------------------------------------------------- bad files


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.pt"
    assert str(load_error(path, arch=ARCH)) == f"model file {path} does not exist"


def test_directory(tmp_path: Path) -> None:
    assert str(load_error(tmp_path)) == f"model file {tmp_path} is a directory, not a file"


def test_text_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.pt"
    path.write_text("these are not weights\n")
    err = load_error(path, arch=ARCH)
    assert str(err) == (
        f"{path} is not a torch file (neither a torch.save zip archive nor a pickle)"
    )


@pytest.mark.parametrize("keep", [100, 200, 292, 575])
def test_truncated_legacy_file(tmp_path: Path, keep: int) -> None:
    path = tmp_path / "cut.pt"
    torch.save(nn.Linear(3, 4).state_dict(), path, _use_new_zipfile_serialization=False)
    path.write_bytes(path.read_bytes()[:keep])
    err = load_error(path, arch=ARCH)
    assert str(err).startswith(f"{path} is not a readable torch file: ")
    assert "\n" not in str(err)


@pytest.mark.parametrize("keep", [100, 0.5, -10])
def test_truncated_zip_file(tmp_path: Path, net: TinyNet, keep: float) -> None:
    path = tmp_path / "cut.pt"
    torch.save(net.state_dict(), path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep) if isinstance(keep, float) else keep])
    err = load_error(path, arch=ARCH)
    assert str(err) == f"{path} is a damaged zip archive (truncated or corrupt?)"


# --------------------------------------------------------- pickled modules


def test_pickled_module_refused_by_default(tmp_path: Path, net: TinyNet) -> None:
    path = tmp_path / "whole.pt"
    torch.save(net, path)
    err = load_error(path)
    assert str(err) == (
        f"{path} was refused: it is not plain weights (it contains tests.support.loading_models.TinyNet),"
        " and loading it means unpickling, which runs code named by the file"
    )
    assert err.hint is not None and "--trust-pickle" in err.hint


def test_pickled_module_loaded_with_trust(tmp_path: Path, net: TinyNet) -> None:
    path = tmp_path / "whole.pt"
    torch.save(net, path)
    loaded = load_model(path, trust_pickle=True)
    assert isinstance(loaded.module, TinyNet)
    assert same_weights(loaded.module, net)
    assert (loaded.kind, loaded.name, loaded.source) == (
        "eager",
        "TinyNet",
        f"pickled module {path}",
    )


def test_pickled_module_inside_checkpoint(tmp_path: Path, net: TinyNet) -> None:
    path = tmp_path / "yolo_style.pt"
    torch.save({"model": net, "epoch": 3}, path)
    loaded = load_model(path, arch=ARCH, trust_pickle=True)
    assert same_weights(loaded.module, net)
    assert loaded.source == f"pickled module {path}['model']"
    assert [(n.kind, n.data["arch"]) for n in loaded.notes] == [("arch-ignored", ARCH)]


def test_trusted_pickle_with_state_dict_and_extras(tmp_path: Path, net: TinyNet) -> None:
    import argparse

    path = tmp_path / "train.pt"
    # A training script's config object: weights_only refuses it.
    torch.save({"state_dict": net.state_dict(), "args": argparse.Namespace(lr=0.1)}, path)
    assert "argparse.Namespace" in str(load_error(path, arch=ARCH))
    assert same_weights(load_model(path, arch=ARCH, trust_pickle=True).module, net)


def test_trusted_pickle_class_not_importable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_path: None
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "gone_nets_91c2.py").write_text("from torch import nn\nclass Net(nn.Linear): pass\n")
    sys.path.insert(0, str(code))
    import gone_nets_91c2  # type: ignore[import-not-found]

    path = tmp_path / "whole.pt"
    torch.save(gone_nets_91c2.Net(2, 2), path)
    sys.path.remove(str(code))
    del sys.modules["gone_nets_91c2"]
    monkeypatch.chdir(tmp_path)
    err = load_error(path, trust_pickle=True)
    assert str(err).startswith(f"{path} refers to code that cannot be imported: ")
    assert "gone_nets_91c2" in str(err)


def test_unsafe_pickle_is_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "evil.pt"
    with path.open("wb") as handle:
        pickle.dump(Evil(), handle, protocol=2)
    err = load_error(path, arch=ARCH)
    assert "--trust-pickle" in (err.hint or "")
    assert not marker.exists()


# ------------------------------------------------- TorchScript and export


def test_torchscript_archive(tmp_path: Path, net: TinyNet) -> None:
    path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(net), str(path))
    loaded = load_model(path)
    assert (loaded.kind, loaded.name, loaded.source) == (
        "torchscript",
        "TinyNet",
        f"torchscript {path}",
    )
    x = torch.randn(3, 4)
    assert torch.equal(loaded.module(x), net(x))


def test_torchscript_ignores_arch_with_note(tmp_path: Path, net: TinyNet) -> None:
    path = tmp_path / "traced.pt"
    torch.jit.save(torch.jit.trace(net, torch.randn(2, 4)), str(path))
    loaded = load_model(path, arch=ARCH)
    assert loaded.kind == "torchscript"
    assert [(n.kind, n.data["arch"]) for n in loaded.notes] == [("arch-ignored", ARCH)]


def test_export_program_round_trip(tmp_path: Path, net: TinyNet) -> None:
    path = tmp_path / "net.pt2"
    x = torch.randn(3, 4)
    torch.export.save(torch.export.export(net, (x,)), str(path))
    loaded = load_model(path)
    assert (loaded.kind, loaded.name, loaded.source) == ("export", "net", f"torch.export {path}")
    assert isinstance(loaded.program, torch.export.ExportedProgram)
    assert torch.allclose(loaded.module(x), net(x))
    assert any(note.kind == "export-mode-fixed" for note in loaded.notes)


def test_export_module_accepts_mode_calls(tmp_path: Path, net: TinyNet) -> None:
    # Runners call eval() and restore the mode; the exported graph stays as it was.
    path = tmp_path / "net.pt2"
    x = torch.randn(3, 4)
    torch.export.save(torch.export.export(net, (x,)), str(path))
    module = load_model(path).module
    before = module(x)
    module.train()
    assert module.training
    module.eval()
    assert not module.training
    assert torch.equal(module(x), before)


def test_corrupt_torchscript_archive(tmp_path: Path, net: TinyNet) -> None:
    import zipfile

    good = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(net), str(good))
    bad = tmp_path / "broken.pt"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for name in src.namelist():
            if not name.endswith("data.pkl"):
                dst.writestr(name, src.read(name))
    assert str(load_error(bad)).startswith(f"cannot load TorchScript archive {bad}: ")


# ------------------------------------------------------------ no torch at import


def test_modules_import_without_torch() -> None:
    code = textwrap.dedent(
        """
        import sys
        import layerprof.load.model, layerprof.load.inputs
        spec = layerprof.load.inputs.parse_input_spec("ids=4x128:int64[0,30000)")
        assert spec.shape == (4, 128)
        bad = [m for m in sys.modules if m == "torch" or m.startswith("torch.")]
        assert not bad, bad[:5]
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


class _Payload:
    """Unpickling this runs code: it touches a file named in the pickle."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_exported_program_with_pickled_weights_is_refused(tmp_path: Path) -> None:
    import json
    import pickle
    import zipfile

    import torch

    good = tmp_path / "good.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),)), good)
    marker = tmp_path / "PWNED"
    with zipfile.ZipFile(good) as z:
        data = {n: z.read(n) for n in z.namelist()}
    cfg_name = next(n for n in data if n.endswith("model_weights_config.json"))
    cfg = json.loads(data[cfg_name])
    for entry in cfg["config"].values():
        entry["use_pickle"] = True
        weight = next(n for n in data if n.endswith("data/weights/" + entry["path_name"]))
        data[weight] = pickle.dumps(_Payload(str(marker)))
    data[cfg_name] = json.dumps(cfg).encode()
    evil = tmp_path / "evil.pt2"
    with zipfile.ZipFile(evil, "w") as z:
        for name, blob in data.items():
            z.writestr(name, blob)
    with pytest.raises(ModelLoadError, match="runs code") as info:
        load_model(str(evil))
    assert "--trust-pickle" in (info.value.hint or "")
    assert not marker.exists()
    assert load_model(str(good)).kind == "export"  # the guard does not break real files


class _Calls:
    """A pickle that calls a builtin function when loaded (GLOBAL builtins.eval, ...)."""

    def __init__(self, func: object, arg: str) -> None:
        self.func, self.arg = func, arg

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (self.func, (self.arg,))


@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize(
    ("func", "named"),
    [(eval, "builtins.eval"), (os.system, f"{os.system.__module__}.system"),
     (getattr, "builtins.getattr")],
)  # fmt: skip
def test_code_naming_pickle_is_refused_not_damaged(
    tmp_path: Path, protocol: int, func: object, named: str
) -> None:
    # torch words these "GLOBAL eval" (no module) or, for protocol 4, an unsupported
    # opcode: the old reading of its message called the file damaged.
    path = tmp_path / "payload.pt"
    path.write_bytes(pickle.dumps(_Calls(func, "1"), protocol=protocol))
    err = load_error(path, arch=ARCH)
    assert str(err).startswith(f"{path} was refused: it is not plain weights (it contains {named})")
    assert "damaged" not in str(err)
    assert err.hint is not None and "--trust-pickle" in err.hint


def test_damaged_only_when_damaged(tmp_path: Path, net: TinyNet) -> None:
    path = tmp_path / "cut.pt"
    data = pickle.dumps(_Calls(eval, "1"), protocol=2)
    path.write_bytes(data[: len(data) // 3])  # cut before the global is named
    assert "damaged pickle stream" in str(load_error(path, arch=ARCH))


def test_input_file_naming_code_is_refused_not_damaged(tmp_path: Path) -> None:
    from layerprof.errors import InputSpecError
    from layerprof.load.inputs import build_inputs

    path = tmp_path / "x.pt"
    path.write_bytes(pickle.dumps(_Calls(eval, "1"), protocol=4))
    with pytest.raises(InputSpecError, match=r"was refused \(it contains builtins\.eval\)"):
        build_inputs([f"@{path}"])
    path.write_bytes(pickle.dumps(_Calls(eval, "1"), protocol=2)[:9])
    with pytest.raises(InputSpecError, match="damaged pickle stream"):
        build_inputs([f"@{path}"])
