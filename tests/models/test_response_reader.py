"""One response reader: ``model(...)``, ``model.stream(...)`` and ``aggregate_chunks`` agree.

Every recorded response in ``tests/recordings/`` is served both whole (a ``chat.completion``)
and streamed (``chat.completion.chunk`` SSE events), re-chunked at points hypothesis picks,
through an ``httpx2.MockTransport`` injected into the openai client. The three readers must
give the same answer text and raise the same warnings: every recovery rule (an answer in a
reasoning field, a lone ``</think>``, ``<tool_call>`` text) is applied once, the same way.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import pathlib
import warnings
from collections.abc import Callable
from typing import Any

import httpx2
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import outlines_like.models as m
from outlines_like.errors import GenerationError, ProviderResponseError, ReasoningRecoveredWarning
from outlines_like.messages import REASONING_FIELDS
from outlines_like.streaming import aggregate_choices, aggregate_chunks
from outlines_like.tools import tool_schema

RECORDINGS = pathlib.Path(__file__).parent.parent / "recordings"
THINKING_MODEL = "deepseek-r1"  # a name that says the model thinks: its answer is held
PLAIN_MODEL = "tiny"


def _records() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) | {"name": p.stem} for p in sorted(RECORDINGS.glob("*.json"))]


RECORDS = _records()


def get_weather(city: str) -> str:
    """Get the weather."""
    return city


# ----------------------------------------------------------------------------- shapes


def _split(draw: st.DrawFn | None, text: str) -> list[str]:
    if draw is None or len(text) < 2:
        return [text] if text else []
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=5)))
    return [p for p in (text[i:j] for i, j in itertools.pairwise([0, *cuts, len(text)])) if p]


def _chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }


def message_to_chunks(response: dict[str, Any], draw: st.DrawFn | None) -> list[dict[str, Any]]:
    """Stream a whole response: role, reasoning, content and tool-call deltas, then the end."""
    chunks: list[dict[str, Any]] = []
    for choice in response["choices"]:
        i, message = choice["index"], choice["message"]
        chunks.append(_chunk(i, {"role": "assistant"}))
        for name in REASONING_FIELDS:
            value = message.get(name)
            if isinstance(value, str):
                chunks.extend(_chunk(i, {name: p}) for p in _split(draw, value))
        content = message.get("content")
        if isinstance(content, str):
            chunks.extend(_chunk(i, {"content": p}) for p in _split(draw, content))
        for k, call in enumerate(message.get("tool_calls") or []):
            chunks.append(_chunk(i, {"tool_calls": [{**copy.deepcopy(call), "index": k}]}))
        chunks.append(_chunk(i, {}, choice.get("finish_reason")))
    if response.get("usage"):
        chunks.append({**_chunk(0, {}), "choices": [], "usage": response["usage"]})
    return chunks


def rechunk(chunks: list[dict[str, Any]], draw: st.DrawFn | None) -> list[dict[str, Any]]:
    """Split every content and reasoning delta of a stream at random points."""
    out: list[dict[str, Any]] = []
    for chunk in chunks:
        choices = chunk.get("choices") or []
        if draw is None or len(choices) != 1 or not isinstance(choices[0].get("delta"), dict):
            out.append(chunk)
            continue
        choice = choices[0]
        rest = dict(choice["delta"])
        pieces = []
        for key in ("content", *REASONING_FIELDS):
            value = rest.get(key)
            if isinstance(value, str) and len(value) > 1:
                del rest[key]
                pieces.extend({key: p} for p in _split(draw, value))
        out.append({**chunk, "choices": [{**choice, "delta": rest, "finish_reason": None}]})
        out.extend(_chunk(choice.get("index", 0), p) for p in pieces)
        if choice.get("finish_reason") is not None:
            out.append(_chunk(choice.get("index", 0), {}, choice["finish_reason"]))
    return out


def chunks_to_message(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole response a stream stands for: each text field joined, tool calls assembled."""
    fields: dict[int, dict[str, str]] = {}
    finish: dict[int, str | None] = {}
    usage = None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for position, choice in enumerate(chunk.get("choices") or []):
            i = choice.get("index", position)
            joined = fields.setdefault(i, {})
            for key in ("content", *REASONING_FIELDS):
                value = (choice.get("delta") or {}).get(key)
                if isinstance(value, str):
                    joined[key] = joined.get(key, "") + value
            finish[i] = choice.get("finish_reason") or finish.get(i)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assembled = aggregate_choices(chunks)
    choices = []
    for i in sorted(fields):
        calls = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in assembled[i].tool_calls
        ]
        message = {"role": "assistant", "content": None, **fields[i]}
        if calls:
            message["tool_calls"] = calls
        choices.append({"index": i, "message": message, "finish_reason": finish[i]})
    body = {"id": "r", "object": "chat.completion", "created": 0, "model": "m", "choices": choices}
    return body | ({"usage": usage} if usage else {})


