"""The reference server's request spans and log records (through ``outlines_like.telemetry``).

Each generation request is one SERVER span named ``chat {model}`` (``text_completion
{model}`` on ``/v1/completions``), a child of the caller's span when the request carries a
W3C ``traceparent`` header, with the same GenAI attributes as the client's spans
(``gen_ai.provider.name`` is ``outlines-like``; ``outlines_like.dialect`` is the request
field the constraint came in, such as ``structured_outputs.json``). A streamed answer's span
ends with its last event. A refused request (4xx) records ``error.type`` and an INFO
record; a failure of ours (5xx) sets the status to ERROR and writes a WARNING.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from outlines_like import telemetry
from outlines_like.server.dialects import RequestError

if TYPE_CHECKING:
    from outlines_like.server.metrics import Metrics
    from outlines_like.server.service import Job
    from outlines_like.server.validation import ChatRequest, CompletionRequest

__all__ = ["PROVIDER", "end", "finished", "record_request", "start", "traced_events"]

PROVIDER = "outlines-like"


def start(route: str, operation: str, headers: Mapping[str, str]) -> telemetry.Trace:
    """Start a request's trace; its span's parent comes from ``traceparent``, if sent."""
    context = None
    if telemetry.tracer() is not None and "traceparent" in headers:
        from opentelemetry import propagate

        context = propagate.extract(headers)
    trace = telemetry.start(operation, layer="server", kind="SERVER", context=context, route=route)
    return trace


def record_request(
    trace: telemetry.Trace,
    valid: ChatRequest | CompletionRequest,
    model: str,
    address: str | None,
    port: int | None,
) -> None:
    """What the validated request asks for."""
    spec = valid.constraint
    params = valid.common.params
    trace.request(
        model=model,
        server_kind=PROVIDER,
        dialect=spec.field if spec is not None else None,
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        address=address,
        port=port,
    )
    if spec is not None:
        trace.set(constraint_kind=telemetry.kind_name(spec.term))


def finished(
    trace: telemetry.Trace, job: Job, head: Mapping[str, Any], metrics: Metrics | None
) -> None:
    """Record a finished job's answer and usage, and count its tokens."""
    trace.response(
        response_id=head.get("id"),
        response_model=head.get("model"),
        finish_reasons=[r.finish_reason for r in job.runs],
        input_tokens=job.prompt_tokens,
        output_tokens=job.completion_tokens,
    )
    if metrics is not None:
        metrics.tokens(job.prompt_tokens, job.completion_tokens)


def end(
    trace: telemetry.Trace, error: BaseException | None = None, *, closed: bool = False
) -> None:
    """End the request's trace; a 4xx is the request's fault, not ours.

    Args:
        trace: The request's trace.
        error: What the request ended with.
        closed: The client went away (not an error of either side).
    """
    if error is None:
        trace.end()
    elif closed or isinstance(error, (GeneratorExit, asyncio.CancelledError)):
        trace.end(closed=True)
    else:
        refused = isinstance(error, RequestError) and error.status < 500
        trace.end(error, ours=not refused)


async def traced_events(
    trace: telemetry.Trace,
    events: AsyncIterator[bytes],
    job: Job,
    head: Mapping[str, Any],
    metrics: Metrics | None,
) -> AsyncIterator[bytes]:
    """A streamed answer's events; the trace ends with the last one (or the error, or close)."""
    try:
        async for event in events:
            yield event
    except BaseException as exc:
        if job.runs and all(r.finish_reason is not None for r in job.runs):
            finished(trace, job, head, metrics)
        end(trace, exc)
        raise
    finished(trace, job, head, metrics)
    end(trace)
