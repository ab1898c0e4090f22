"""JSON Schema -> regex (placeholder until the converter lands)."""

from __future__ import annotations

from typing import Any

from outlines_like.errors import UnsupportedConstraintError

__all__ = ["json_schema_to_regex"]


def json_schema_to_regex(
    schema: dict[str, Any], *, whitespace_pattern: str | None = None, lenient: bool = False
) -> str:
    """Return a regex matching exactly the JSON documents valid under ``schema``."""
    raise UnsupportedConstraintError("JSON Schema -> regex is not built yet")
