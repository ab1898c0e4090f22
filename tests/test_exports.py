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
    "RetryPolicy",
    "ServerInfo",
    "ToolCall",
    "TransformersModel",
    "TruncatedOutputWarning",
    "Usage",
    "__version__",
    "aggregate_chunks",
    "arun_tools",
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
