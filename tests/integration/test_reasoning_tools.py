"""Reasoning and tool calls against real servers: the same user code, only the base URL differs.

Two servers render the same Qwen3-style ChatML template (tools section, ``<tool_call>`` markup,
``enable_thinking``):

* ``reference``: this package's server (``outlines-like serve --model tiny``), whose
  ``tool_choice`` "required"/named is a constraint on one ``<tool_call>`` block.
* ``vllm``: a second vLLM 0.32 (CPU) on the toolkit's venv and tiny Qwen3 model, started here
  with ``--enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3`` and the
  reference server's chat template.

What vLLM 0.32.0 (CPU) does on this model, and how the suite copes (measured):

* With ``--reasoning-parser qwen3`` a request starts *inside* the reasoning unless the prompt
  closed it: every output token goes to ``message.reasoning`` and the structured-output grammar
  waits for a ``</think>`` that a random model never writes. So constrained and tool requests
  pass ``chat_template_kwargs={"enable_thinking": False}`` (the template then pre-closes an empty
  think block, and the grammar applies from the first token), on both servers.
* By default vLLM 0.32 forces tool calls with xgrammar structural tags: the arguments of a
  non-``strict`` tool are any JSON (``"arguments": false``), and those of a ``strict`` one allow
  free whitespace, which the random model pads up to ``max_tokens``. The server here runs with
  ``VLLM_ENFORCE_STRICT_TOOL_CALLING=0``: "required"/named then go through
  ``structured_outputs.json`` (the parameters schema, whitespace disabled server-side).
* "required" with parallel calls allowed is an array whose length the model picks: a random
  model never closes it. Requests send ``parallel_tool_calls=False`` (one call).

The reference server's template does not open ``<think>`` by itself, so its reasoning shows
when the output holds ``<think>...</think>`` (forced here with a regex).

Random weights: every free field is bounded (Literal, enums, small ints). Set
``OL_VLLM_PARSERS_BASE_URL`` to reuse a vLLM already started with the same flags (see
``_parsers_server.py``) instead of starting one (about 40-80 s).
"""

from __future__ import annotations

import enum
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal

import httpx2
import jsonschema
import openai
import pydantic
import pytest

import outlines_like as ol
from outlines_like import arun_tools, run_tools
from outlines_like.errors import GenerationError, MaxToolStepsError
from outlines_like.reasoning import split_reasoning
from outlines_like.server.tiny import CHAT_TEMPLATE
from outlines_like.streaming import StreamAggregator, aggregate_chunks
from outlines_like.tools import ToolCall, tool_choice, tool_schema
from outlines_like.types import Regex
from tests.integration._parsers_server import ParsersVLLM
from tests.integration.conftest import WORKDIR, Server, free_port, wait_healthy

if TYPE_CHECKING:
    from outlines_like.messages import Completion

pytestmark = [pytest.mark.realservers, pytest.mark.timeout(1500)]

# --------------------------------------------------------------------------- tools


class Unit(enum.Enum):
    """Temperature unit."""

    C = "c"
    F = "f"


CALLS: list[tuple[str, dict[str, object]]] = []
"""Every tool execution, with the Python values the function received."""


def add(
    a: Annotated[int, pydantic.Field(ge=0, le=9)], b: Annotated[int, pydantic.Field(ge=0, le=9)]
) -> int:
    """Add two digits.

    Args:
        a: The first digit.
        b: The second digit.
    """
    CALLS.append(("add", {"a": a, "b": b}))
    return a + b


def weather(city: Literal["paris", "rome", "oslo"], unit: Literal["c", "f"] = "c") -> str:
    """Get the weather in a city.

    Args:
        city: The city.
        unit: Celsius or Fahrenheit.
    """
    CALLS.append(("weather", {"city": city, "unit": unit}))
    return f"sunny in {city}, 20 {unit}"


def forecast(city: Literal["paris", "rome", "oslo"], unit: Unit) -> str:
    """Get tomorrow's forecast (an Enum parameter: a ``$ref`` into ``$defs`` in its schema).

    Args:
        city: The city.
        unit: Celsius or Fahrenheit.
    """
    CALLS.append(("forecast", {"city": city, "unit": unit}))
    return f"rain in {city}"


