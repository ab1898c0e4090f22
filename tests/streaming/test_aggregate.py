"""Stream aggregation: recorded shapes, any re-chunking gives the same message."""

from __future__ import annotations

import copy
import itertools
import json
import pathlib
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from outlines_like import reasoning as reasoning_module
from outlines_like.errors import ProviderResponseError
from outlines_like.messages import Completion, Usage
from outlines_like.reasoning import reasoning_from_message
from outlines_like.streaming import (
    AggregatedMessage,
    ChoiceDelta,
    StreamAggregator,
    aaggregate_chunks,
    aggregate_choices,
    aggregate_chunks,
    read_usage,
)
from outlines_like.tools import ToolCallDelta, parse_tool_calls, tool_calls_from_message

RECORDINGS = pathlib.Path(__file__).parent / "recordings"


RECORDINGS = pathlib.Path(__file__).parent.parent / "recordings"


def _load(kind: str) -> list[Any]:
    cases = []
    for path in sorted(RECORDINGS.glob("*.json")):
        rec = json.loads(path.read_text())
        if rec["kind"] == kind:
            cases.append(pytest.param(rec, id=path.stem))
    return cases


STREAMS = _load("stream")
MESSAGES = _load("message")


def test_every_recording_names_its_source() -> None:
    paths = sorted(RECORDINGS.glob("*.json"))
    assert len(paths) >= 20
    servers = set()
    for path in paths:
        rec = json.loads(path.read_text())
        assert rec["source"], path
        assert rec["note"], path
        servers.add(rec["server"])
    assert {"vllm", "sglang", "llamacpp", "tgi", "ollama", "openai"} <= servers


def _expected_warning(rec: dict[str, Any]) -> Any:
    name = rec["expect"].get("warns")
    if name is None:
        return warnings.catch_warnings()
    return pytest.warns(getattr(reasoning_module, name))


def _check(got: AggregatedMessage, expect: dict[str, Any]) -> None:
    assert got.content == expect["content"]
    assert got.reasoning == expect["reasoning"]
    assert got.finish_reason == expect["finish_reason"]
    calls = [
        {"id": c.id, "name": c.name, "arguments": c.arguments}
        if "id" in e
        else {"name": c.name, "arguments": c.arguments}
        for c, e in zip(got.tool_calls, expect["tool_calls"], strict=False)
    ]
    assert len(got.tool_calls) == len(expect["tool_calls"])
    assert calls == expect["tool_calls"]
    if "usage" in expect:
        assert got.usage == Usage(*expect["usage"])


def _sdk_chunk(data: dict[str, Any]) -> object:
    try:
        return ChatCompletionChunk.model_validate(data)
    except Exception:
        # Shapes the SDK's types refuse (TGI's object-shaped tool_calls): the SDK itself
        # builds these without validation when it streams.
        return ChatCompletionChunk.construct(**data)


@pytest.mark.parametrize("rec", STREAMS)
@pytest.mark.parametrize("as_sdk", [False, True])
def test_recorded_streams(rec: dict[str, Any], as_sdk: bool) -> None:
    chunks = [_sdk_chunk(c) if as_sdk else c for c in rec["data"]]
    options = {"text_tool_calls": True} if rec["expect"].get("text_tool_calls") else {}
    with _expected_warning(rec):
        got = aggregate_chunks(chunks, **options)
    _check(got, rec["expect"])
    for index, content in rec["expect"].get("choices", {}).items():
        assert aggregate_choices(rec["data"])[int(index)].content == content


@pytest.mark.parametrize("rec", STREAMS)
def test_recorded_streams_as_sse_lines(rec: dict[str, Any]) -> None:
    lines = [f"data: {json.dumps(c)}" for c in rec["data"]] + ["", ": keep-alive", "data: [DONE]"]
    with _expected_warning(rec):
        got = aggregate_chunks(lines)
    _check(got, rec["expect"])


