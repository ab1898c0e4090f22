"""Chat ``logprobs``: OpenAI's fields, plus each token's ``allowed_count`` and sample."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from outlines_like.engine.logprobs import TokenInfo
from outlines_like.server.logprobs import logprob_entry, logprobs_content, token_text

TOKENS = [b"a", b"bc", b"\xe2\x82", b"<eos>"]


def test_token_text_spells_a_partial_character_as_bytes() -> None:
    assert token_text(1, TOKENS) == ("bc", [98, 99])
    assert token_text(2, TOKENS) == ("bytes:\\xe2\\x82", [226, 130])
    assert token_text(99, TOKENS) == ("", [])


def test_an_entry_has_openai_fields_and_ours() -> None:
    info = TokenInfo(1, -0.5, top=((1, -0.5), (0, -1.0)), allowed_count=2, allowed_sample=(0, 1))
    entry = logprob_entry(info, TOKENS)
    assert entry == {
        "token": "bc",
        "logprob": -0.5,
        "bytes": [98, 99],
        "top_logprobs": [
            {"token": "bc", "logprob": -0.5, "bytes": [98, 99]},
            {"token": "a", "logprob": -1.0, "bytes": [97]},
        ],
        "allowed_count": 2,
        "allowed_sample": ["a", "bc"],
    }
    free = logprob_entry(TokenInfo(0, -2.0), TOKENS)
    assert free["allowed_count"] is None
    assert "allowed_sample" not in free
    assert logprobs_content([info], TOKENS)["content"] == [entry]


pytestmark = [pytest.mark.server, pytest.mark.torch]
MESSAGES = [{"role": "user", "content": "A plate."}]
PATTERN = "[a-z]{2}-[0-9]{2}"


def _chat(server: Any, **body: Any) -> dict[str, Any]:
    r = httpx.post(
        server.base_url + "/v1/chat/completions",
        json={"messages": MESSAGES, "max_tokens": 12, "seed": 5, **body},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def test_a_constrained_answer_reports_every_token_and_its_mask(server: Any) -> None:
    got = _chat(server, regex=PATTERN, logprobs=True, top_logprobs=3, allowed_sample=5)
    choice = got["choices"][0]
    assert re.fullmatch(PATTERN, choice["message"]["content"])
    content = choice["logprobs"]["content"]
    assert len(content) == got["usage"]["completion_tokens"]
    assert "".join(e["token"] for e in content[:-1]) == choice["message"]["content"]
    for entry in content:
        assert entry["allowed_count"] >= 1
        assert 1 <= len(entry["allowed_sample"]) <= 5
        assert len(entry["top_logprobs"]) <= 3
        assert entry["logprob"] <= 0
    dash = next(e for e in content if e["token"] == "-")
    assert dash["allowed_count"] == 1
    assert dash["allowed_sample"] == ["-"]


def test_free_text_has_no_mask_and_no_logprobs_unless_asked(server: Any) -> None:
    free = _chat(server, logprobs=True)["choices"][0]["logprobs"]["content"]
    assert free
    assert all(e["allowed_count"] is None and e["top_logprobs"] == [] for e in free)
    assert _chat(server, regex=PATTERN)["choices"][0]["logprobs"] is None


def test_streamed_chunks_carry_their_tokens(server: Any) -> None:
    entries: list[dict[str, Any]] = []
    text = ""
    body = {
        "messages": MESSAGES,
        "max_tokens": 12,
        "seed": 5,
        "regex": PATTERN,
        "stream": True,
        "logprobs": True,
        "stream_options": {"include_usage": True},
    }
    usage = None
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk["choices"]:
                text += choice["delta"].get("content") or ""
                if choice["logprobs"] is not None:
                    entries += choice["logprobs"]["content"]
    assert re.fullmatch(PATTERN, text)
    assert usage is not None
    assert len(entries) == usage["completion_tokens"]
    assert all(e["allowed_count"] >= 1 for e in entries)


def test_the_openai_client_reads_them(client: Any) -> None:
    done = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        max_tokens=12,
        seed=5,
        logprobs=True,
        top_logprobs=2,
        extra_body={"regex": PATTERN},
    )
    content = done.choices[0].logprobs.content
    assert content[0].token
    assert len(content[0].top_logprobs) <= 2
    assert content[0].model_extra["allowed_count"] >= 1
