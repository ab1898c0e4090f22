"""The engine sits below models and server: checked on the source, imports included lazily."""

from __future__ import annotations

import ast
import pathlib

import outlines_like

PACKAGE = pathlib.Path(outlines_like.__file__).parent
ALLOWED = ("outlines_like.engine", "outlines_like.fsm", "outlines_like.inputs")
# _scan: the pure text scanners under reasoning (the pipeline holds back stop-string prefixes)
ALLOWED_ALSO = (
    "outlines_like.reasoning",
    "outlines_like._scan",
    "outlines_like.errors",
    "outlines_like.messages",
)


def _imports(path: pathlib.Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("outlines_like")}


def test_the_engine_imports_only_lower_layers() -> None:
    for path in sorted((PACKAGE / "engine").glob("*.py")):
        for name in _imports(path):
            assert name.startswith(ALLOWED + ALLOWED_ALSO), f"{path.name} imports {name}"


def test_the_local_model_does_not_import_the_server() -> None:
    names = _imports(PACKAGE / "models" / "local.py")
    assert not [n for n in names if n.startswith("outlines_like.server")], names
    assert "outlines_like.engine.pipeline" in names