TOOLS: dict[str, Callable[..., object]] = {"add": add, "weather": weather}
SCHEMAS = [tool_schema(fn) for fn in TOOLS.values()]
PARAMETERS = {s["function"]["name"]: s["function"]["parameters"] for s in SCHEMAS}

NO_THINKING: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": False}}
"""Close the think block in the prompt: constraints then apply from the first token."""

TOOL_KW: dict[str, Any] = {
    "tools": SCHEMAS,
    "parallel_tool_calls": False,
    "max_tokens": 60,
    "temperature": 0,
    "extra_body": NO_THINKING,
}

# (id, tool_choice field, names allowed)
CHOICES = [
    ("required", tool_choice("required"), {"add", "weather"}),
    ("named-add", tool_choice(add), {"add"}),
    ("named-weather", tool_choice(weather), {"weather"}),
]


def check_call(call: ToolCall, allowed: set[str]) -> None:
    """The call names one of the tools and its arguments are valid under that tool's schema."""
    assert call.name in allowed, call
    assert call.id, call
    jsonschema.validate(call.arguments, PARAMETERS[call.name])


# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="session")
def vllm_parsers_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """vLLM with the hermes tool parser and the qwen3 reasoning parser, on a free port."""
    url = os.environ.get("OL_VLLM_PARSERS_BASE_URL")
    if url:  # a server started by hand with the same flags (see _parsers_server.py)
        yield Server("vllm", url.rstrip("/") + "/v1")
        return
    ready = (WORKDIR / ".venv-vllm.ok").exists() and (WORKDIR / ".model.ok").exists()
    if not ready:
        # The toolkit's fixture installs the venv and makes the model (and starts its own vLLM).
        request.getfixturevalue("vllm_server")
    rundir = tmp_path_factory.mktemp("vllm-parsers")
    server = ParsersVLLM(WORKDIR, rundir, free_port())
    started = time.monotonic()
    server.start(CHAT_TEMPLATE)
    try:
        try:
            wait_healthy(f"http://127.0.0.1:{server.port}/health", 300, server.proc)
        except RuntimeError as exc:
            pytest.fail(f"vLLM with parsers did not start: {exc}\n{server.tail()}")
        print(
            f"\nvLLM with parsers ready in {time.monotonic() - started:.1f} s",
            file=sys.stderr,
        )
        yield Server("vllm", server.base_url)
    finally:
        server.stop()


@pytest.fixture(params=["reference", "vllm"])
def tserver(request: pytest.FixtureRequest) -> Server:
    """Each server of this suite in turn."""
    name = "reference_server" if request.param == "reference" else "vllm_parsers_server"
    result: Server = request.getfixturevalue(name)
    return result


@pytest.fixture
def client(tserver: Server) -> Iterator[openai.OpenAI]:
    http = httpx2.Client(timeout=120)
    yield openai.OpenAI(base_url=tserver.base_url, api_key="sk-test", http_client=http)
    http.close()


@pytest.fixture
def model(client: openai.OpenAI) -> ol.Model:
    return ol.from_server(client)


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    CALLS.clear()


# --------------------------------------------------------------------------- tool calls


@pytest.mark.parametrize(
    ("choice", "allowed"), [c[1:] for c in CHOICES], ids=[c[0] for c in CHOICES]
)
def test_forced_tool_call(model: ol.Model, choice: object, allowed: set[str]) -> None:
    result = model.complete("What is the weather in Rome?", tool_choice=choice, seed=11, **TOOL_KW)
    assert not isinstance(result, list)
    assert len(result.tool_calls) == 1, result
    check_call(result.tool_calls[0], allowed)
    assert result.text == "", result
    assert result.reasoning is None, result
    assert result.finish_reason in ("tool_calls", "stop"), result
    assert result.usage is not None
    assert result.usage.completion_tokens > 0


