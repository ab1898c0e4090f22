"""The public surface: exactly what ``__all__`` says, and every name importable."""

from __future__ import annotations

import importlib

import pytest

import outlines_like

EXPECTED = {
    "AsyncModel",
    "Chat",
    "Completion",
    "Generator",
    "Image",
    "Model",
    "RateLimiter",
    "ReaskPolicy",
    "RetryPolicy",
    "ServerInfo",
    "ToolCall",
    "TransformersModel",
    "TruncatedOutputWarning",
    "Usage",
    "__version__",
    "aggregate_chunks",
    "arun_tools",
    "check",
    "errors",
    "from_llamacpp",
    "from_ollama",
    "from_openai",
    "from_server",
    "from_sglang",
    "from_tgi",
    "from_transformers",
    "from_vllm",
    "run_tools",
    "split_reasoning",
    "tool_choice",
    "tool_schema",
    "types",
}


def test_top_level_exports() -> None:
    assert set(outlines_like.__all__) == EXPECTED
    for name in outlines_like.__all__:
        assert hasattr(outlines_like, name), name


@pytest.mark.parametrize(
    "module",
    [
        "outlines_like.types",
        "outlines_like.errors",
        "outlines_like.models",
        "outlines_like.adapters",
        "outlines_like.fsm",
        "outlines_like.reasoning",
        "outlines_like.tools",
        "outlines_like.streaming",
        "outlines_like.inputs",
    ],
)
def test_every_public_module_lists_what_it_exports(module: str) -> None:
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    assert names, f"{module} has no __all__"
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(mod, name), f"{module}.{name}"


def test_importing_the_package_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, outlines_like; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_importing_types_loads_no_client_library() -> None:
    """``outlines_like`` re-exports lazily: building types does not load openai or httpx."""
    import subprocess
    import sys

    code = (
        "import outlines_like.types, sys; "
        "print(sorted(m for m in ('openai', 'httpx', 'httpx2') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_lazy_names_are_the_real_objects() -> None:
    from outlines_like.inputs import Chat
    from outlines_like.models import from_server

    assert outlines_like.from_server is from_server
    assert outlines_like.Chat is Chat
    assert set(outlines_like.__all__) <= set(dir(outlines_like))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = outlines_like.nope


def test_one_version_source() -> None:
    import importlib.metadata
    import pathlib

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = pathlib.Path(__file__).parents[1] / "pyproject.toml"
    written = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert outlines_like.__version__ == importlib.metadata.version("outlines-like") == written
