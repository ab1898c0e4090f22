"""What a remote call tells ``outlines_like.telemetry``: its span's and log record's fields.

``ModelCore`` calls these at the points where the facts are known: ``start`` around a call,
``record_request`` when the request is built (server, model, constraint fields sent),
``record_response`` when the answer is read, ``record_verdict`` after the answer check.
Nothing here is on the path of a call that is not traced (no current ``Trace``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from outlines_like import telemetry
from outlines_like.adapters.base import ConstraintFields, Endpoint
from outlines_like.errors import ConstraintViolationError, GenerationError
from outlines_like.messages import Completion, read_field
from outlines_like.models._call import Constraint, label
from outlines_like.models._reader import request_id

__all__ = [
    "batch_span",
    "dialect",
    "record_request",
    "record_response",
    "record_verdict",
    "start",
]


def _operation(endpoint: Endpoint) -> str:
    return "chat" if endpoint == "chat" else "text_completion"


def start(endpoint: Endpoint, method: str, constraint: Constraint) -> telemetry.Trace:
    """Start the trace of one call; ``with`` it around the call (or see ``Trace.active``)."""
    term = constraint.term
    return telemetry.start(
        _operation(endpoint),
        method=method,
        output_type=None if term is None else label(constraint),
        constraint_kind=None if term is None else telemetry.kind_name(term),
    )


def batch_span(endpoint: Endpoint, size: int) -> contextlib.AbstractContextManager[None]:
    """The parent span of a batch's calls (nothing when tracing is off)."""
    return telemetry.batch_span(size, _operation(endpoint))


@functools.lru_cache(maxsize=64)
def _where(base_url: str) -> tuple[str | None, int | None]:
    """``server.address`` and ``server.port`` of a base URL."""
    url = urlsplit(base_url)
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        port = None
    return url.hostname, port


def dialect(fields: ConstraintFields) -> str | None:
    """Which constraint fields went out: ``response_format.json_schema``, ``guided_regex``..."""
    if not fields:
        return None
    parts = []
    response_format = fields.get("response_format")
    if response_format is not None:
        parts.append(f"response_format.{response_format.get('type')}")
    for key, value in fields.get("extra_body", {}).items():
        if isinstance(value, Mapping) and value and key != "vllm_xargs":
            parts.append(f"{key}.{next(iter(value))}")
        else:
            parts.append(key)
    return ",".join(parts)


def record_request(
    params: dict[str, Any], server_kind: str, fields: ConstraintFields, base_url: object
) -> None:
    """The request as built, on the current call: model, server, constraint fields sent.

    When the call has a span, the request carries its context (W3C ``traceparent`` in
    ``extra_headers``, a copy of the caller's), so the server's span joins the trace.
    """
    trace = telemetry.current()
    if trace is None:
        return
    if trace.span is not None:
        from opentelemetry import propagate

        headers = dict(params.get("extra_headers") or {})
        propagate.inject(headers)
        params["extra_headers"] = headers
    trace.request(
        model=params["model"],
        server_kind=server_kind,
        dialect=lambda: dialect(fields),
        max_tokens=params.get("max_tokens", params.get("max_completion_tokens")),
        temperature=params.get("temperature"),
        address=lambda: _where(str(base_url).rstrip("/")),
    )


def record_response(
    response: object, completions: Sequence[Completion], trace: telemetry.Trace | None = None
) -> None:
    """A whole response, or a stream's first chunk with its final completions.

    Args:
        response: The response (or first chunk): its ``id`` and ``model``.
        completions: What was read from it.
        trace: The call's trace (default: the current one; nothing when there is none).
    """
    trace = trace or telemetry.current()
    if trace is None:
        return
    usage = completions[0].usage if completions else None
    trace.response(
        response_id=read_field(response, "id") or request_id(response),
        response_model=read_field(response, "model"),
        finish_reasons=[c.finish_reason for c in completions],
        input_tokens=usage.prompt_tokens if usage is not None else None,
        output_tokens=usage.completion_tokens if usage is not None else None,
    )


@contextlib.contextmanager
def record_verdict(trace: telemetry.Trace | None) -> Iterator[list[str]]:
    """Around the answer check: its verdict (put in the yielded list) or how it failed."""
    verdict: list[str] = []
    try:
        yield verdict
    except (ConstraintViolationError, GenerationError) as exc:
        if trace is not None:
            cut = isinstance(exc, GenerationError) and exc.reason == "length"
            trace.set(verification="cut" if cut else "failed")
        raise
    if trace is not None and verdict:
        trace.set(verification=verdict[0])