@pytest.mark.parametrize(
    ("choice", "allowed"), [c[1:] for c in CHOICES], ids=[c[0] for c in CHOICES]
)
def test_streamed_tool_call_aggregates_to_the_same_call(
    client: openai.OpenAI, model: ol.Model, choice: Any, allowed: set[str]
) -> None:
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "What is the weather in Rome?"}],
        tool_choice=choice,
        stream=True,
        stream_options={"include_usage": True},
        seed=12,
        **TOOL_KW,
    )
    chunks = list(stream)
    agg = StreamAggregator()
    pieces = [d for chunk in chunks for d in agg.feed(chunk)]
    message = agg.result()
    assert message == aggregate_chunks(chunks)

    assert len(message.tool_calls) == 1, message
    check_call(message.tool_calls[0], allowed)
    raw = message.raw_tool_calls[0]
    assert raw.complete, raw
    assert raw.name == message.tool_calls[0].name
    # The call came in pieces by index: a name once, arguments text appended.
    deltas = [t for d in pieces for t in d.tool_calls]
    assert len(deltas) >= 2, deltas
    assert {t.index for t in deltas} == {0}
    assert [t.name for t in deltas if t.name] == [raw.name]
    assert "".join(t.arguments for t in deltas) == raw.arguments
    assert message.content == ""
    assert message.usage is not None
    assert message.usage.completion_tokens > 0

    # Greedy decoding: the streamed call is the call the non-streamed request gets.
    whole = model.complete("What is the weather in Rome?", tool_choice=choice, seed=12, **TOOL_KW)
    assert not isinstance(whole, list)
    assert [(c.name, c.arguments) for c in whole.tool_calls] == [
        (c.name, c.arguments) for c in message.tool_calls
    ]


def check_executions(results_count: int) -> None:
    """Each tool ran with validated, converted Python values."""
    assert len(CALLS) == results_count, CALLS
    for name, args in CALLS:
        if name in ("add", "double"):
            assert all(isinstance(v, int) and 0 <= v <= 9 for v in args.values()), args
        elif name == "weather":
            assert args["city"] in ("paris", "rome", "oslo"), args
            assert args["unit"] in ("c", "f"), args
        else:
            assert args["city"] in ("paris", "rome", "oslo"), args
            assert isinstance(args["unit"], Unit), args


def test_run_tools_stops_after_max_steps(model: ol.Model) -> None:
    class AlwaysCall:
        """The user's model, asked for a tool call on every step."""

        def complete(self, prompt: Any, **kw: Any) -> Completion | list[Completion]:
            return model.complete(prompt, **{**kw, "tool_choice": "required"})

    kw = {k: v for k, v in TOOL_KW.items() if k != "tools"}
    with pytest.raises(MaxToolStepsError) as info:
        run_tools(AlwaysCall(), "Add two digits.", list(TOOLS.values()), max_steps=3, seed=13, **kw)
    assert info.value.steps == 3
    assert len(CALLS) == 3, CALLS
    check_executions(3)
    tool_messages = [m for m in info.value.messages if m["role"] == "tool"]
    assert len(tool_messages) == 3
    assert not any(m["content"].startswith("error:") for m in tool_messages), tool_messages


def test_run_tools_forces_the_first_step_only(model: ol.Model) -> None:
    kw = {k: v for k, v in TOOL_KW.items() if k != "tools"}
    run = run_tools(
        model,
        "What is the weather in Oslo?",
        list(TOOLS.values()),
        max_steps=4,
        tool_choice="required",
        seed=14,
        **kw,
    )
    # Step 1 is forced; on step 2 (tool_choice auto) the random model answers in text.
    assert run.steps == 2, run.messages
    assert len(run.results) == 1
    check_executions(1)
    assert run.results[0].error is None, run.results[0]
    output = run.results[0].output
    assert run.results[0].content == (output if isinstance(output, str) else json.dumps(output))
    assert not run.completion.tool_calls
    roles = [m["role"] for m in run.messages]
    assert roles == ["user", "assistant", "tool", "assistant"], roles


