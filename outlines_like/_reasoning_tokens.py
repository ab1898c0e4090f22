"""Reasoning in token ids, on the serving side: where ``<think>...</think>`` lies in a chunk.

Fed the generated ids chunk by chunk, :class:`ReasoningTokenParser` reports the reasoning span
of each chunk (:class:`ReasoningSpan`) and whether reasoning goes on; the text-level rules
live in :mod:`outlines_like.reasoning`, which re-exports both names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

__all__ = ["THINK_END", "THINK_START", "ReasoningSpan", "ReasoningTokenParser"]

THINK_START = "<think>"
THINK_END = "</think>"

_State = Literal["start", "reasoning", "answer"]


@dataclasses.dataclass(frozen=True)
class ReasoningSpan:
    """Where the reasoning lies in one chunk of token ids (slice bounds into the chunk).

    Attributes:
        start: First reasoning token (tags excluded).
        end: One past the last reasoning token (tags excluded).
        outer_start: First token of the reasoning with its tags.
        outer_end: One past the reasoning with its tags; answer tokens start here
            (when the reasoning ended in this chunk).
    """

    start: int
    end: int
    outer_start: int
    outer_end: int

    @property
    def is_empty(self) -> bool:
        """Whether the chunk holds no reasoning token and no tag."""
        return self.outer_start == self.outer_end


class ReasoningTokenParser:
    """Server-side reasoning parser over token ids, fed chunk by chunk.

    Constructed with the ids of the think-start and think-end tokens (both single special
    tokens in Qwen3, DeepSeek-R1, QwQ). :meth:`stream` returns the reasoning span of each
    chunk and whether reasoning continues after it; tokens before ``outer_start`` and after
    ``outer_end`` are answer tokens. Only the first reasoning block counts: a think tag later
    in the answer is answer text.

    Args:
        think_start_id: Token id of ``<think>``; ``None`` when the model never emits it.
        think_end_id: Token id of ``</think>``.
        think_open: The prompt already opened the reasoning (the template ends with
            ``<think>``), so the output starts inside it.
    """

    def __init__(
        self, think_start_id: int | None, think_end_id: int, *, think_open: bool = False
    ) -> None:
        if not isinstance(think_end_id, int) or (
            think_start_id is not None and not isinstance(think_start_id, int)
        ):
            raise TypeError(
                "ReasoningTokenParser takes integer token ids; use "
                "ReasoningTokenParser.from_tokenizer(tokenizer) to look them up"
            )
        self.think_start_id = think_start_id
        self.think_end_id = think_end_id
        self.think_open = think_open
        self.reset()

    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: object,
        *,
        start: str = THINK_START,
        end: str = THINK_END,
        think_open: bool = False,
    ) -> ReasoningTokenParser:
        """Look the tag ids up in a tokenizer with ``convert_tokens_to_ids`` (transformers).

        Raises:
            ValueError: the tokenizer has no single token for the end tag.
        """
        convert = getattr(tokenizer, "convert_tokens_to_ids", None)
        if convert is None:
            raise TypeError("from_tokenizer needs a tokenizer with convert_tokens_to_ids()")
        unk = getattr(tokenizer, "unk_token_id", None)

        def lookup(tag: str) -> int | None:
            tid = convert(tag)
            return tid if isinstance(tid, int) and tid != unk else None

        end_id = lookup(end)
        if end_id is None:
            raise ValueError(
                f"the tokenizer has no single token for {end!r}: not a reasoning model?"
            )
        return cls(lookup(start), end_id, think_open=think_open)

    def reset(self) -> None:
        """Forget the stream: the next :meth:`stream` starts a new output."""
        self._state: _State = "reasoning" if self.think_open else "start"

    @property
    def in_reasoning(self) -> bool:
        """Whether the output is inside the reasoning now (or may still start it)."""
        return self._state != "answer"

    def stream(self, token_ids: Sequence[int]) -> tuple[ReasoningSpan, bool]:
        """Take the next chunk of generated ids.

        Returns:
            The chunk's reasoning span and whether reasoning continues after the chunk.
        """
        n = len(token_ids)
        if self._state == "answer":
            return ReasoningSpan(n, n, n, n), False
        i = 0
        outer_start = 0
        if self._state == "start":
            if n == 0:
                return ReasoningSpan(0, 0, 0, 0), True
            if token_ids[0] == self.think_start_id:
                i = 1
                self._state = "reasoning"
            else:
                self._state = "answer"
                return ReasoningSpan(0, 0, 0, 0), False
        start = i
        for j in range(i, n):
            if token_ids[j] == self.think_end_id:
                self._state = "answer"
                return ReasoningSpan(start, j, outer_start, j + 1), False
        return ReasoningSpan(start, n, outer_start, n), True

    def split(self, token_ids: Sequence[int]) -> tuple[list[int], list[int]]:
        """Split one complete output into ``(reasoning_ids, answer_ids)`` (tags dropped).

        Resets the parser first; the output is read as a whole.
        """
        self.reset()
        span, _ = self.stream(token_ids)
        ids = list(token_ids)
        self.reset()
        return ids[span.start : span.end], ids[: span.outer_start] + ids[span.outer_end :]
