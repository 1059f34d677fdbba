"""The server's import graph (issue 42): one way, and the routes imported by the app alone.

Inside ``tracestore.server``, routes call use cases, use cases call ``db/`` and
``storage/``, and ``serving/`` calls use cases, never routes (docs/architecture.md, "Which
way imports go"). Read from the source, every import statement counted wherever it stands
(a function's lazy import, a ``TYPE_CHECKING`` block): a cycle that only a lazy import
hides is a cycle still."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import tracestore.server

SERVER = "tracestore.server"
ROOT = Path(tracestore.server.__file__).parent
APP = f"{SERVER}.app"
ROUTES = f"{SERVER}.routes"


def _modules() -> dict[str, Path]:
    """Every module of the server package by its dotted name (a package by its own)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join((SERVER, *parts))] = path
    return found


def _imported(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The server modules ``name`` (at ``path``) imports: ``from a import b`` names the
    module ``a.b`` when there is one, else ``a``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            # ``import a.b.c`` loads a.b.c; its packages are the interpreter's, not edges.
            if target in modules and target != name:
                yield target


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: set(_imported(name, path, modules)) for name, path in modules.items()}


def test_only_the_app_imports_a_route_module() -> None:
    graph = _graph()
    assert any(target.startswith(ROUTES + ".") for target in graph[APP])
    importers = sorted(
        f"{name} imports {target}"
        for name, targets in graph.items()
        for target in targets
        if (target == ROUTES or target.startswith(ROUTES + ".")) and name != APP
    )
    assert importers == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_servers_imports_go_one_way() -> None:
    graph = _graph()
    assert len(graph) > 40 and graph[f"{SERVER}.uploads"]
    assert _cycles(graph) == []


def test_a_cycle_is_found() -> None:
    """The check itself: a graph with a loop of three has that one cycle."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def _tests_imports() -> Iterator[tuple[str, str]]:
    """(file, imported name) for every import of a ``tests`` module outside tests/support, and
    every relative import."""
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                targets = [f"{module}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                if target.startswith((".", "tests.")) and not target.startswith("tests.support."):
                    yield str(path.relative_to(root.parent)), target


def test_tests_share_helpers_through_support_only() -> None:
    """A helper lives in tests/support/; test modules (and conftests) never import each other,
    so moving or deleting one test module breaks no other."""
    assert list(_tests_imports()) == []