def test_run_tools_with_one_step_raises(model: ol.Model) -> None:
    kw = {k: v for k, v in TOOL_KW.items() if k != "tools"}
    with pytest.raises(MaxToolStepsError) as info:
        run_tools(model, "Add.", [add], max_steps=1, tool_choice=tool_choice(add), seed=15, **kw)
    assert info.value.steps == 1
    check_executions(1)
    assert CALLS[0][0] == "add"


async def double(n: Annotated[int, pydantic.Field(ge=0, le=9)]) -> int:
    """Double a digit (an async tool).

    Args:
        n: The digit.
    """
    CALLS.append(("double", {"n": n}))
    return 2 * n


async def test_arun_tools_stops_after_max_steps(tserver: Server) -> None:
    async with httpx2.AsyncClient(timeout=120) as http:
        amodel = ol.from_server(
            openai.AsyncOpenAI(base_url=tserver.base_url, api_key="sk-test", http_client=http)
        )

        class AlwaysCall:
            """The user's async model, asked for a tool call on every step."""

            async def complete(self, prompt: Any, **kw: Any) -> Completion | list[Completion]:
                result: Completion | list[Completion] = await amodel.complete(
                    prompt, **{**kw, "tool_choice": "required"}
                )
                return result

        kw = {k: v for k, v in TOOL_KW.items() if k != "tools"}
        with pytest.raises(MaxToolStepsError) as info:
            await arun_tools(AlwaysCall(), "Double a digit.", [double], max_steps=2, seed=18, **kw)
    assert info.value.steps == 2
    check_executions(2)


def test_forced_tool_call_while_thinking(model: ol.Model, tserver: Server) -> None:
    kw = {k: v for k, v in TOOL_KW.items() if k != "extra_body"}
    result = model.complete("What is the weather in Rome?", tool_choice="required", seed=17, **kw)
    assert not isinstance(result, list)
    field, content, finish = raw_fields(result)
    if tserver.name == "vllm":
        # qwen3 reasoning parser: the request starts inside the reasoning and the tool-call
        # grammar waits for a </think> that never comes: no call, all text is reasoning.
        assert result.tool_calls == ()
        assert field, (field, content)
        assert result.reasoning == field
        assert result.text == ""
        assert finish == "length"
    else:
        # the reference template does not open <think>: the constraint applies at once
        assert field is None
        assert len(result.tool_calls) == 1, result
        check_call(result.tool_calls[0], {"add", "weather"})


def test_enum_parameter_is_converted(model: ol.Model, tserver: Server) -> None:
    kw = {k: v for k, v in TOOL_KW.items() if k != "tools"}
    with pytest.raises(MaxToolStepsError):
        run_tools(
            model,
            "Forecast?",
            [forecast, add],
            max_steps=1,
            tool_choice=tool_choice(forecast),
            seed=16,
            **kw,
        )
    check_executions(1)
    assert CALLS[0][0] == "forecast"


# --------------------------------------------------------------------------- reasoning

CODE = Regex(r"[a-z]{3}-[0-9]{2}")
THINK = Regex(r"<think>[a-z]{2,6}</think>[0-9]{1,2}")

# (id, output type, extra_body, max_tokens)
REASONING_CASES: list[tuple[str, object, dict[str, Any] | None, int]] = [
    ("free-thinking", None, None, 12),
    ("free-no-thinking", None, NO_THINKING, 12),
    ("code-no-thinking", CODE, NO_THINKING, 16),
    ("code-while-thinking", CODE, None, 16),
    ("think-tags-no-thinking", THINK, NO_THINKING, 24),
]

# What each server does with each case: does the reasoning field hold the whole output (the
# request began inside the reasoning and never left it)?
ALL_REASONING = {
    ("vllm", "free-thinking"),
    ("vllm", "code-while-thinking"),  # the grammar waits for </think>: nothing is constrained
}


def raw_fields(completion: Completion) -> tuple[str | None, str | None, str | None]:
    """``(reasoning field, content, finish_reason)`` of the server's own response."""
    raw: Any = completion.raw
    choice = raw.choices[0]
    message = choice.message
    extra = message.model_extra or {}
    field = extra.get("reasoning") or extra.get("reasoning_content") or None
    return field, message.content, choice.finish_reason


