"""Request validation: an OpenAI request body in, a validated request out, or a 4xx error.

Plain functions, no HTTP: :func:`parse_body` reads the raw body, :func:`validate_chat` and
:func:`validate_completion` check every field against the server's limits and return a
:class:`ChatRequest` or :class:`CompletionRequest`. Every refusal is a
:class:`~outlines_like.server.dialects.RequestError` naming the field at fault.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from outlines_like.engine.logprobs import MAX_TOP_LOGPROBS
from outlines_like.engine.pipeline import SamplingParams
from outlines_like.engine.prepare import template_messages
from outlines_like.inputs import message_text
from outlines_like.server.config import ServerConfig
from outlines_like.server.dialects import (
    CONSTRAINT_FIELDS,
    ConstraintSpec,
    RequestError,
    ignored_fields,
    read_constraint,
)
from outlines_like.server.tool_choice import tool_choice_spec

__all__ = [
    "MAX_SEED",
    "ChatRequest",
    "Common",
    "CompletionRequest",
    "check_model",
    "parse_body",
    "validate_chat",
    "validate_completion",
]

_COMMON_FIELDS = frozenset(
    {
        "model",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "user",
        "logprobs",
        "presence_penalty",
        "frequency_penalty",
        "ignore_eos",
    }
)
_CHAT_FIELDS = _COMMON_FIELDS | {
    "messages",
    "max_completion_tokens",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "chat_template_kwargs",
    "top_logprobs",
    "allowed_sample",
}
_COMPLETION_FIELDS = _COMMON_FIELDS | {"prompt", "echo", "suffix"}
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_TEMPLATE_KEYS = frozenset({"chat_template", "template"})
MAX_SEED = 2**63 - 1
"""Seeds go to numpy's generators, which take ``0 <= seed``; choice ``j`` is seeded ``seed + j``."""


@dataclasses.dataclass(frozen=True)
class Common:
    """What chat and completion requests share.

    Attributes:
        params: Sampling parameters of every choice (choice ``j`` is later seeded ``seed + j``).
        n: Choices per prompt.
        stream: Answer as server-sent events.
        include_usage: End the stream with a usage chunk.
    """

    params: SamplingParams
    n: int
    stream: bool
    include_usage: bool


@dataclasses.dataclass(frozen=True)
class ChatRequest:
    """A validated ``/v1/chat/completions`` request.

    Attributes:
        common: Sampling, ``n``, streaming.
        messages: Template-ready messages (text content, ``developer`` read as ``system``).
        tools: The tools offered to the model (``None``: none, or ``tool_choice`` "none").
        constraint: The output constraint, from a dialect field or a forced ``tool_choice``.
        template_kwargs: ``chat_template_kwargs``.
    """

    common: Common
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    constraint: ConstraintSpec | None
    template_kwargs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class CompletionRequest:
    """A validated ``/v1/completions`` request.

    Attributes:
        common: Sampling, ``n``, streaming.
        prompts: Each prompt: a text, or token ids checked against the vocabulary.
        constraint: The output constraint, if any.
    """

    common: Common
    prompts: list[str | list[int]]
    constraint: ConstraintSpec | None


