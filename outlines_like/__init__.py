"""outlines-like: make LLM output fit a shape, on any server or a local model.

```python
import openai
import outlines_like as ol

model = ol.from_server(openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="-"))
model.parse("How many legs has a spider?", int)
```

Every name below is imported on first use (PEP 562 module ``__getattr__``), so
``import outlines_like.types`` loads neither ``openai`` nor ``httpx``: a program that only
builds types or schemas does not pay for the client. ``__version__`` is read from the
installed package's metadata; ``pyproject.toml`` is the one place it is written.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time see __getattr__
    from outlines_like import errors, types
    from outlines_like.adapters import ServerInfo
    from outlines_like.adapters.report import check
    from outlines_like.inputs import Chat, Image
    from outlines_like.models import (
        AsyncModel,
        Completion,
        Generator,
        Model,
        RateLimiter,
        ReaskPolicy,
        RetryPolicy,
        TransformersModel,
        TruncatedOutputWarning,
        Usage,
        from_llamacpp,
        from_ollama,
        from_openai,
        from_server,
        from_sglang,
        from_tgi,
        from_transformers,
        from_vllm,
    )
    from outlines_like.models.tool_loop import arun_tools, run_tools
    from outlines_like.reasoning import split_reasoning
    from outlines_like.streaming import aggregate_chunks
    from outlines_like.tools import ToolCall, tool_choice, tool_schema

    __version__: str

__all__ = [
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
]

_HOMES: dict[str, str] = {  # every other public name lives in outlines_like.models
    "check": "outlines_like.adapters.report",
    "ServerInfo": "outlines_like.adapters",
    "Chat": "outlines_like.inputs",
    "Image": "outlines_like.inputs",
    "split_reasoning": "outlines_like.reasoning",
    "aggregate_chunks": "outlines_like.streaming",
    "ToolCall": "outlines_like.tools",
    "arun_tools": "outlines_like.models.tool_loop",
    "run_tools": "outlines_like.models.tool_loop",
    "tool_choice": "outlines_like.tools",
    "tool_schema": "outlines_like.tools",
}
_SUBMODULES = ("errors", "types")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("outlines-like")
    except PackageNotFoundError:  # a clone on sys.path, not installed
        return "0+unknown"


def __getattr__(name: str) -> Any:
    """Import a public name on first use, then keep it in the module's namespace."""
    if name == "__version__":
        value: Any = _version()
    elif name in _SUBMODULES:
        value = importlib.import_module(f"outlines_like.{name}")
    elif name in __all__:
        home = _HOMES.get(name, "outlines_like.models")
        value = getattr(importlib.import_module(home), name)
    else:
        raise AttributeError(f"module 'outlines_like' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
