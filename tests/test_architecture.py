"""The pipeline's shape, checked on the code (see docs/architecture.md).

Every import of a layerprof module (top-level or inside a function) must go
down the layers: the pivot imports no source, analysis or renderer; trace/
never imports torch-side capture or load code; renderers read the pivot and
the analyses, never capture objects or trace internals; the console and the HTML
renderer never import each other. There are no import cycles between modules,
nor between the parts (submodules and subpackages) of any package, and the
library never prints (only the CLI does).
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
    ("layerprof.traceformat", 0),
    ("layerprof.pivot.notes", 0),  # the Note value: imports nothing of layerprof
    ("layerprof.stats", 1),
    ("layerprof.pivot.records", 2),
    ("layerprof.pivot.sections", 2),
    ("layerprof.pivot.profile", 3),
    ("layerprof.pivot", 3),  # the package's __init__: a docstring
    ("layerprof.sinks", 3),
    ("layerprof.trace", 4),  # sources that need no torch
    ("layerprof.load", 5),  # sources that import torch
    ("layerprof.capture", 5),
    ("layerprof.analysis", 6),
    ("layerprof.history", 6),  # the history store and its change points: reads the pivot
    ("layerprof.codec", 7),
    ("layerprof.render", 8),
    ("layerprof.cli", 10),  # the package: a command module, options, emission
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
    # the history reads Profiles the CLI hands it; it never measures or parses a trace
    ("layerprof.history", "layerprof.capture"),
    ("layerprof.history", "layerprof.load"),
    ("layerprof.history", "layerprof.trace"),
    ("layerprof.history", "layerprof.analysis"),
    # two renderers side by side: what both need lives below them (sections/, records)
    ("layerprof.render.console", "layerprof.render.html"),
    ("layerprof.render.html", "layerprof.render.console"),
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


#: The one upward import allowed, inside functions only: the pivot's save and load
#: (``layerprof.sinks``, which ``Profile.save``/``load`` call) import the codec where they
#: run. The codec builds and reads pivot objects, so it sits above them; a registrar the
#: codec filled on import hid the same dependency behind five hops (issue 45, item 4).
UPWARD_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset({("layerprof.sinks", "layerprof.codec")})


def _allowed(name: str) -> set[str]:
    return {high for low, high in UPWARD_EXCEPTIONS if low == name}


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}
EDGES = {name: imports(path) - {name} - _allowed(name) for name, path in MODULES.items()}
# A circle through type-only imports is still two modules that cannot be read apart.
ALL_EDGES = {
    name: imports(path, type_only_too=True) - {name} - _allowed(name)
    for name, path in MODULES.items()
}


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


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``graph`` (its nodes, the first repeated at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (found := visit(dep)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_cycles() -> None:
    # the package's __init__ imports the public API from everywhere: leave it out
    graph = {
        name: {d for d in deps if d in MODULES and d != "layerprof"}
        for name, deps in ALL_EDGES.items()
        if name != "layerprof"
    }
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


PACKAGES = sorted(name for name, path in MODULES.items() if path.name == "__init__.py")


def _part(package: str, module: str) -> str | None:
    """The submodule or subpackage of ``package`` that ``module`` lies in (None: outside)."""
    if not module.startswith(package + "."):
        return None
    return f"{package}.{module[len(package) + 1 :].split('.')[0]}"


def parts_graph(package: str, edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which parts of ``package`` import which other parts (through any of their modules)."""
    graph: dict[str, set[str]] = {}
    for name, deps in edges.items():
        here = _part(package, name)
        if here is None:
            continue
        there = {p for d in deps if (p := _part(package, d)) is not None and p != here}
        graph.setdefault(here, set()).update(there)
    return graph


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles_between_the_parts_of_a_package(package: str) -> None:
    """Two subpackages (or a subpackage and a module) of one package that import each
    other, even through different modules, cannot be read or moved apart."""
    cycle = find_cycle(parts_graph(package, ALL_EDGES))
    assert cycle is None, f"import cycle inside {package}: " + " -> ".join(cycle or ())