@pytest.mark.parametrize("rec", MESSAGES)
@pytest.mark.parametrize("as_sdk", [False, True])
def test_recorded_messages(rec: dict[str, Any], as_sdk: bool) -> None:
    data = rec["data"]
    response: Any = data
    if as_sdk:
        try:
            response = ChatCompletion.model_validate(data)
        except Exception:
            response = ChatCompletion.construct(**data)
    choice = response["choices"][0] if not as_sdk else response.choices[0]
    message = choice["message"] if not as_sdk else choice.message
    finish = choice["finish_reason"] if not as_sdk else choice.finish_reason
    with _expected_warning(rec):
        reasoning, answer = reasoning_from_message(message, finish_reason=finish)
    calls = tool_calls_from_message(message)
    if rec["expect"].get("text_tool_calls"):
        calls, answer = parse_tool_calls(answer)
    usage = read_usage(response)
    got = AggregatedMessage(
        content=answer,
        reasoning=reasoning,
        tool_calls=calls,
        finish_reason=finish,
        usage=usage,
    )
    _check(got, rec["expect"])


# ---------------------------------------------------------------- re-chunking property


def _split_text(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
    bounds = [0, *cuts, len(text)]
    return [text[i:j] for i, j in itertools.pairwise(bounds)]


@st.composite
def _rechunk(draw: st.DrawFn, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Split every content, reasoning and argument string of a stream at random points."""
    out: list[dict[str, Any]] = []
    for chunk in chunks:
        choices = chunk.get("choices") or []
        if len(choices) != 1 or not isinstance(choices[0].get("delta"), dict):
            out.append(chunk)
            continue
        delta = choices[0]["delta"]
        pieces: list[dict[str, Any]] = []
        rest = dict(delta)
        for key in ("content", "reasoning", "reasoning_content"):
            value = rest.get(key)
            if isinstance(value, str) and len(value) > 1:
                rest.pop(key)
                pieces.extend({key: p} for p in _split_text(draw, value) if p)
        calls = rest.get("tool_calls")
        if isinstance(calls, list):
            new_calls = []
            for call in calls:
                args = (call.get("function") or {}).get("arguments")
                if isinstance(args, str) and len(args) > 1 and isinstance(call.get("index"), int):
                    parts = [p for p in _split_text(draw, args) if p]
                    head = copy.deepcopy(call)
                    head["function"]["arguments"] = parts[0]
                    new_calls.append(head)
                    new_calls.extend(
                        {"index": call["index"], "function": {"arguments": p}} for p in parts[1:]
                    )
                else:
                    new_calls.append(call)
            rest["tool_calls"] = new_calls
        base = {k: v for k, v in chunk.items() if k != "choices"}
        finish = choices[0].get("finish_reason")
        first = {**choices[0], "delta": rest, "finish_reason": None}
        out.append({**base, "choices": [first]})
        for piece in pieces:
            out.append({**base, "choices": [{"index": choices[0].get("index", 0), "delta": piece}]})
        if finish is not None:
            out.append({**base, "choices": [{**choices[0], "delta": {}, "finish_reason": finish}]})
    return out


@settings(max_examples=150, deadline=None)
@given(data=st.data(), which=st.sampled_from([p.values[0] for p in STREAMS]))
def test_any_rechunking_aggregates_to_the_same_message(
    data: st.DataObject, which: dict[str, Any]
) -> None:
    chunks = which["data"]
    rechunked = data.draw(_rechunk(chunks))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert aggregate_choices(rechunked) == aggregate_choices(chunks)


_THINK_TEXTS = [
    '<think>\nplan: call f</think>\n\n{"answer": 42}',
    "reasoning the template opened\n</think>\n\nthe answer",
    "no reasoning, just <b>text</b> and a stray </",
]


@settings(max_examples=150, deadline=None)
@given(data=st.data(), text=st.sampled_from(_THINK_TEXTS), think_open=st.booleans())
def test_streamed_deltas_concatenate_to_the_final_message(
    data: st.DataObject, text: str, think_open: bool
) -> None:
    pieces = [p for p in _split_text(data.draw, text) if p]
    chunks = [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    agg = StreamAggregator(think_open=think_open)
    deltas = [d for c in chunks for d in agg.feed(c)]
    final = agg.result()
    assert final.content == reasoning_module.split_reasoning(text, think_open=think_open)[1]
    lone_end = not think_open and "</think>" in text and not text.startswith("<think>")
    if not lone_end:
        assert "".join(d.content for d in deltas) == final.content
        assert "".join(d.reasoning for d in deltas) == (final.reasoning or "")
    assert deltas[-1].finish_reason == "stop"


# ---------------------------------------------------------------- aggregator details


def test_feed_returns_per_choice_deltas() -> None:
    agg = StreamAggregator()
    assert agg.feed({"choices": [{"index": 0, "delta": {"content": "<thi"}}]}) == [ChoiceDelta(0)]
    got = agg.feed(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "content": "nk>r</think>a",
                        "tool_calls": [
                            {"index": 0, "id": "c", "function": {"name": "f", "arguments": "{"}}
                        ],
                    },
                }
            ]
        }
    )
    assert got == [
        ChoiceDelta(
            0,
            content="a",
            reasoning="r",
            tool_calls=(ToolCallDelta(0, id="c", name="f", arguments="{"),),
        )
    ]
    assert agg.chunks == 2


def test_incomplete_tool_arguments_give_the_best_partial_object() -> None:
    got = aggregate_chunks(
        [
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "c",
                                    "function": {"name": "f", "arguments": '{"a": 1, "b": "x'},
                                }
                            ]
                        },
                    }
                ]
            },
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
        ]
    )
    assert got.tool_calls[0].arguments == {"a": 1, "b": "x"}
    assert not got.raw_tool_calls[0].complete
    assert got.raw_tool_calls[0].arguments == '{"a": 1, "b": "x'


def test_tool_call_without_name_is_dropped_with_a_warning() -> None:
    chunk = {
        "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}
        ]
    }
    with pytest.warns(UserWarning, match="no function name"):
        got = aggregate_chunks([chunk])
    assert got.tool_calls == []
    assert got.raw_tool_calls[0].arguments == "{}"


@pytest.mark.parametrize(
    ("chunk", "error", "match"),
    [
        ({"error": {"message": "boom", "code": 500}}, ProviderResponseError, "boom"),
        ("data: {not json", ProviderResponseError, "not JSON"),
        (
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 3}}]},
                    }
                ]
            },
            ProviderResponseError,
            "string or an object",
        ),
    ],
)
def test_bad_chunks_raise(chunk: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        StreamAggregator().feed(chunk)


def test_result_of_unknown_choice_and_empty_stream() -> None:
    agg = StreamAggregator()
    assert agg.result() == AggregatedMessage()
    agg.feed({"choices": [{"index": 1, "delta": {"content": "x"}}]})
    with pytest.raises(KeyError, match="no choice 0"):
        agg.result(0)


def test_flush_releases_held_text_when_no_finish_reason_came() -> None:
    agg = StreamAggregator()
    agg.feed({"choices": [{"index": 0, "delta": {"content": "a </thi"}}]})
    assert agg.flush() == ChoiceDelta(0, content="</thi")
    assert agg.result().content == "a </thi"


def test_usage_is_the_last_reported_not_a_sum() -> None:
    agg = StreamAggregator()
    for n in (1, 2, 3):  # vLLM continuous_usage_stats: running totals on every chunk
        agg.feed(
            {
                "choices": [{"index": 0, "delta": {"content": "x"}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": n},
            }
        )
    assert agg.result().usage == Usage(5, 3, 8, None)


def test_to_completion() -> None:
    msg = AggregatedMessage(content="a", reasoning="r", finish_reason="stop", usage=Usage(1, 2, 3))
    assert msg.to_completion(raw="x") == Completion("a", "r", (), "stop", Usage(1, 2, 3), raw="x")


async def test_aaggregate_chunks() -> None:
    async def gen() -> Any:
        for c in STREAMS[0].values[0]["data"]:
            yield c

    got = await aaggregate_chunks(gen())
    assert got == aggregate_chunks(STREAMS[0].values[0]["data"])
