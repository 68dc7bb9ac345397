"""The house's arrows: no import circle anywhere, and no import that runs up a floor (docs/architecture.md).

Every ``import`` and ``from ... import`` of every source file is read with :mod:`ast`, the ones inside
functions included (a lazy import is still a dependency), and resolved to a module of the project. Rooms,
bottom to top: ``rope_ref`` (the oracle), ``conformance``, ``backends``, ``peers``, ``benchmarks``. A room may
import its own modules and any room below it, except that ``backends`` sees of ``conformance`` only the
protocol it implements. ``rope_ref/cli/__init__.py`` and ``conformance/registry.py`` load
subcommands, backends and peers by module name (``importlib``): that is not an import, and it is the one
way up the floors (the command line and the backend registry are the house's front doors).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: folder -> dotted package it is installed as (pyproject's package-dir)
PACKAGES = {
    "rope_ref": "rope_ref",
    "conformance": "rope_ref.conformance",
    "backends": "rope_ref.backends",
    "peers": "rope_ref.peers",
    "benchmarks": "benchmarks",
}
#: room -> floor (1 = ground)
FLOORS = {"rope_ref": 1, "conformance": 2, "backends": 3, "peers": 4, "benchmarks": 5}
#: the only modules of a room that a room above it on this list may not reach otherwise
NARROW = {("backends", "conformance"): ("rope_ref.conformance.protocol",)}


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root)
    package = PACKAGES[rel.parts[0]]
    parts = [package, *rel.parts[1:]]
    parts[-1] = parts[-1][: -len(".py")]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file, for every ``.py`` file of the rooms (not tests, not generated folders)."""
    modules = {}
    for folder in PACKAGES:
        for path in sorted((root / folder).rglob("*.py")):
            if "golden" in path.relative_to(root).parts[1:-1]:
                continue
            modules[_module_name(path, root)] = path
    return modules


def room_of(module: str) -> str:
    """The room a dotted module name belongs to (``rope_ref.conformance.x`` -> ``conformance``)."""
    for folder, package in sorted(PACKAGES.items(), key=lambda kv: -len(kv[1])):
        if module == package or module.startswith(package + "."):
            return folder
    raise KeyError(module)


def _canonical(name: str) -> str:
    """``conformance.x`` (a source checkout's spelling) -> ``rope_ref.conformance.x``."""
    head = name.split(".")[0]
    if head in PACKAGES and PACKAGES[head] != head:
        return PACKAGES[head] + name[len(head) :]
    return name


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The project modules that ``module`` (at ``path``) imports, anywhere in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def add(name: str, names: list[str]) -> None:
        name = _canonical(name)
        for alias in names:
            if f"{name}.{alias}" in known:
                found.add(f"{name}.{alias}")
            elif name in known:
                found.add(name)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = _canonical(alias.name)
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if name:
                    found.add(name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            add(name, [alias.name for alias in node.names])
    found.discard(module)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = source_modules(root)
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


@functools.cache
def _tree_graph() -> dict[str, set[str]]:
    """The import graph of this tree, read once per test process (the tests below read it seven times)."""
    return import_graph()


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Every import that runs up a floor, or reaches past the narrow door of ``NARROW``."""
    bad = []
    for source, targets in sorted(graph.items()):
        here = room_of(source)
        for target in sorted(targets):
            there = room_of(target)
            if FLOORS[there] > FLOORS[here]:
                bad.append(f"{source} -> {target} (floor {FLOORS[here]} imports floor {FLOORS[there]})")
            elif (here, there) in NARROW and target not in NARROW[here, there]:
                bad.append(f"{source} -> {target} ({here} may use only {', '.join(NARROW[here, there])})")
    return bad


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    """The reader itself: a function-level import, a relative one and a source-checkout spelling all count."""
    for folder in PACKAGES:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "rope_ref" / "low.py").write_text("def f():\n    from conformance import high\n")
    (tmp_path / "conformance" / "high.py").write_text("from ..low import f\n")
    (tmp_path / "backends" / "adapter.py").write_text("from rope_ref.conformance import high\n")
    graph = import_graph(tmp_path)
    assert graph["rope_ref.low"] == {"rope_ref.conformance.high"}
    assert graph["rope_ref.conformance.high"] == {"rope_ref.low"}
    assert circles(graph) == [["rope_ref.conformance.high", "rope_ref.low"]]
    assert upward_arrows(graph) == [
        "rope_ref.backends.adapter -> rope_ref.conformance.high (backends may use only "
        "rope_ref.conformance.protocol)",
        "rope_ref.low -> rope_ref.conformance.high (floor 1 imports floor 2)",
    ]


def test_no_import_circle():
    found = circles(_tree_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_upward_import():
    found = upward_arrows(_tree_graph())
    assert not found, "imports that run up a floor:\n" + "\n".join(found)


@pytest.mark.parametrize("room", sorted(FLOORS))
def test_every_room_is_read(room):
    """A room with no module would make the two tests above pass vacuously."""
    assert any(room_of(m) == room for m in _tree_graph())
