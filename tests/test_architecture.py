"""The pipeline's shape, checked on the code (see docs/architecture.md).

Every import of a layerprof module (top-level or inside a function) must go
down the layers: the pivot imports no source, analysis or renderer; trace/
never imports torch-side capture or load code; renderers read the pivot and
the analyses, never capture objects or trace internals. There are no import
cycles between modules, and the library never prints (only the CLI does).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "layerprof"

#: Layer of every module, by its path prefix (the first match wins). Lower numbers
#: are further down; a module may import its own layer and any lower one.
LAYERS: tuple[tuple[str, int], ...] = (
    ("layerprof.errors", 0),
    ("layerprof.units", 0),
    ("layerprof.files", 0),
    ("layerprof.reading", 0),
    ("layerprof.machine", 0),
    ("layerprof.version", 0),
    ("layerprof.stats", 1),
    ("layerprof.records", 2),
    ("layerprof.sections", 2),
    ("layerprof.profile", 3),
    ("layerprof.sinks", 3),
    ("layerprof.trace", 4),  # sources that need no torch
    ("layerprof.load", 5),  # sources that import torch
    ("layerprof.capture", 5),
    ("layerprof.analysis", 6),
    ("layerprof.codec", 7),
    ("layerprof.render", 8),
    ("layerprof.sources", 9),
    ("layerprof.outputs", 9),
    ("layerprof.cli", 10),
    ("layerprof.sweepcmd", 10),
    ("layerprof.__main__", 10),
    ("layerprof.integrations", 10),  # framework callbacks on the Recorder
    ("layerprof", 10),  # the package's __init__: the public API
)

#: Pairs of same-or-lower-layer packages that must not meet even so.
FORBIDDEN: tuple[tuple[str, str], ...] = (
    ("layerprof.trace", "layerprof.capture"),
    ("layerprof.trace", "layerprof.load"),
    ("layerprof.load", "layerprof.capture"),
    ("layerprof.analysis", "layerprof.trace"),
    ("layerprof.analysis", "layerprof.capture"),
    ("layerprof.render", "layerprof.capture"),
    ("layerprof.render", "layerprof.load"),
    ("layerprof.render", "layerprof.trace"),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(name: str) -> int:
    for prefix, number in LAYERS:
        if name == prefix or name.startswith(prefix + "."):
            return number
    raise AssertionError(f"{name} has no layer: add it to LAYERS")


def imports(path: Path, *, type_only_too: bool = False) -> set[str]:
    """layerprof modules a file imports, anywhere in it (TYPE_CHECKING blocks aside,
    unless ``type_only_too``)."""
    tree = ast.parse(path.read_text(), str(path))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        guarded = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        if guarded and not type_only_too:
            assert isinstance(node, ast.If)
            type_only.update(id(n) for sub in node.body for n in ast.walk(sub))
    package = module_name(path)
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("layerprof"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative imports are not used; resolve them anyway
                base = ".".join(package.split(".")[: -node.level] + ([base] if base else []))
            if base.startswith("layerprof"):
                for alias in node.names:
                    candidate = f"{base}.{alias.name}"
                    out.add(candidate if (SRC.parent / candidate.replace(".", "/")).exists()
                            or (SRC.parent / (candidate.replace(".", "/") + ".py")).exists()
                            else base)  # fmt: skip
    return out


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}
EDGES = {name: imports(path) - {name} for name, path in MODULES.items()}
# A circle through type-only imports is still two modules that cannot be read apart.
ALL_EDGES = {name: imports(path, type_only_too=True) - {name} for name, path in MODULES.items()}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_down_the_layers(name: str) -> None:
    here = layer(name)
    up = sorted(dep for dep in EDGES[name] if layer(dep) > here)
    assert not up, f"{name} (layer {here}) imports upward: {up}"
    for low, high in FORBIDDEN:
        if name.startswith(low):
            bad = sorted(d for d in EDGES[name] if d == high or d.startswith(high + "."))
            assert not bad, f"{name} must not import {high}: {bad}"


MODE_PACKAGES = ("hooks", "ops", "scripted", "compiled")


def test_the_runner_reaches_the_modes_only_through_their_protocol() -> None:
    """A new capture mode is a folder and a line in capture.modes, not a branch in the runner."""
    runner = ALL_EDGES["layerprof.capture.runner"]
    direct = sorted(
        d for d in runner for m in MODE_PACKAGES if d.startswith(f"layerprof.capture.{m}.")
    )
    assert not direct, f"the runner imports mode code directly: {direct}"
    for m in MODE_PACKAGES:
        assert f"layerprof.capture.{m}.mode" in MODULES, f"capture/{m}/ has no mode.py"
        assert f"layerprof.capture.{m}.mode" in ALL_EDGES["layerprof.capture.modes"]


def test_no_import_cycles() -> None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(ALL_EDGES.get(node, ())):
            if dep not in MODULES or dep == "layerprof":
                continue
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep) :], dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(MODULES):
        if name not in state and name != "layerprof":
            visit(name)


def test_the_library_never_prints() -> None:
    """Only the CLI writes to the terminal (and the console renderer, which is asked to)."""
    allowed = {"layerprof.cli", "layerprof.outputs", "layerprof.capture.progress"}
    for name, path in MODULES.items():
        if name in allowed or name.startswith("layerprof.render"):
            continue
        tree = ast.parse(path.read_text())
        calls = [
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"
        ]
        assert not calls, f"{name} prints (lines {calls})"
