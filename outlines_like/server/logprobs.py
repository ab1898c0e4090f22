"""OpenAI ``logprobs`` entries from the engine's per-token facts, with the mask's extra fields.

Each entry has OpenAI's chat fields (``token``, ``logprob``, ``bytes``, ``top_logprobs``) and
two of ours, which OpenAI has no field for:

* ``allowed_count``: how many tokens the constraint's mask allowed at that step (``null`` when
  no mask applied: free text, or reasoning before the constraint starts);
* ``allowed_sample``: with the request's ``allowed_sample: N``, up to ``N`` of those tokens,
  spread over the allowed set (not the likeliest: ``top_logprobs`` shows those).

Logprobs are those of the masked distribution, before temperature and top-p.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from outlines_like.engine.logprobs import TokenInfo

__all__ = ["logprob_entry", "logprobs_content", "token_text"]


def token_text(token_id: int, tokens: Sequence[bytes]) -> tuple[str, list[int]]:
    r"""A token's text and bytes; a piece of a UTF-8 character is spelled ``bytes:\xNN``."""
    raw = tokens[token_id] if 0 <= token_id < len(tokens) else b""
    try:
        return raw.decode("utf-8"), list(raw)
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw), list(raw)


def logprob_entry(info: TokenInfo, tokens: Sequence[bytes]) -> dict[str, Any]:
    """One ``logprobs.content`` entry."""
    text, raw = token_text(info.token_id, tokens)
    top = []
    for token_id, logprob in info.top:
        alt, alt_raw = token_text(token_id, tokens)
        top.append({"token": alt, "logprob": logprob, "bytes": alt_raw})
    entry: dict[str, Any] = {
        "token": text,
        "logprob": info.logprob,
        "bytes": raw,
        "top_logprobs": top,
        "allowed_count": info.allowed_count,
    }
    if info.allowed_sample:
        entry["allowed_sample"] = [token_text(t, tokens)[0] for t in info.allowed_sample]
    return entry


def logprobs_content(infos: Iterable[TokenInfo], tokens: Sequence[bytes]) -> dict[str, Any]:
    """A choice's ``logprobs`` object: ``{"content": [entry, ...]}``."""
    return {"content": [logprob_entry(info, tokens) for info in infos]}
