"""Reasoning: split a model's thinking from its answer."""

from __future__ import annotations

__all__ = ["split_reasoning"]


def split_reasoning(text: str) -> tuple[str | None, str]:
    """Return ``(reasoning, answer)``; reasoning is ``None`` when there is none."""
    start, end = "<think>", "</think>"
    if end not in text:
        return None, text
    head, _, answer = text.partition(end)
    reasoning = head.split(start, 1)[1] if start in head else head
    return reasoning.strip(), answer.lstrip()
