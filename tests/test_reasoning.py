"""Reasoning split: whole texts, messages of every server, streams, token ids, warnings."""

from __future__ import annotations

import itertools
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessage

from outlines_like.errors import ReasoningRecoveredWarning, ThinkingConstrainedWarning
from outlines_like.reasoning import (
    ReasoningSpan,
    ReasoningStream,
    ReasoningTokenParser,
    model_thinks,
    reasoning_from_message,
    split_reasoning,
    warn_if_thinking_unconstrained,
)


@pytest.mark.parametrize(
    ("text", "think_open", "expected"),
    [
        ("plain answer", False, (None, "plain answer")),
        ("  keeps blanks ", False, (None, "  keeps blanks ")),
        ("<think>hmm</think>42", False, ("hmm", "42")),
        ("\n<think>\n hmm \n</think>\n\n42", False, ("hmm", "42")),
        ("<think>cut while thinking", False, ("cut while thinking", "")),
        ("lone end</think>\n\nanswer", False, ("lone end", "answer")),
        ("template opened, cut", True, ("template opened, cut", "")),
        ("<think>\n\n</think>\n\nno-think mode", False, (None, "no-think mode")),
        ("<think>a</think>b</think>c", False, ("a", "b</think>c")),
        ("<thinking>not a tag", False, (None, "<thinking>not a tag")),
        ("answer <think>late</think>", False, ("answer <think>late", "")),
    ],
)
def test_split_reasoning(text: str, think_open: bool, expected: tuple[str | None, str]) -> None:
    assert split_reasoning(text, think_open=think_open) == expected


def _sdk_message(**fields: object) -> ChatCompletionMessage:
    return ChatCompletionMessage.model_validate({"role": "assistant", **fields})


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"content": "a", "reasoning": "r"}, ("r", "a")),  # vLLM >= 0.11, Ollama /v1
        ({"content": "a", "reasoning_content": "r"}, ("r", "a")),  # SGLang, llama.cpp
        ({"content": "a", "thinking": "r"}, ("r", "a")),  # Ollama /api/chat
        ({"content": "<think>r</think>a"}, ("r", "a")),
        ({"content": "r</think>a"}, ("r", "a")),
        ({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, (None, "ab")),
        ({"content": None, "reasoning": None}, (None, "")),
        (_sdk_message(content="a", reasoning="r"), ("r", "a")),  # model_extra
        (_sdk_message(content="a", reasoning_content="r"), ("r", "a")),
        (_sdk_message(content="<think>r</think>\na"), ("r", "a")),
    ],
)
def test_reasoning_from_message(message: object, expected: tuple[str | None, str]) -> None:
    assert reasoning_from_message(message) == expected


@pytest.mark.parametrize(
    "message",
    [
        {"content": "", "reasoning_content": "the answer"},
        {"content": None, "reasoning": "the answer"},
        _sdk_message(content=None, reasoning_content="the answer"),
    ],
)
def test_answer_in_reasoning_field_is_recovered_with_a_warning(message: object) -> None:
    with pytest.warns(ReasoningRecoveredWarning, match="reasoning field"):
        assert reasoning_from_message(message) == (None, "the answer")


def test_answer_after_unsplit_end_tag_in_reasoning_field_is_recovered() -> None:
    with pytest.warns(ReasoningRecoveredWarning, match="</think>"):
        got = reasoning_from_message({"content": "", "reasoning_content": "r</think>answer"})
    assert got == ("r", "answer")


