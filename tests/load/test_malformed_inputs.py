"""Malformed or hostile command lines and models end in one line and exit 2, never a crash."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from layerprof import machine
from layerprof.cli import main
from layerprof.errors import InputSpecError, ModelLoadError, UsageError
from layerprof.load import limits
from layerprof.load.inputs import build_inputs
from layerprof.load.modulegraph import check_acyclic, find_cycle
from tests.support.hostile_models import Looping, Tied
from tests.support.paths import ROOT

FAST = ["--warmup", "1", "--iters", "2"]


@pytest.fixture(autouse=True)
def _cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def one_line(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    _, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (code, err)
    assert lines and lines[0].startswith("layerprof: error: "), err
    assert "Traceback" not in err and len(lines) <= 2, err
    return lines[0]


@pytest.mark.parametrize(
    ("factory", "needle"),
    [
        ("exits_zero", "raised SystemExit: 0"),
        ("exits_three", "raised SystemExit: 3"),
        ("stops", "raised Stop: told to stop"),
    ],
)
def test_arch_factory_raising_base_exceptions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, factory: str, needle: str
) -> None:
    out = tmp_path / "p.json"
    line = one_line(
        capsys, "run", "--arch", f"tests.support.hostile_models:{factory}", "--input", "2x4", *FAST,
        "--json", str(out),
    )  # fmt: skip
    assert f"--arch tests.support.hostile_models:{factory}: calling it {needle}" in line
    assert not out.exists()


def test_arch_module_exiting_on_import(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    script = tmp_path / "train_script.py"
    script.write_text("import sys\nsys.exit('usage: train_script.py DATA')\n")
    line = one_line(capsys, "run", "--arch", f"{script}:Net", "--input", "2x4")
    assert "raised SystemExit: usage: train_script.py DATA" in line


def test_model_exiting_in_forward(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line(capsys, "run", "--arch", "tests.support.hostile_models:ExitsInForward",
                    "--input", "2x4", *FAST)  # fmt: skip
    assert line == "layerprof: error: the model's code raised SystemExit: 0"


def test_ctrl_c_in_factory_is_still_an_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    from layerprof.load import specs as loading

    def interrupted(spec: str) -> object:
        def factory() -> None:
            raise KeyboardInterrupt

        return factory

    monkeypatch.setattr(loading, "import_callable", interrupted)
    with pytest.raises(KeyboardInterrupt):
        loading.build_arch("x:y")


@pytest.mark.parametrize("threads", ["100000", str(limits.max_threads() + 1)])
def test_absurd_thread_count_refused(capsys: pytest.CaptureFixture[str], threads: str) -> None:
    line = one_line(capsys, "run", "--arch", "tests.support.cli_models:Net", "--input", "2x4",
                    "--threads", threads)  # fmt: skip
    assert f"--threads: {threads} threads is more than 4 per CPU" in line


def test_thread_count_checked_from_python_too() -> None:
    from layerprof.capture.options import RunOptions

    with pytest.raises(UsageError, match="more than 4 per CPU"):
        RunOptions(threads=100_000)
    assert RunOptions(threads=limits.max_threads()).threads == limits.max_threads()


@pytest.mark.parametrize(
    ("argument", "value"),
    [("iters", "3"), ("warmup", 2.0), ("threads", "x"), ("iters", True), ("warmup", None)],
)
def test_profile_arguments_of_the_wrong_type_are_one_line(argument: str, value: object) -> None:
    import layerprof

    model = torch.nn.Linear(4, 4)
    with pytest.raises(UsageError, match=f"^{argument} must be a whole number") as err:
        layerprof.profile(model, torch.randn(2, 4), **{argument: value})
    assert repr(value) in str(err.value) and "\n" not in str(err.value)
    assert not model._forward_hooks and not model._forward_pre_hooks  # nothing left on it


def test_numpy_integers_are_counts_too() -> None:
    import numpy as np

    import layerprof

    prof = layerprof.profile(torch.nn.Linear(4, 4), torch.randn(2, 4), iters=np.int64(3), warmup=1)
    assert type(prof.meta.iters) is int and prof.meta.iters == 3


def test_thread_limit_is_what_torch_survives() -> None:
    # The bound is not arbitrary: torch dies on absurd counts instead of refusing them.
    # (torch 2.13 crashes; 2.11 hangs, which is no surviving either)
    code = "import torch; torch.set_num_threads(100000); x = torch.randn(64, 64); x @ x"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return
    assert done.returncode != 0


@pytest.mark.parametrize("seed", [str(2**64), str(-(2**63) - 1), "1" * 40])
def test_huge_seed_refused(capsys: pytest.CaptureFixture[str], seed: str) -> None:
    line = one_line(capsys, "run", "--arch", "tests.support.cli_models:Net", "--input", "2x4",
                    "--seed", seed)  # fmt: skip
    assert f"--seed: seed {seed} is outside" in line


def test_largest_seed_works() -> None:
    built = build_inputs(["2x4"], seed=2**64 - 1)
    assert built.args[0].shape == (2, 4)
    with pytest.raises(UsageError, match="64 bits"):
        build_inputs(["2x4"], seed=2**64)


def test_input_that_cannot_fit_refused_before_allocating(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machine, "available_memory", lambda: 8 * 2**30)
    line = one_line(capsys, "run", "--arch", "tests.support.cli_models:Net", "--input",
                    "100000x100000", *FAST)  # fmt: skip
    assert (
        "bad input spec '100000x100000': 10,000,000,000 elements of float32 need 74.5 GiB"
        " to build, more than the 8.0 GiB of memory available" in line
    )


def test_inputs_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = "1024x1024x64:int64[0,10)"  # 512 MiB kept, 1 GiB while drawn as int64
    monkeypatch.setattr(machine, "available_memory", lambda: 1400 * 2**20)
    with pytest.raises(InputSpecError, match=r"after 512\.0 MiB of earlier inputs"):
        build_inputs([spec, spec])


def test_absurd_input_refused_with_real_memory(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line(capsys, "run", "--arch", "tests.support.cli_models:Net", "--input",
                    "10000000x10000000x4", *FAST)  # fmt: skip
    assert "of memory available" in line


def test_available_memory_is_known_here() -> None:
    room = machine.available_memory()
    assert room is None or room > 0


@pytest.mark.parametrize(
    ("files", "room"),
    [
        ({"memory.max": "3000\n", "memory.current": "1000\n"}, 2000),  # v2
        ({"memory.max": "max\n", "memory.current": "1000\n"}, None),  # v2, no limit
        (
            {"memory/memory.limit_in_bytes": "5000", "memory/memory.usage_in_bytes": "4000"},
            1000,
        ),  # v1
        (
            {
                "memory/memory.limit_in_bytes": str(2**63 - 4096),
                "memory/memory.usage_in_bytes": "1",
            },
            None,
        ),  # v1, no limit
        ({"memory.max": "100", "memory.current": "400"}, 0),  # over the limit: no room
        ({}, None),  # no cgroup files
    ],
)
def test_cgroup_room_reads_v1_and_v2(
    tmp_path: Path, files: dict[str, str], room: int | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert machine._cgroup_room(tmp_path) == room


def _sparse(tmp_path: Path, *, broken: bool = False) -> Path:
    indices = torch.tensor([[0, 5 if broken else 1], [1, 3]])
    value = torch.sparse_coo_tensor(indices, torch.tensor([1.0, 2.0]), (2, 4),
                                    check_invariants=False)  # fmt: skip
    path = tmp_path / ("broken.pt" if broken else "sparse.pt")
    torch.save(value, path)
    return path


def test_sparse_input_supported(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    built = build_inputs([f"@{_sparse(tmp_path)}"])
    assert built.args[0].layout == torch.sparse_coo
    code = main(["run", "--arch", "tests.support.cli_models:Net", "--input", f"@{_sparse(tmp_path)}",
                 *FAST, "--quiet"])  # fmt: skip
    assert code == 0, capsys.readouterr().err


def test_sparse_input_breaking_invariants_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _sparse(tmp_path, broken=True)
    line = one_line(capsys, "run", "--arch", "tests.support.cli_models:Net", "--input", f"@{path}")
    assert f"{path} holds a sparse tensor that breaks its invariants" in line


def test_module_tree_with_a_loop(capsys: pytest.CaptureFixture[str]) -> None:
    assert find_cycle(Looping()) == ("encoder.1.owner", "")
    line = one_line(
        capsys, "run", "--arch", "tests.support.hostile_models:Looping", "--input", "2x4"
    )
    assert "the module tree has a loop: encoder.1.owner is the model itself (Looping)" in line


def test_loop_to_a_middle_ancestor() -> None:
    model = Tied()
    model.a.up = model.a  # a module that is its own child
    with pytest.raises(ModelLoadError, match=r"a\.up is its ancestor a;"):
        check_acyclic(model)


def test_shared_modules_are_not_a_loop() -> None:
    assert find_cycle(Tied()) is None
    shared = torch.nn.Linear(2, 2)
    diamond = torch.nn.ModuleDict(
        {"left": torch.nn.Sequential(shared), "right": torch.nn.Sequential(shared)}
    )
    assert find_cycle(diamond) is None


def test_deep_tree_walked_without_recursion() -> None:
    model: torch.nn.Module = torch.nn.Identity()
    for _ in range(5000):  # deeper than Python's recursion limit
        model = torch.nn.Sequential(model)
    assert find_cycle(model) is None


def test_looping_model_refused_from_python() -> None:
    import layerprof

    model = Looping()
    with pytest.raises(ModelLoadError, match="loop"):
        layerprof.profile(model, torch.randn(2, 4), warmup=0, iters=1)
