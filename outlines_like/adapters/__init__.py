"""Server adapters: one pure adapter per server dialect, and the recognisers of probe answers.

Nothing here performs I/O or imports a client: the probing is a step of the model's flow
(``outlines_like.models.detection``), which reads the answers with ``adapters.detect``.

```python
info = ServerInfo("vllm", "0.32.0")         # what detection found (or what you know)
fields = get_adapter(info).constraint_fields(term, endpoint="chat")
# {"extra_body": {"structured_outputs": {"regex": "..."}}}
```
"""

from __future__ import annotations

from typing import get_args

from outlines_like.adapters.base import (
    Adapter,
    ConstraintFields,
    Endpoint,
    ServerInfo,
    ServerKind,
)
from outlines_like.adapters.generic import GenericAdapter
from outlines_like.adapters.llamacpp import LlamaCppAdapter
from outlines_like.adapters.ollama import OllamaAdapter
from outlines_like.adapters.openai import OpenAIAdapter
from outlines_like.adapters.sglang import SGLangAdapter
from outlines_like.adapters.tgi import TGIAdapter
from outlines_like.adapters.vllm import VLLMAdapter

__all__ = [
    "SERVER_KINDS",
    "Adapter",
    "ConstraintFields",
    "Endpoint",
    "GenericAdapter",
    "LlamaCppAdapter",
    "OllamaAdapter",
    "OpenAIAdapter",
    "SGLangAdapter",
    "ServerInfo",
    "ServerKind",
    "TGIAdapter",
    "VLLMAdapter",
    "get_adapter",
    "get_adapter_for",
]

SERVER_KINDS: tuple[str, ...] = get_args(ServerKind)
"""Every accepted ``server=`` value."""

_SINGLETONS: dict[str, Adapter] = {
    "sglang": SGLangAdapter(),
    "llamacpp": LlamaCppAdapter(),
    "openai": OpenAIAdapter(),
    "tgi": TGIAdapter(),
    "ollama": OllamaAdapter(),
    "generic": GenericAdapter(),
}


def get_adapter_for(kind: str, version: str | None = None) -> Adapter:
    """Return the adapter for a server kind (``"sglang"``, ``"vllm"``, ...) and version.

    Only vLLM's dialect depends on the version (``None``: the newest).

    Raises:
        ValueError: ``kind`` is not one of ``SERVER_KINDS``.
    """
    if kind == "vllm":
        return VLLMAdapter(version)
    adapter = _SINGLETONS.get(kind)
    if adapter is None:
        raise ValueError(
            f"unknown server kind {kind!r}; expected one of: {', '.join(SERVER_KINDS)}"
        )
    return adapter


def get_adapter(info: ServerInfo) -> Adapter:
    """Return the adapter for what a server said it is."""
    return get_adapter_for(info.kind, info.version)
