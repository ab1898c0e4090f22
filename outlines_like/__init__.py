"""outlines-like: make LLM output fit a shape, on any server or a local model."""

from outlines_like import errors, types

__all__ = ["errors", "types"]