def shapes(rec: dict[str, Any], draw: st.DrawFn | None) -> tuple[dict[str, Any], list[Any]]:
    """``(whole response, chunks)`` of one recording, whichever kind was recorded."""
    if rec["kind"] == "message":
        return rec["data"], message_to_chunks(rec["data"], draw)
    chunks = rechunk(rec["data"], draw)
    return chunks_to_message(rec["data"]), chunks


# ----------------------------------------------------------------------------- the three readers


def _serve(answer: httpx2.Response) -> Callable[[httpx2.Request], httpx2.Response]:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return answer

    return handler


def _sse(chunks: list[dict[str, Any]]) -> httpx2.Response:
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, text=text)


def _model(answer: httpx2.Response, name: str) -> m.Model:
    http = httpx2.Client(transport=httpx2.MockTransport(_serve(answer)))
    client = openai.OpenAI(base_url="http://test/v1", api_key="x", http_client=http)
    return m.from_vllm(client, name)


def _amodel(answer: httpx2.Response, name: str) -> m.AsyncModel:
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(_serve(answer)))
    client = openai.AsyncOpenAI(base_url="http://test/v1", api_key="x", http_client=http)
    return m.from_vllm(client, name)


Read = tuple[str, frozenset[type[Warning]]]


def _recording(fn: Callable[[], str]) -> Read:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        text = fn()
    return text, frozenset(w.category for w in seen)


def read_three(
    rec: dict[str, Any], response: dict[str, Any], chunks: list[Any], name: str
) -> tuple[Read, Read, Read, Read]:
    """Answer and warnings of ``model(...)``, ``model.stream``, its async twin, the aggregator."""
    text_tools = bool(rec["expect"].get("text_tool_calls"))
    kw: dict[str, Any] = {"tools": [tool_schema(get_weather)]} if text_tools else {}

    async def astream() -> str:
        amodel = _amodel(_sse(chunks), name)
        return "".join([d async for d in amodel.stream("q", **kw)])

    whole = _recording(lambda: _model(httpx2.Response(200, json=response), name)("q", **kw))
    stream = _recording(lambda: "".join(_model(_sse(chunks), name).stream("q", **kw)))
    astreamed = _recording(lambda: asyncio.run(astream()))
    aggregated = _recording(
        lambda: aggregate_chunks(chunks, text_tool_calls=text_tools).content  # type: ignore[arg-type]
    )
    return whole, stream, astreamed, aggregated


def _lone_think_end(rec: dict[str, Any]) -> bool:
    return "lone-think-end" in rec["name"]


@pytest.mark.parametrize("rec", RECORDS, ids=[r["name"] for r in RECORDS])
@pytest.mark.parametrize("name", [THINKING_MODEL, PLAIN_MODEL])
def test_every_recording_reads_the_same_on_every_path(rec: dict[str, Any], name: str) -> None:
    response, chunks = shapes(rec, None)
    whole, stream, astreamed, aggregated = read_three(rec, response, chunks, name)
    assert whole[0] == rec["expect"]["content"]
    assert whole == aggregated
    if name == PLAIN_MODEL and _lone_think_end(rec):
        # Not known to think: text streamed before the lone </think> (in an earlier chunk)
        # turned out to be reasoning; it cannot be taken back, and a warning says so.
        assert stream == astreamed
        if stream != whole:
            assert ReasoningRecoveredWarning in stream[1]
            assert stream[0].endswith(whole[0])
            return
    assert stream == whole
    assert astreamed == whole


@settings(max_examples=60, deadline=None)
@given(data=st.data(), rec=st.sampled_from(RECORDS))
def test_any_chunking_reads_the_same_on_every_path(
    data: st.DataObject, rec: dict[str, Any]
) -> None:
    response, chunks = shapes(rec, data.draw)
    whole, stream, astreamed, aggregated = read_three(rec, response, chunks, THINKING_MODEL)
    assert whole[0] == rec["expect"]["content"]
    assert whole == stream == astreamed == aggregated


# ----------------------------------------------------------------------------- view details


def test_a_thinking_model_streams_its_answer_once_the_think_block_ends() -> None:
    chunks = [_chunk(0, {"content": p}) for p in ["Okay", ", 4.\n</th", "ink>", "\n\n4", "2"]]
    chunks.append(_chunk(0, {}, "stop"))
    pieces = list(_model(_sse(chunks), THINKING_MODEL).stream("q"))
    assert pieces == ["4", "2"]  # nothing before the tag; the answer then streams


def test_a_plain_model_streams_at_once() -> None:
    chunks = [_chunk(0, {"content": p}) for p in ["a", "b", "c"]] + [_chunk(0, {}, "stop")]
    assert list(_model(_sse(chunks), PLAIN_MODEL).stream("q")) == ["a", "b", "c"]


