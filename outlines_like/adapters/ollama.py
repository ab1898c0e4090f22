"""Ollama: ``response_format`` json_schema and json_object on ``/v1/chat/completions``.

Ollama's OpenAI route turns ``response_format`` into its native ``format`` (JSON Schema,
enforced by llama.cpp's grammar sampler since Ollama 0.5). It has no regex or grammar field,
and its ``/v1/completions`` takes no ``response_format``. Its converter is llama.cpp's, so it
drops the same keywords; with no field for our compiled form, those schemas are refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from outlines_like.adapters._common import ResponseFormatAdapter
from outlines_like.adapters.base import ServerKind
from outlines_like.adapters.capabilities import LLAMACPP_JSON_SCHEMA, Support

__all__ = ["OllamaAdapter"]


@dataclasses.dataclass(frozen=True)
class OllamaAdapter(ResponseFormatAdapter):
    """The Ollama dialect (OpenAI-compatible routes, Ollama >= 0.5; it reads only ``schema``)."""

    kind: ServerKind = dataclasses.field(default="ollama", init=False)
    schema_engine: ClassVar[Mapping[str, Support] | None] = LLAMACPP_JSON_SCHEMA
    completions_hint: ClassVar[str] = (
        "Ollama's /v1/completions takes no response_format; use the chat endpoint"
    )
