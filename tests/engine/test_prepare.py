"""Request preparation on a fake tokenizer: templates, the one meaning of a list, think tags, n."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from PIL import Image as PILImage

from outlines_like.engine.pipeline import SamplingParams
from outlines_like.engine.prepare import (
    PreparedPrompt,
    expand_runs,
    prepare_prompt,
    prepare_rendered,
    prepare_text,
    render_chat,
    template_messages,
    think_end_token_id,
)
from outlines_like.inputs import Chat, Image

_SPECIAL = {"<think>": 1001, "</think>": 1002}


class FakeTokenizer:
    """Characters are their code points; the think tags are one token each (when ``tags``)."""

    def __init__(self, *, template: bool = True, tags: bool = True) -> None:
        self.chat_template = "{{ fake }}" if template else None
        self.special = _SPECIAL if tags else {}
        self.calls: list[dict[str, Any]] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        assert add_special_tokens is False
        ids: list[int] = []
        i = 0
        while i < len(text):
            tag = next((t for t in self.special if text.startswith(t, i)), None)
            if tag is not None:
                ids.append(self.special[tag])
                i += len(tag)
            else:
                ids.append(ord(text[i]))
                i += 1
        return ids

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Any = None,
        add_generation_prompt: bool,
        tokenize: bool,
        **kwargs: Any,
    ) -> str:
        self.calls.append({"messages": list(messages), "tools": tools, **kwargs})
        assert add_generation_prompt
        assert not tokenize
        text = "".join(f"[{m['role']}]{m['content']}\n" for m in messages) + "[assistant]"
        if kwargs.get("enable_thinking") is False:
            return text + "<think></think>\n"
        return text + ("<think>" if kwargs.get("open_think") else "")


def test_think_end_must_be_one_token() -> None:
    assert think_end_token_id(FakeTokenizer(), option="--reasoning") == 1002
    with pytest.raises(ValueError, match=r"--reasoning needs '</think>' to be one token.* 8"):
        think_end_token_id(FakeTokenizer(tags=False), option="--reasoning")


def test_a_str_prompt_is_one_user_message_through_the_template() -> None:
    tok = FakeTokenizer()
    prepared = prepare_prompt(tok, "hi", template_kwargs={"x": 1})
    assert tok.calls == [{"messages": [{"role": "user", "content": "hi"}], "tools": None, "x": 1}]
    assert prepared == PreparedPrompt(tuple(tok.encode("[user]hi\n[assistant]", False)))


def test_a_list_is_one_user_message_with_and_without_a_template() -> None:
    chat = Chat([{"role": "user", "content": "ab"}])
    with_template = FakeTokenizer()
    assert prepare_prompt(with_template, ["a", "b"]) == prepare_prompt(with_template, chat)
    bare = FakeTokenizer(template=False)
    assert prepare_prompt(bare, ["a", "b"]).ids == (97, 98)
    assert prepare_prompt(bare, "ab").ids == (97, 98)
    with pytest.raises(ValueError, match="no chat template"):
        prepare_prompt(bare, chat)


@pytest.mark.parametrize(
    ("prompt", "error", "match"),
    [
        (["look", "image"], TypeError, "vision model"),
        ([], ValueError, "empty list"),
        (3, TypeError, "expected a str"),
    ],
)
def test_prompts_a_text_model_cannot_take(prompt: Any, error: type[Exception], match: str) -> None:
    if prompt == ["look", "image"]:
        prompt = ["look", Image(PILImage.new("RGB", (2, 2)))]
    with pytest.raises(error, match=match):
        prepare_prompt(FakeTokenizer(), prompt)


def test_template_messages_read_text_parts_and_developer() -> None:
    messages = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": []},
    ]
    assert template_messages(messages) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "", "tool_calls": []},
    ]
    assert messages[0]["role"] == "developer"  # copies
    with pytest.raises(TypeError, match=r"messages\[0\]\.content\[0\] is a 'image_url' part"):
        template_messages([{"role": "user", "content": [{"type": "image_url"}]}])


def test_render_chat_passes_tools_and_kwargs() -> None:
    tok = FakeTokenizer()
    tools = [{"type": "function", "function": {"name": "f"}}]
    render_chat(tok, [{"role": "user", "content": "x"}], tools=tools, template_kwargs={"k": 2})
    assert tok.calls[0]["tools"] == tools
    assert tok.calls[0]["k"] == 2


@pytest.mark.parametrize(
    ("kwargs", "think_end", "expected"),
    [
        ({}, None, (None, False)),  # no reasoning mode, template leaves no tag
        ({"open_think": True}, None, (None, True)),  # the template opened <think>
        ({}, 1002, (1002, True)),  # reasoning mode: free until </think>
        ({"enable_thinking": False}, 1002, (None, False)),  # the template closed the block
    ],
)
def test_how_the_output_starts(
    kwargs: dict[str, Any], think_end: int | None, expected: tuple[int | None, bool]
) -> None:
    tok = FakeTokenizer()
    rendered = render_chat(tok, [{"role": "user", "content": "q"}], template_kwargs=kwargs)
    prepared = prepare_rendered(tok, rendered, think_end_token_id=think_end)
    assert (prepared.think_end_token_id, prepared.think_open) == expected
    assert prepared.ids == tuple(tok.encode(rendered, False))


def test_raw_text_in_reasoning_mode() -> None:
    prepared = prepare_text(FakeTokenizer(), "q", think_end_token_id=1002)
    assert prepared == PreparedPrompt((113,), 1002, True)
    assert prepare_text(FakeTokenizer(), "q") == PreparedPrompt((113,))


class _Compiled:
    """Stands in for a compiled constraint (only identity matters here)."""


def test_n_expands_with_seed_plus_j_in_prompt_major_order() -> None:
    prompts = [PreparedPrompt((1, 2), 1002, True), PreparedPrompt((3,))]
    ids = iter(range(100))
    constraint: Any = _Compiled()
    runs = expand_runs(
        prompts, SamplingParams(seed=10, max_tokens=5), 3, constraint, lambda: f"r{next(ids)}"
    )
    assert [r.index for r in runs] == list(range(6))
    assert [r.request.params.seed for r in runs] == [10, 11, 12, 10, 11, 12]
    assert [r.request.prompt_ids for r in runs] == [(1, 2)] * 3 + [(3,)] * 3
    assert [r.request.think_end_token_id for r in runs] == [1002] * 3 + [None] * 3
    assert [r.think_open for r in runs] == [True] * 3 + [False] * 3
    assert len({r.request.request_id for r in runs}) == 6
    assert all(r.request.constraint is constraint for r in runs)
    assert all(r.request.params.max_tokens == 5 for r in runs)


def test_unseeded_and_unconstrained_requests() -> None:
    runs = expand_runs([PreparedPrompt((1,), 1002, True)], SamplingParams(), 2, None, lambda: "x")
    assert [r.request.params.seed for r in runs] == [None, None]
    # free text has nothing to hold back: no reasoning-aware masking without a constraint
    assert [r.request.think_end_token_id for r in runs] == [None, None]