@pytest.mark.parametrize(
    ("message", "finish_reason", "recover"),
    [
        ({"content": "", "reasoning": "still thinking"}, "length", True),
        ({"content": "", "reasoning": "plan", "tool_calls": [{"id": "1"}]}, "tool_calls", True),
        ({"content": "", "reasoning": "plan"}, "tool_calls", True),
        ({"content": "", "reasoning": "kept"}, "stop", False),
    ],
)
def test_no_recovery_when_the_reasoning_is_real(
    message: dict[str, object], finish_reason: str, recover: bool
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = reasoning_from_message(message, finish_reason=finish_reason, recover=recover)
    assert got == (message["reasoning"], "")


def test_non_text_field_is_a_clear_type_error() -> None:
    with pytest.raises(TypeError, match="'reasoning' should be a string"):
        reasoning_from_message({"content": "a", "reasoning": 3})


# ---------------------------------------------------------------- streams


@pytest.mark.parametrize(
    ("chunks", "think_open", "deltas"),
    [
        (["<thi", "nk>hmm</th", "ink> 42"], False, [("", ""), ("hmm", ""), ("", "42")]),
        (["<", "think", ">", "a b", " ", "</", "think>", "\n", "c"], False, None),
        (["hello ", "world"], False, [("", "hello "), ("", "world")]),
        (["  ", "x"], False, [("", ""), ("", "  x")]),
        (["reason", "ing</think>", "ans"], True, [("reason", ""), ("ing", ""), ("", "ans")]),
        (["a<b"], False, [("", "a<b")]),
    ],
)
def test_reasoning_stream_deltas(
    chunks: list[str], think_open: bool, deltas: list[tuple[str, str]] | None
) -> None:
    stream = ReasoningStream(think_open=think_open)
    got = [stream.feed(c) for c in chunks]
    tail = stream.finish()
    if deltas is not None:
        assert got == deltas
    text = "".join(chunks)
    r, a = split_reasoning(text, think_open=think_open)
    assert "".join(d[0] for d in [*got, tail]) == (r or "")
    assert "".join(d[1] for d in [*got, tail]) == a


def test_reasoning_stream_passes_field_deltas_through() -> None:
    stream = ReasoningStream()
    assert stream.feed("", reasoning=" raw ") == (" raw ", "")
    assert stream.feed("answer") == ("", "answer")
    assert (stream.reasoning, stream.answer) == (" raw ", "answer")


def test_answer_after_server_split_reasoning_loses_leading_blanks() -> None:
    assert reasoning_from_message({"content": "\n\nAnswer", "reasoning": "r\n"}) == (
        "r\n",
        "Answer",
    )
    stream = ReasoningStream()
    deltas = [stream.feed("", reasoning="r\n"), stream.feed("\n"), stream.feed("\nAnswer")]
    assert deltas == [("r\n", ""), ("", ""), ("", "Answer")]
    assert (stream.reasoning, stream.answer) == ("r\n", "Answer")


def test_reasoning_stream_corrects_totals_on_a_lone_end_tag() -> None:
    stream = ReasoningStream()
    assert stream.feed("thought") == ("", "thought")
    assert stream.feed("</think> answer") == ("thought", "answer")
    assert (stream.reasoning, stream.answer) == ("thought", "answer")


def test_reasoning_stream_refuses_feed_after_finish() -> None:
    stream = ReasoningStream()
    stream.finish()
    with pytest.raises(RuntimeError, match="after finish"):
        stream.feed("x")


_PIECES = st.lists(
    st.sampled_from(["<think>", "</think>", "<", "/", "think", ">", " ", "\n", "a", "b c", "é"]),
    max_size=14,
).map("".join)


@st.composite
def _split(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
    bounds = [0, *cuts, len(text)]
    return [text[i:j] for i, j in itertools.pairwise(bounds)]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), text=_PIECES, think_open=st.booleans())
def test_any_split_gives_the_whole_text_split(
    data: st.DataObject, text: str, think_open: bool
) -> None:
    chunks = data.draw(_split(text))
    stream = ReasoningStream(think_open=think_open)
    deltas = [stream.feed(c) for c in chunks] + [stream.finish()]
    r, a = split_reasoning(text, think_open=think_open)
    assert (stream.reasoning, stream.answer) == (r, a)
    lone_end = not think_open and not text.lstrip().startswith("<think>") and "</think>" in text
    if not lone_end:
        assert "".join(d[0] for d in deltas) == (r or "")
        assert "".join(d[1] for d in deltas) == a


@settings(max_examples=300, deadline=None)
@given(data=st.data(), text=_PIECES)
def test_held_answers_give_exact_deltas_for_any_split(data: st.DataObject, text: str) -> None:
    chunks = data.draw(_split(text))
    stream = ReasoningStream(hold=True)
    deltas = [stream.feed(c) for c in chunks] + [stream.finish()]
    r, a = split_reasoning(text)
    assert (stream.reasoning, stream.answer) == (r, a)
    assert "".join(d[0] for d in deltas) == (r or "")
    assert "".join(d[1] for d in deltas) == a  # the lone end tag included


def test_a_held_answer_is_released_by_the_end_tag_or_a_reasoning_field() -> None:
    stream = ReasoningStream(hold=True)
    assert stream.feed("plan ") == ("", "")
    assert stream.feed("</think> 4") == ("plan", "4")
    stream = ReasoningStream(hold=True)
    assert stream.feed("4") == ("", "")
    assert stream.feed(reasoning="r") == ("r", "4")
    assert stream.feed("2") == ("", "2")


# ---------------------------------------------------------------- token ids

START, END = 100, 101