def test_answer_in_the_reasoning_field_is_recovered_when_streamed() -> None:
    chunks = [_chunk(0, {"reasoning_content": p}) for p in ['{"a": ', "1}"]]
    chunks.append(_chunk(0, {}, "stop"))
    with pytest.warns(ReasoningRecoveredWarning):
        assert "".join(_model(_sse(chunks), PLAIN_MODEL).stream("q")) == '{"a": 1}'


def test_the_third_reasoning_field_never_reaches_the_answer() -> None:
    chunks = [_chunk(0, {"thinking": "hm"}), _chunk(0, {"content": "ok"}), _chunk(0, {}, "stop")]
    assert "".join(_model(_sse(chunks), PLAIN_MODEL).stream("q")) == "ok"


def test_completions_endpoint_stream() -> None:
    chunks = [
        {"id": "c", "object": "text_completion", "created": 0, "model": "m", "choices": [c]}
        for c in [
            {"index": 0, "text": "<think>x</think>4", "finish_reason": None},
            {"index": 0, "text": "2", "finish_reason": "stop"},
        ]
    ]
    http = httpx2.Client(transport=httpx2.MockTransport(_serve(_sse(chunks))))
    client = openai.OpenAI(base_url="http://test/v1", api_key="x", http_client=http)
    model = m.from_vllm(client, PLAIN_MODEL, endpoint="completions")
    assert "".join(model.stream("q")) == "42"


def test_streamed_refusal_and_content_filter_raise() -> None:
    refused = [_chunk(0, {"refusal": "No"}), _chunk(0, {"refusal": "."}), _chunk(0, {}, "stop")]
    with pytest.raises(GenerationError, match="refused") as info:
        list(_model(_sse(refused), PLAIN_MODEL).stream("q"))
    assert info.value.text == "No."
    filtered = [_chunk(0, {"content": "x"}), _chunk(0, {}, "content_filter")]
    with pytest.raises(GenerationError, match="content filter"):
        list(_model(_sse(filtered), PLAIN_MODEL).stream("q"))


def test_a_stream_without_a_first_choice_is_a_provider_error() -> None:
    chunks = [_chunk(1, {"content": "x"}), _chunk(1, {}, "stop")]
    with pytest.raises(ProviderResponseError, match="no choice 0"):
        list(_model(_sse(chunks), PLAIN_MODEL).stream("q"))


# ----------------------------------------------------------------------------- broken answers


def _raw(text: str, content_type: str) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": content_type}, text=text)


CUT_STREAM = "".join(f"data: {json.dumps(_chunk(0, {'content': p}))}\n\n" for p in ["4", "2"])
BROKEN = [
    pytest.param(CUT_STREAM + "data: [DONE]\n\n", "no finish_reason", id="no-finish-reason"),
    pytest.param(CUT_STREAM, "no finish_reason", id="closed-without-done"),
    pytest.param(CUT_STREAM + "data: {not json\n\n", "not JSON", id="malformed-chunk"),
]


@pytest.mark.parametrize(("text", "match"), BROKEN)
def test_a_broken_stream_raises_instead_of_returning_partial_text(text: str, match: str) -> None:
    model = _model(_raw(text, "text/event-stream"), PLAIN_MODEL)
    pieces: list[str] = []
    with pytest.raises(ProviderResponseError, match=match):
        pieces.extend(model.stream("q"))
    assert "".join(pieces) == "42"


@pytest.mark.parametrize(("text", "match"), BROKEN)
async def test_a_broken_async_stream_raises_instead_of_returning_partial_text(
    text: str, match: str
) -> None:
    amodel = _amodel(_raw(text, "text/event-stream"), PLAIN_MODEL)
    pieces: list[str] = []

    async def read() -> None:
        async for piece in amodel.stream("q"):
            pieces.append(piece)

    with pytest.raises(ProviderResponseError, match=match):
        await read()
    assert "".join(pieces) == "42"


@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
def test_a_non_json_body_is_a_provider_response_error(content_type: str) -> None:
    with pytest.raises(ProviderResponseError):
        _model(_raw("{not json", content_type), PLAIN_MODEL)("q")


@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
async def test_a_non_json_body_is_a_provider_response_error_async(content_type: str) -> None:
    with pytest.raises(ProviderResponseError):
        await _amodel(_raw("{not json", content_type), PLAIN_MODEL)("q")


def test_a_thinking_model_behind_a_reasoning_parser_streams_at_once() -> None:
    chunks = [
        _chunk(0, {"reasoning_content": "plan"}),
        _chunk(0, {"content": "4"}),
        _chunk(0, {"content": "2"}),
        _chunk(0, {}, "stop"),
    ]
    assert list(_model(_sse(chunks), THINKING_MODEL).stream("q")) == ["4", "2"]
