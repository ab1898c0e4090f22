"""The package's shape: imports only go downward (no cycles), modules stay readable.

The import graph is built from the source with ``ast``, so it sees every import a module makes,
function-level ones included (a cycle hidden inside a function is still a cycle in the design).
Only imports under ``if TYPE_CHECKING:`` are left out: they never run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "outlines_like"

# Modules allowed past the line limit: each is one algorithm and says so in its docstring.
MAX_LINES = 600
LONG_MODULE_MARK = "one cohesive"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, skipping the bodies of ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a package counts as its ``__init__``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                targets = [
                    f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                    for alias in node.names
                ]
            for target in targets:
                # `import a.b.c` runs a, a.b and a.b.c; the deepest known module is the edge.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("outlines_like"):
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path that ends where it starts, or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_graph_sees_function_level_imports_but_not_type_checking() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import x_only_for_types\n"
        "def f():\n    import y_at_run_time\n"
    )
    names = [a.name for node in _imports(tree) for a in node.names]
    assert "y_at_run_time" in names
    assert "x_only_for_types" not in names


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 40
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_layers_import_only_downward() -> None:
    """The lower layers never reach up (docs/architecture.md draws the layers)."""
    forbidden = {
        "outlines_like.messages": ("outlines_like.",),
        "outlines_like.errors": ("outlines_like.",),
        "outlines_like.telemetry": ("outlines_like.",),
        "outlines_like.types": (
            "outlines_like.fsm",
            "outlines_like.models",
            "outlines_like.server",
        ),
        "outlines_like.adapters": ("outlines_like.models", "outlines_like.server"),
        "outlines_like.fsm": (
            "outlines_like.models",
            "outlines_like.server",
            "outlines_like.engine",
        ),
        "outlines_like.engine": ("outlines_like.models", "outlines_like.server"),
    }
    allowed_everywhere = ("outlines_like.errors",)
    wrong = []
    for module, targets in import_graph().items():
        for layer, banned in forbidden.items():
            if module != layer and not module.startswith(layer + "."):
                continue
            for target in targets:
                if target.startswith(allowed_everywhere) or target.startswith(layer):
                    continue
                if any(target == b.rstrip(".") or target.startswith(b) for b in banned):
                    wrong.append(f"{module} -> {target}")
    assert not wrong, "imports that go up a layer:\n" + "\n".join(sorted(wrong))


def test_adapters_never_import_the_sdk() -> None:
    """Adapters are pure payload builders: no ``openai``, ``httpx`` or ``httpx2`` import."""
    wrong = []
    for path in sorted((PACKAGE / "adapters").rglob("*.py")):
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            wrong += [f"{path.name}: {n}" for n in names if n.split(".")[0] in SDK_MODULES]
    assert not wrong


SDK_MODULES = {"openai", "httpx", "httpx2"}


@pytest.mark.parametrize("module", ["outlines_like.types", "outlines_like.adapters"])
def test_importing_the_constraint_language_loads_no_http_stack(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "sdk = {'openai', 'httpx', 'httpx2'}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in sdk)\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=PACKAGE.parent,
    ).stdout.strip()
    assert out == "", f"import {module} loaded: {out[:300]}"


def test_modules_stay_readable() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if LONG_MODULE_MARK not in " ".join(doc.split()).lower():
            long.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
    assert not long, (
        f"modules over {MAX_LINES} lines whose docstring does not say they are "
        f"{LONG_MODULE_MARK!r}:\n" + "\n".join(long)
    )
