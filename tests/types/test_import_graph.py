"""The modules of ``outlines_like.types`` import each other without cycles, and never ``fsm``.

The graph is read from the source: every ``import`` counts, function-level ones too, except
those under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import pathlib

import outlines_like

ROOT = pathlib.Path(outlines_like.__file__).parent
TYPES = ROOT / "types"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            # ``from pkg import mod`` imports the module; ``from mod import name``, the module
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found & modules


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    modules = set(paths)
    return {name: _imports(path, modules) - {name} for name, path in paths.items()}


def _cycle(graph: dict[str, set[str]], nodes: set[str]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        stack.append(name)
        for nxt in sorted(graph[name] & nodes):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[name] = 2
        return None

    for name in sorted(nodes):
        if name not in state:
            found = visit(name)
            if found:
                return found
    return None


def test_types_has_no_import_cycle() -> None:
    graph = _graph()
    nodes = {name for name in graph if name.startswith("outlines_like.types")}
    assert _cycle(graph, nodes) is None, " -> ".join(_cycle(graph, nodes) or [])


def test_types_never_imports_the_masker() -> None:
    graph = _graph()
    for name, deps in graph.items():
        if name.startswith("outlines_like.types"):
            assert not {d for d in deps if d.startswith("outlines_like.fsm")}, name


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _cycle(graph, set(graph)) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}, {"a", "b"}) is None
