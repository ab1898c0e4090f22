"""OpenAI: strict ``response_format`` json_schema (rewritten for strict mode) and json_object.

OpenAI enforces a subset of JSON Schema and nothing else: regex and grammars raise
``UnsupportedConstraintError`` before any request goes out, and so does a schema strict mode
cannot express (the message names the keyword and where it is).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from outlines_like.adapters._common import ResponseFormatAdapter
from outlines_like.adapters._schema import to_openai_strict
from outlines_like.adapters.base import ServerKind

__all__ = ["OpenAIAdapter"]


@dataclasses.dataclass(frozen=True)
class OpenAIAdapter(ResponseFormatAdapter):
    """The OpenAI API dialect (api.openai.com, Azure OpenAI)."""

    kind: ServerKind = dataclasses.field(default="openai", init=False)
    completions_hint: ClassVar[str] = (
        "OpenAI's legacy completions endpoint takes no response_format; use chat"
    )
    marks_lenient: ClassVar[bool] = False  # strict mode refuses unknown keywords

    def prepare_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The schema made valid for strict mode (raises for what strict mode cannot express)."""
        return to_openai_strict(schema)