@pytest.mark.parametrize(
    ("case", "output_type", "extra_body", "max_tokens"),
    REASONING_CASES,
    ids=[c[0] for c in REASONING_CASES],
)
def test_reasoning_read_from_the_raw_message(
    model: ol.Model,
    tserver: Server,
    case: str,
    output_type: object,
    extra_body: dict[str, Any] | None,
    max_tokens: int,
) -> None:
    kw: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0, "seed": 21}
    if extra_body is not None:
        kw["extra_body"] = extra_body
    try:
        result = model.complete("Think, then answer.", output_type, **kw)
    except GenerationError as exc:
        # The one rule for cut answers: a constrained answer cut at max_tokens before it fit
        # (here: the whole output was reasoning) raises, on every method.
        assert exc.reason == "length"  # noqa: PT017 - the test goes on differently
        assert output_type is not None
        assert (tserver.name, case) in ALL_REASONING or case == "code-while-thinking"
        return
    assert not isinstance(result, list)
    field, content, finish = raw_fields(result)
    assert result.finish_reason == finish

    if (tserver.name, case) in ALL_REASONING:
        # vLLM's qwen3 parser: everything in `reasoning`, no content, cut at max_tokens.
        assert field, (field, content)
        assert not content, (field, content)
        assert finish == "length"
        assert result.reasoning == field
        assert result.text == ""
        return

    if field is not None:  # a server-side split (the reference server's reasoning_content)
        assert result.reasoning == field
        assert result.text == (content or "").lstrip()
    else:  # tags left in the content are split by the library
        assert (result.reasoning, result.text) == split_reasoning(content or "")
    if output_type is CODE:
        assert re.fullmatch(CODE.pattern, result.text), result
        assert result.reasoning is None
    if output_type is THINK:
        assert result.reasoning is not None
        assert re.fullmatch("[a-z]{2,6}", result.reasoning), result
        assert re.fullmatch("[0-9]{1,2}", result.text), result
        # model(...) returns the answer only, never the reasoning
        assert model("Think, then answer.", output_type, **kw) == result.text


@pytest.mark.parametrize(
    ("output_type", "extra_body", "max_tokens"),
    [c[1:] for c in REASONING_CASES],
    ids=[c[0] for c in REASONING_CASES],
)
def test_streamed_reasoning_matches_the_whole_answer(
    client: openai.OpenAI,
    model: ol.Model,
    output_type: object,
    extra_body: dict[str, Any] | None,
    max_tokens: int,
) -> None:
    kw: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0, "seed": 22}
    if extra_body is not None:
        kw["extra_body"] = extra_body
    try:
        whole = model.complete("Think, then answer.", output_type, **kw)
    except GenerationError as exc:  # cut before the answer fit: the same on the stream
        assert exc.reason == "length"  # noqa: PT017 - the test goes on differently
        with pytest.raises(GenerationError):
            "".join(model.stream("Think, then answer.", output_type, **kw))
        return
    assert not isinstance(whole, list)
    # model.stream: the answer only, in pieces (a constrained answer cut at max_tokens warns)
    if output_type is not None and whole.finish_reason == "length":
        with pytest.warns(ol.TruncatedOutputWarning):
            streamed = "".join(model.stream("Think, then answer.", output_type, **kw))
    else:
        streamed = "".join(model.stream("Think, then answer.", output_type, **kw))
    assert streamed == whole.text

    # The raw SDK stream of the same request, aggregated by the library
    extra = dict(extra_body or {})
    if output_type is not None:
        assert isinstance(output_type, Regex)
        extra["structured_outputs"] = {"regex": output_type.pattern}
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Think, then answer."}],
        stream=True,
        stream_options={"include_usage": True},
        extra_body=extra,
        **{k: v for k, v in kw.items() if k != "extra_body"},
    )
    message = aggregate_chunks(stream)
    assert message.reasoning == whole.reasoning
    assert message.content == whole.text
    assert message.finish_reason == whole.finish_reason
    assert message.usage is not None
    assert whole.usage is not None
    assert message.usage.completion_tokens == whole.usage.completion_tokens
