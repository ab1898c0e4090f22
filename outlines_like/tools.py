"""Tool calls: schemas from Python functions, and calls read from any server's answer."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ToolCall"]


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """A call the model asked for: ``name(**arguments)``."""

    id: str
    name: str
    arguments: dict[str, Any]
