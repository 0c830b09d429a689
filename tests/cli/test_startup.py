"""Start-up: ``--help`` and argument errors import only argparse-level modules.

``layerprof --help`` used to import numpy, the codec, the diff analysis and every
renderer (through the package's ``__init__``) before parsing an argument: 4x the
start-up of a bare Python importing ``rich.console``. These tests pin what a
fresh interpreter has imported after each, as ``test_help_does_not_import_torch``
pins torch (timings are in ``benchmarks/startup.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import DATA

#: the only layerprof modules that parsing arguments needs
ARGPARSE_LEVEL = {
    "layerprof",
    "layerprof.cli",
    "layerprof.cli.analyze",
    "layerprof.cli.demo",
    "layerprof.cli.diff",
    "layerprof.cli.emission",
    "layerprof.cli.history",
    "layerprof.cli.loading",
    "layerprof.cli.measure",
    "layerprof.cli.options",
    "layerprof.cli.report",
    "layerprof.cli.run",
    "layerprof.cli.sweep",
    "layerprof.errors",
    "layerprof.files",
    "layerprof.machine",
    "layerprof.cli.outputs",
    "layerprof.reading",
    "layerprof.sinks",
    "layerprof.cli.sources",
    "layerprof.version",
}
HEAVY = ("numpy", "torch", "rich", "orjson", "pandas", "fsspec", "dask")


def imported_after(argv: list[str]) -> set[str]:
    code = (
        "import sys\nfrom layerprof.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print('MODULES', ' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(done.stdout.rpartition("MODULES ")[2].split())


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["analyze", "--help"],
        ["report", "--help"],
        ["analyze"],  # a missing argument: one line, exit 2
        ["run", "m.pt", "--iters", "0"],  # a bad value
        ["nonsense"],
    ],
    ids=["help", "analyze-help", "report-help", "missing", "bad-value", "unknown"],
)
def test_parsing_arguments_imports_only_what_it_uses(argv: list[str]) -> None:
    modules = imported_after(argv)
    ours = {m for m in modules if m.split(".")[0] == "layerprof"}
    assert ours <= ARGPARSE_LEVEL, sorted(ours - ARGPARSE_LEVEL)
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert not heavy, heavy[:10]


def test_the_registry_fills_on_first_use(tmp_path: Path) -> None:
    """Renderers and the codec load when first asked for, whichever module came first;
    and ``layerprof.profile`` is the function (the pivot's module is layerprof.pivot.profile)."""
    code = (
        "import sys\n"
        "from layerprof.pivot.profile import Profile\n"
        "assert 'layerprof.render' not in sys.modules\n"
        "import layerprof\n"
        "assert callable(layerprof.profile), layerprof.profile\n"
        "assert layerprof.Profile is Profile and layerprof.diff.__module__.endswith('diff')\n"
        "from layerprof.trace import analyze\n"
        f"run = analyze({str(tmp_path / 't.json')!r})\n"
        "text = run.render('json')\n"
        "assert 'layerprof.render' in sys.modules and text\n"
        "assert callable(layerprof.profile), layerprof.profile\n"
    )
    (tmp_path / "t.json").write_text(
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,'
        ' "tid": 1, "ts": 10, "dur": 5}]}'
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_saving_and_loading_import_the_codec_alone(tmp_path: Path) -> None:
    """Profile.save()/load() reach the codec, not the renderers (rich, the HTML report)."""
    saved = DATA / "profiles" / "hooks.json"
    code = (
        "import sys\n"
        "from layerprof.pivot.profile import Profile\n"
        f"p = Profile.load({str(saved)!r})\n"
        f"p.save({str(tmp_path / 'again.json')!r})\n"
        f"assert Profile.load({str(tmp_path / 'again.json')!r}).layers == p.layers\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] == 'rich'"
        " or m.startswith('layerprof.render'))\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_cli_shows_the_sweeps_own_defaults() -> None:
    from layerprof.cli import sweep as command
    from layerprof.pivot.sections import sweep

    assert (command.SWEEP_ITERS, command.SWEEP_WARMUP) == (
        sweep.DEFAULT_ITERS,
        sweep.DEFAULT_WARMUP,
    )


def test_the_cli_offers_the_compile_choices_the_runner_knows() -> None:
    """The parser writes the choices out (importing the options would load the capture
    package for --help); they must stay the runner's."""
    import argparse

    from layerprof.capture.options import COMPILE_MODES, CUDA_GRAPH_MODES
    from layerprof.cli.options import add_compile_options
    from layerprof.pivot.sections.compiled import SPLIT_RULES

    p = argparse.ArgumentParser()
    add_compile_options(p)
    choices = {a.dest: a.choices for a in p._actions if a.choices}
    assert tuple(choices["compile_mode"]) == COMPILE_MODES + CUDA_GRAPH_MODES
    assert set(choices["compile_split"]) == set(SPLIT_RULES)
