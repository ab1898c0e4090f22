"""Per-token facts of one step, for requests that ask for logprobs: what was picked, and the mask.

The pipeline calls :func:`step_infos` once per step, after masking and sampling, for the rows
whose :class:`~outlines_like.engine.pipeline.SamplingParams` set ``logprobs``. The log-softmax
runs batched over those rows only; the mask facts come from the packed bitmask row the step
already filled (its popcount is the number of allowed tokens, a few microseconds even on a
150k-token vocabulary), so a request that does not ask pays nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["Asks", "TokenInfo", "allowed_count", "allowed_ids", "step_infos"]

MAX_TOP_LOGPROBS = 20
"""Most alternatives per token (OpenAI's limit for ``top_logprobs``)."""


class Asks(Protocol):
    """What a request asks to be told (:class:`~outlines_like.engine.pipeline.SamplingParams`)."""

    @property
    def logprobs(self) -> int | None:
        """Alternatives per token (``None``: nothing asked)."""
        ...

    @property
    def allowed_sample(self) -> int:
        """Allowed token ids to report per step."""
        ...


@dataclasses.dataclass(frozen=True)
class TokenInfo:
    """What one step picked, and what its mask allowed.

    Attributes:
        token_id: The token generated.
        logprob: Its log-probability under the masked distribution (before temperature).
        top: The most likely tokens of that distribution, ``(token_id, logprob)``, best first.
        allowed_count: Tokens the mask allowed (``None``: no mask applied at this step).
        allowed_sample: Some of the allowed token ids, spread over the allowed set.
    """

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()
    allowed_count: int | None = None
    allowed_sample: tuple[int, ...] = ()


def allowed_count(words: np.ndarray) -> int:
    """The number of set bits of a packed bitmask row (int32 words)."""
    unsigned = np.ascontiguousarray(words).view(np.uint32)
    counter = getattr(np, "bitwise_count", None)  # numpy >= 2.0
    if counter is not None:
        return int(counter(unsigned).sum())
    return int(np.unpackbits(unsigned.view(np.uint8)).sum())  # pragma: no cover - numpy 1.x


def allowed_ids(words: np.ndarray, limit: int) -> tuple[int, ...]:
    """Up to ``limit`` allowed token ids of a packed row, evenly spread over the allowed set.

    Bit ``i % 32`` of word ``i // 32`` stands for token ``i`` (little-endian words).
    """
    if limit <= 0:
        return ()
    raw = np.ascontiguousarray(words).astype("<u4", copy=False).view(np.uint8)
    ids = np.flatnonzero(np.unpackbits(raw, bitorder="little"))
    if len(ids) > limit:
        ids = ids[np.unique(np.linspace(0, len(ids) - 1, limit).astype(np.int64))]
    return tuple(int(i) for i in ids)


def step_infos(
    torch: Any,
    logits: Any,
    tokens: Sequence[int],
    rows: Sequence[tuple[Asks, np.ndarray | None]],
) -> list[TokenInfo | None]:
    """The :class:`TokenInfo` of each row that asks for one (``None`` for the others).

    Args:
        torch: The torch module.
        logits: The step's masked ``(N, V)`` logits.
        tokens: The token picked in each row (negative: sampling failed there).
        rows: Per row, what it asks and its packed mask words of this step (``None``:
            unmasked).
    """
    out: list[TokenInfo | None] = [None] * len(rows)
    wanted = [i for i, (asks, _) in enumerate(rows) if asks.logprobs is not None and tokens[i] >= 0]
    if not wanted:
        return out
    logprobs = torch.log_softmax(logits[wanted].float(), dim=-1)
    picked = torch.tensor([tokens[i] for i in wanted], device=logprobs.device)
    chosen = logprobs.gather(1, picked[:, None])[:, 0].tolist()
    k = min(max(rows[i][0].logprobs or 0 for i in wanted), MAX_TOP_LOGPROBS, logprobs.shape[1])
    top_values: list[list[float]] = [[] for _ in wanted]
    top_ids: list[list[int]] = [[] for _ in wanted]
    if k > 0:
        values, ids = logprobs.topk(k, dim=-1)
        top_values, top_ids = values.tolist(), ids.tolist()
    for j, i in enumerate(wanted):
        asks, words = rows[i]
        want = asks.logprobs or 0
        top = tuple(
            (int(t), float(v))
            for t, v in zip(top_ids[j][:want], top_values[j][:want], strict=True)
            if math.isfinite(v)
        )
        out[i] = TokenInfo(
            token_id=tokens[i],
            logprob=float(chosen[j]) if math.isfinite(chosen[j]) else -9999.0,
            top=top,
            allowed_count=None if words is None else allowed_count(words),
            allowed_sample=() if words is None else allowed_ids(words, asks.allowed_sample),
        )
    return out