def parse_body(raw: bytes) -> dict[str, Any]:
    """Decode a request body: one JSON object.

    Raises:
        RequestError: not JSON, nested too deeply, or not an object (``invalid_json``).
    """
    try:
        body = json.loads(raw)
    except RecursionError as exc:
        raise RequestError("the request body is nested too deeply", code="invalid_json") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at character {exc.pos}" if isinstance(exc, json.JSONDecodeError) else ""
        raise RequestError(
            f"the request body is not valid JSON{where}", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object", code="invalid_json")
    _check_strings(body)
    return body


def _check_strings(body: dict[str, Any]) -> None:
    """Refuse a lone UTF-16 surrogate (an unpaired JSON `uD800` escape) anywhere, keys too.

    JSON lets a request spell one, but no text holds it: the tokenizer, the regex compiler and
    the response encoder would each fail on it in their own way.
    """
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                where = f"{path}.{key}" if path else str(key)
                if _has_surrogate(key):
                    raise RequestError(
                        f"a field name in {path or 'the body'} holds a lone surrogate",
                        param=path or None,
                        code="invalid_string",
                    )
                stack.append((where, value))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))
        elif isinstance(node, str) and _has_surrogate(node):
            raise RequestError(
                f"{path} holds a lone UTF-16 surrogate, which is not text",
                param=path,
                code="invalid_string",
            )


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_model(body: Mapping[str, Any], served: str) -> None:
    """Refuse a request for another model than the one served (a 404, as OpenAI answers)."""
    model = body.get("model")
    if model is not None and model != served:
        raise RequestError(
            f"model {model!r} is not served here; this server serves {served!r}",
            param="model",
            code="model_not_found",
            status=404,
        )


def _int(body: Mapping[str, Any], field: str, low: int, high: int, default: int) -> int:
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{field} must be an integer", param=field)
    if not low <= value <= high:
        raise RequestError(f"{field} must be between {low} and {high}, got {value}", param=field)
    return value


def _float(body: Mapping[str, Any], field: str, low: float, high: float, default: float) -> float:
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"{field} must be a number", param=field)
    if not low <= value <= high:
        raise RequestError(f"{field} must be between {low} and {high}, got {value}", param=field)
    return float(value)


def _bool(body: Mapping[str, Any], field: str) -> bool:
    value = body.get(field, False)
    if not isinstance(value, bool):
        raise RequestError(f"{field} must be a boolean", param=field)
    return value


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, list)
        or len(value) > 4
        or not all(isinstance(s, str) and s for s in value)
    ):
        raise RequestError(
            "stop must be a string or a list of up to 4 non-empty strings", param="stop"
        )
    return tuple(value)


def _common(
    body: Mapping[str, Any], config: ServerConfig, fields: frozenset[str], *, logprobs: bool = False
) -> Common:
    """The shared fields; ``logprobs``: the route reports logprobs (chat), else refuses them."""
    unknown = sorted(set(body) - fields - CONSTRAINT_FIELDS - ignored_fields())
    if unknown:
        raise RequestError(
            f"unknown field {unknown[0]!r}" + (f" (and {unknown[1:]})" if unknown[1:] else ""),
            param=unknown[0],
            code="unknown_field",
        )
    for field in ("echo",) if logprobs else ("logprobs", "echo"):
        if body.get(field):
            raise RequestError(f"{field} is not supported by this server", param=field)
    if body.get("suffix"):
        raise RequestError("suffix is not supported by this server", param="suffix")
    for field in ("presence_penalty", "frequency_penalty"):
        if _float(body, field, -2.0, 2.0, 0.0) != 0.0:
            raise RequestError(f"{field} is not supported (only 0)", param=field)
    max_field = (
        "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    )
    max_tokens = _int(body, max_field, 1, config.max_tokens_limit, config.default_max_tokens)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError("seed must be an integer", param="seed")
    if seed is not None and not 0 <= seed <= MAX_SEED - config.max_n:
        raise RequestError(
            f"seed must be between 0 and {MAX_SEED - config.max_n}, got {seed}", param="seed"
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("stream must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, Mapping) or set(options) - {
        "include_usage",
        "continuous_usage_stats",
    }:
        raise RequestError("stream_options must be {'include_usage': bool}", param="stream_options")
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=_float(body, "temperature", 0.0, 2.0, 1.0),
        top_p=_float(body, "top_p", 1e-6, 1.0, 1.0),
        seed=seed,
        stop=_stop(body),
        ignore_eos=_bool(body, "ignore_eos"),
        **(_logprobs(body) if logprobs else {}),
    )
    return Common(
        params=params,
        n=_int(body, "n", 1, config.max_n, 1),
        stream=stream,
        include_usage=bool(options.get("include_usage")),
    )


MAX_ALLOWED_SAMPLE = 64
"""Most allowed token ids a chat request may ask to see per step (``allowed_sample``)."""


def _logprobs(body: Mapping[str, Any]) -> dict[str, Any]:
    """Chat's ``logprobs``, ``top_logprobs`` and our ``allowed_sample``, as sampling params.

    ``allowed_sample`` (an extension) asks for that many of the token ids the mask allowed at
    each step, beside the ``allowed_count`` every logprobs entry carries.
    """
    wanted = _bool(body, "logprobs")
    top = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, 0)
    sample = _int(body, "allowed_sample", 0, MAX_ALLOWED_SAMPLE, 0)
    for field, value in (("top_logprobs", top), ("allowed_sample", sample)):
        if value and not wanted:
            raise RequestError(f"{field} needs logprobs: true", param=field)
    return {"logprobs": top if wanted else None, "allowed_sample": sample}


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise RequestError(f"{where} must be an object", param=where)
        role = message.get("role")
        if role not in _ROLES:
            raise RequestError(
                f"{where}.role must be one of {sorted(_ROLES)}, got {role!r}", param=where + ".role"
            )
        try:
            message_text(message.get("content"), where + ".content")
        except TypeError as exc:
            raise RequestError(str(exc), param=where + ".content") from exc
    return template_messages(messages)


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise RequestError("tools must be a list", param="tools")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise RequestError(
                f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}",
                param=f"tools[{i}]",
            )
    return None if body.get("tool_choice") == "none" else tools or None