def test_the_cycle_checks_find_a_circle() -> None:
    """The checks above can fail: a circle between modules, and one between two parts of
    a package that no two modules close (a.x -> b.y, b.z -> a.w)."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    edges = {"p.a.x": {"p.b.y"}, "p.b.z": {"p.a.w"}, "p.a.w": set(), "p.b.y": set()}
    assert find_cycle(edges) is None  # no module circle...
    assert find_cycle(parts_graph("p", edges)) == ["p.a", "p.b", "p.a"]  # ...but a package one


def test_only_the_entry_point_imports_the_cli() -> None:
    """The command line is the top: no library module depends on it."""
    for name, deps in ALL_EDGES.items():
        if name.startswith("layerprof.cli") or name == "layerprof.__main__":
            continue
        bad = sorted(d for d in deps if d == "layerprof.cli" or d.startswith("layerprof.cli."))
        assert not bad, f"{name} imports the command line: {bad}"


def test_the_library_never_prints() -> None:
    """Only the CLI writes to the terminal (and the console renderer, which is asked to)."""
    allowed = {"layerprof.cli.outputs", "layerprof.capture.progress"}
    for name, path in MODULES.items():
        if name in allowed or name.startswith(("layerprof.cli", "layerprof.render")):
            continue
        tree = ast.parse(path.read_text())
        calls = [
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"
        ]
        assert not calls, f"{name} prints (lines {calls})"


def test_the_public_api_is_what_the_docs_list() -> None:
    """``layerprof.__all__`` and the table of docs/python-api.md name the same things:
    a public name is documented, and a documented name is public."""
    tree = ast.parse((SRC / "__init__.py").read_text())
    (listed,) = [
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets)
    ]
    doc = (SRC.parents[1] / "docs" / "python-api.md").read_text()
    table = doc.split("## The public API", 1)[1].split("\n## ", 1)[0]
    rows = [ln.split("|")[1].strip() for ln in table.splitlines() if ln.startswith("| `")]
    assert sorted(r.strip("`") for r in rows) == sorted(listed)
    public = [n for n in listed if not n.startswith("__")]
    assert all(hasattr(__import__("layerprof"), n) for n in public)


def test_the_trace_engine_never_reaches_its_job_machinery() -> None:
    """trace/jobs/ runs the engine on executors; the engine and trace/distributed/
    never import it (only the package's ``__init__`` re-exports ``analyze``), so a
    worker or a reader of one rank's trace needs none of the job machinery."""
    for name, deps in ALL_EDGES.items():
        if not name.startswith("layerprof.trace.") or name.startswith("layerprof.trace.jobs"):
            continue
        bad = sorted(d for d in deps if d.startswith("layerprof.trace.jobs"))
        assert not bad, f"{name} imports the job machinery: {bad}"


def test_trace_and_sections_never_import_torch() -> None:
    """The trace engine and the value objects run without torch (``analyze``, the
    torch-free CI): no import of it anywhere in them, inside functions included."""
    for name, path in MODULES.items():
        if not name.startswith(("layerprof.trace", "layerprof.pivot.sections")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                found = [node.module or ""]
            else:
                continue
            torch = [f for f in found if f == "torch" or f.startswith("torch.")]
            assert not torch, f"{name} imports {torch} (line {node.lineno})"


#: Modules whose import costs what a lazy import saves: a light module imported inside a
#: function instead of at the top must say why, on its line or the line above.
HEAVY_ROOTS = frozenset(
    {"torch", "numpy", "rich", "orjson", "transformers", "dask", "distributed", "fsspec",
     "multiprocessing", "concurrent", "asyncio", "playwright", "lightning"}
)  # fmt: skip


def _top_level_imports(path: Path) -> set[str]:
    """Modules a file imports at module level (TYPE_CHECKING blocks aside)."""
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


TOP_LEVEL = {name: _top_level_imports(path) for name, path in MODULES.items()}


def _heavy(module: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether importing ``module`` imports a heavy library, at module level, on the way."""
    if module.split(".")[0] in HEAVY_ROOTS:
        return True
    if module not in MODULES or module in seen:
        return False
    return any(_heavy(dep, seen | {module}) for dep in TOP_LEVEL[module])


def _lazy_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every layerprof module imported inside a function."""
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[int, str]] = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("layerprof"):
                out.append((node.lineno, node.module or ""))
            elif isinstance(node, ast.Import):
                out += [(node.lineno, a.name) for a in node.names if a.name.startswith("layerprof")]
    return out


@pytest.mark.parametrize(("low", "high"), sorted(UPWARD_EXCEPTIONS))
def test_the_one_upward_import_stays_inside_functions(low: str, high: str) -> None:
    """The exception is used (else it goes) and never at module level, where importing
    the pivot would import the codec (and, through it, every section type)."""
    assert high in imports(MODULES[low]), f"{low} no longer imports {high}: drop the exception"
    assert high not in _top_level_imports(MODULES[low]), f"{low} imports {high} at the top"


def test_a_light_module_imported_inside_a_function_says_why() -> None:
    """Imports go at the top; inside a function only what is worth deferring (it brings
    torch, numpy, rich... with it) or with a stated reason (a comment: a circle the
    top-level import would close, start-up the CLI must keep). The command line and the
    package's ``__init__`` defer on purpose: ``--help`` imports almost nothing."""
    unexplained = []
    for name, path in MODULES.items():
        if name == "layerprof" or name.startswith("layerprof.cli"):
            continue
        lines = path.read_text().splitlines()
        for line_no, module in _lazy_imports(path):
            line, above = lines[line_no - 1], lines[line_no - 2] if line_no > 1 else ""
            if "#" in line or above.strip().startswith("#"):
                continue
            target = module if module in MODULES else module.rsplit(".", 1)[0]
            if not _heavy(target):
                unexplained.append(f"{name}:{line_no} imports {module}")
    assert unexplained == [], "\n".join(unexplained)


#: ``(module, imported name) -> why`` for a private name one module may take from another.
#: Empty: a helper another module needs is public where it belongs (issue 45, item 7).
PRIVATE_IMPORT_EXCEPTIONS: dict[tuple[str, str], str] = {}


def private_uses(tree: ast.Module, name: str) -> list[str]:
    """``line: what`` for each private name (``_x``, not a dunder) that module ``name``
    takes from another layerprof module: ``from m import _x``, or ``m._x`` on an
    imported module ``m``. Tests may reach into internals; the package may not."""

    def private(attr: str) -> bool:
        return attr.startswith("_") and not attr.startswith("__")

    found: list[str] = []
    modules: dict[str, str] = {}  # local name -> the layerprof module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("layerprof"):
            base = node.module or ""
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                if whole in MODULES:
                    modules[alias.asname or alias.name] = whole
                elif private(alias.name) and base != name:
                    found.append(f"{node.lineno}: from {base} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("layerprof") and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not private(node.attr):
            continue
        owner = ast.unparse(node.value)  # an alias, or a dotted ``import layerprof.x`` path
        module = modules.get(owner, owner if owner in MODULES else name)
        if module != name:
            found.append(f"{node.lineno}: {module}.{node.attr}")
    return found


def test_no_private_name_crosses_modules() -> None:
    """A module's ``_private`` names are its own: another module that needs one gets a
    public helper instead (an explicit, reasoned exception otherwise)."""
    crossing = []
    for name, path in MODULES.items():
        for use in private_uses(ast.parse(path.read_text(), str(path)), name):
            imported = use.rsplit(" ", 1)[-1].rsplit(".", 1)[-1]
            if (name, imported) not in PRIVATE_IMPORT_EXCEPTIONS:
                crossing.append(f"{name}:{use}")
    assert crossing == [], "\n".join(crossing)


def test_the_private_name_check_finds_both_forms() -> None:
    """The check above can fail: an imported private name and one read off a module."""
    code = (
        "from layerprof.units import _scale, fmt_ms\n"
        "from layerprof.capture.recording import nodes\n"
        "import layerprof.stats as st\n"
        "import layerprof.pivot.records\n"
        "def f():\n"
        "    return nodes._Call, st._cache, nodes.NodeMarks, layerprof.pivot.records._x\n"
    )
    found = private_uses(ast.parse(code), "layerprof.somewhere")
    assert found == [
        "1: from layerprof.units import _scale",
        "6: layerprof.capture.recording.nodes._Call",
        "6: layerprof.stats._cache",
        "6: layerprof.pivot.records._x",
    ]
    assert private_uses(ast.parse("from layerprof.units import _scale"), "layerprof.units") == []


def test_test_folders_mirror_the_packages() -> None:
    """A test module sits in the folder of the module it tests, one level deeper too
    (``tests/capture/recording/`` for ``capture/recording/``; docs/architecture.md,
    "Tests"): every folder of ``tests/`` that holds test modules is a package of
    layerprof's, and a package of the suite's own (an ``__init__.py``: test modules are
    imported by their dotted names)."""
    tests = SRC.parents[1] / "tests"
    own = {"data", "golden", "support"}
    folders = {
        p.parent.relative_to(tests)
        for p in tests.rglob("test_*.py")
        if p.relative_to(tests).parts[0] not in own
    } - {Path()}
    stray = sorted(f.as_posix() for f in folders if not (SRC / f / "__init__.py").is_file())
    assert not stray, f"test folders that mirror no package of src/layerprof: {stray}"
    bare = sorted(f.as_posix() for f in folders if not (tests / f / "__init__.py").is_file())
    assert not bare, f"test folders without an __init__.py: {bare}"