@pytest.mark.parametrize(
    ("chunks", "think_open", "expected"),
    [
        # <think> r r </think> a
        ([[START, 1, 2], [END, 3]], False, [((1, 3, 0, 3), True), ((0, 0, 0, 1), False)]),
        ([[START, 1, END, 3, 4]], False, [((1, 2, 0, 3), False)]),
        ([[5, 6], [START]], False, [((0, 0, 0, 0), False), ((1, 1, 1, 1), False)]),
        ([[1, 2], [3, END, 4]], True, [((0, 2, 0, 2), True), ((0, 1, 0, 2), False)]),
        (
            [[], [START], [1]],
            False,
            [((0, 0, 0, 0), True), ((1, 1, 0, 1), True), ((0, 1, 0, 1), True)],
        ),
    ],
)
def test_token_parser_spans(
    chunks: list[list[int]],
    think_open: bool,
    expected: list[tuple[tuple[int, int, int, int], bool]],
) -> None:
    parser = ReasoningTokenParser(START, END, think_open=think_open)
    got = []
    for chunk in chunks:
        span, continues = parser.stream(chunk)
        got.append(((span.start, span.end, span.outer_start, span.outer_end), continues))
    assert got == expected


@pytest.mark.parametrize(
    ("ids", "think_open", "expected"),
    [
        ([START, 1, 2, END, 3, START, 4], False, ([1, 2], [3, START, 4])),
        ([1, 2, END, 3], True, ([1, 2], [3])),
        ([1, 2, 3], False, ([], [1, 2, 3])),
        ([START, 1], False, ([1], [])),
    ],
)
def test_token_parser_split(
    ids: list[int], think_open: bool, expected: tuple[list[int], list[int]]
) -> None:
    parser = ReasoningTokenParser(START, END, think_open=think_open)
    assert parser.split(ids) == expected
    assert parser.split(ids) == expected  # resets between outputs


def test_token_parser_span_is_empty() -> None:
    assert ReasoningSpan(3, 3, 3, 3).is_empty
    assert not ReasoningSpan(1, 1, 0, 2).is_empty


class _Tokenizer:
    unk_token_id = 0

    def __init__(self, table: dict[str, int]) -> None:
        self.table = table

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.table.get(token, 0)


def test_token_parser_from_tokenizer() -> None:
    parser = ReasoningTokenParser.from_tokenizer(_Tokenizer({"<think>": 7, "</think>": 8}))
    assert (parser.think_start_id, parser.think_end_id) == (7, 8)
    with pytest.raises(ValueError, match="no single token for '</think>'"):
        ReasoningTokenParser.from_tokenizer(_Tokenizer({}))
    with pytest.raises(TypeError, match="convert_tokens_to_ids"):
        ReasoningTokenParser.from_tokenizer(object())


def test_token_parser_checks_its_ids() -> None:
    with pytest.raises(TypeError, match="integer token ids"):
        ReasoningTokenParser("<think>", "</think>")  # type: ignore[arg-type]


# ---------------------------------------------------------------- warnings


@pytest.mark.parametrize(
    ("server", "constrained", "thinks", "parser", "warns"),
    [
        ("vllm", True, True, None, True),
        ("vllm", True, True, True, False),
        ("vllm", True, True, False, True),
        ("sglang", True, True, None, True),
        ("llamacpp", True, True, None, True),
        ("tgi", True, True, None, True),
        ("openai", True, True, None, False),
        ("ollama", True, True, None, False),
        ("vllm", False, True, None, False),
        ("vllm", True, False, None, False),
        ("vllm", True, None, None, False),
    ],
)
def test_warn_if_thinking_unconstrained(
    server: str, constrained: bool, thinks: bool | None, parser: bool | None, warns: bool
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = warn_if_thinking_unconstrained(
            server=server, constrained=constrained, thinks=thinks, reasoning_parser=parser
        )
    assert got is warns
    assert [w.category for w in caught] == ([ThinkingConstrainedWarning] if warns else [])
    if warns:
        assert server in str(caught[0].message)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", True),
        ("Qwen/QwQ-32B", True),
        ("Qwen/Qwen3-8B", True),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507", None),
        ("Qwen/Qwen3-235B-A22B-Thinking-2507", True),
        ("openai/gpt-oss-20b", True),
        ("o3-mini", True),
        ("gpt-4o", None),
        ("meta-llama/Llama-3.1-8B-Instruct", None),
        (None, None),
    ],
)
def test_model_thinks(name: str | None, expected: bool | None) -> None:
    assert model_thinks(name) is expected
