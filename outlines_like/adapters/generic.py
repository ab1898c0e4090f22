"""Any other OpenAI-compatible server: JSON Schema and JSON objects through ``response_format``.

Nothing else is assumed. Regex, grammars and the completions endpoint raise
``UnsupportedConstraintError`` rather than send fields an unknown server may silently drop;
name the server (``server="vllm"``...) when it is one we know.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from outlines_like.adapters._common import ResponseFormatAdapter
from outlines_like.adapters.base import ServerKind

__all__ = ["GenericAdapter"]


@dataclasses.dataclass(frozen=True)
class GenericAdapter(ResponseFormatAdapter):
    """A plain OpenAI-compatible server: the schema goes as given."""

    kind: ServerKind = dataclasses.field(default="generic", init=False)
    completions_hint: ClassVar[str] = (
        "an unknown OpenAI-compatible server has no known constraint field on "
        "/v1/completions; use the chat endpoint, or name the server (server='vllm', "
        "'sglang', 'llamacpp')"
    )