def _constraint(
    body: Mapping[str, Any], forced: ConstraintSpec | None = None
) -> ConstraintSpec | None:
    spec = read_constraint(body)
    if forced is None:
        return spec
    if spec is not None:
        raise RequestError(
            f"conflicting constraints: tool_choice and {spec.field}; send one",
            param="tool_choice",
            code="conflict",
        )
    return forced


def validate_chat(body: Mapping[str, Any], config: ServerConfig) -> ChatRequest:
    """Check a chat request.

    Raises:
        RequestError: any field out of shape or over a limit.
    """
    common = _common(body, config, _CHAT_FIELDS, logprobs=True)
    messages = _messages(body)
    tools = _tools(body)
    forced = tool_choice_spec(body, tools)
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise RequestError("chat_template_kwargs must be an object", param="chat_template_kwargs")
    for key in _TEMPLATE_KEYS & kwargs.keys():
        if not config.allow_request_templates:
            raise RequestError(
                f"chat_template_kwargs.{key}: this server renders its own chat template only "
                "(the operator can allow request templates with --allow-request-templates)",
                param=f"chat_template_kwargs.{key}",
                code="template_not_allowed",
            )
    return ChatRequest(common, messages, tools, _constraint(body, forced), dict(kwargs))


def validate_completion(
    body: Mapping[str, Any], config: ServerConfig, vocab_size: int
) -> CompletionRequest:
    """Check a completions request; token-id prompts must lie in ``range(vocab_size)``.

    Raises:
        RequestError: any field out of shape or over a limit.
    """
    common = _common(body, config, _COMPLETION_FIELDS)
    prompt = body.get("prompt")
    prompts: list[str | list[int]]
    if isinstance(prompt, str):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = list(prompt)
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        if not all(0 <= t < vocab_size for t in prompt):
            raise RequestError("prompt holds token ids outside the vocabulary", param="prompt")
        prompts = [list(prompt)]
    else:
        raise RequestError(
            "prompt must be a string, a list of strings or a list of token ids", param="prompt"
        )
    if len(prompts) > config.max_n:
        raise RequestError(f"at most {config.max_n} prompts per request", param="prompt")
    return CompletionRequest(common, prompts, _constraint(body))
