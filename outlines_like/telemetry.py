"""Logs and OpenTelemetry spans: one record per request, spans where OpenTelemetry is set up.

The library never configures logging: it writes to one logger per layer (``LOGGERS``) and
adds no handler, so records go wherever the application sends them. Per call:

- DEBUG ``outlines_like.models`` (``outlines_like.server`` on the server): one record when the
  request ends, its fields also on the record as ``extra`` attributes (``record.ol_model``,
  ``record.ol_duration_s``...; the names are ``FIELDS``);
- INFO: a failed attempt that will be retried; WARNING: a call that failed.

Spans follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``, ``server.*``) plus
ours under ``outlines_like.*``. Only ``opentelemetry-api`` is used (``pip install
'outlines-like[otel]'``), and only when the application has imported it and set a tracer
provider: otherwise no span is made, nothing is imported, and a call pays a few attribute
writes on a plain object.

A call is a :class:`Trace`: started with :func:`start`, made current with
:meth:`Trace.active` (child spans, such as the attempts of ``models/retry.py``, find it with
:func:`current`), filled as the call learns things, and ended once with :meth:`Trace.end`;
``with trace:`` does both around a block (the end gets the block's exception).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = [
    "FIELDS",
    "LOGGERS",
    "Trace",
    "attempt",
    "batch_span",
    "current",
    "kind_name",
    "start",
    "tracer",
]

LOGGERS = {
    layer: logging.getLogger(f"outlines_like.{layer}")
    for layer in ("models", "adapters", "engine", "server")
}
"""One logger per layer; the library adds no handler to any of them."""

FIELDS = (
    "method",
    "route",
    "operation",
    "server_kind",
    "dialect",
    "model",
    "output_type",
    "constraint_kind",
    "duration_s",
    "input_tokens",
    "output_tokens",
    "attempts",
    "retries",
    "finish_reasons",
    "verification",
    "error",
)
"""The fields of the per-request record, each set on the log record as ``ol_<field>``."""

# Our attribute names (the ``gen_ai.*`` ones are the semantic conventions' own).
_OURS = {
    "server_kind": "outlines_like.server.kind",
    "dialect": "outlines_like.dialect",
    "output_type": "outlines_like.output_type",
    "constraint_kind": "outlines_like.constraint.kind",
    "retries": "outlines_like.retries",
    "verification": "outlines_like.verification",
    "method": "outlines_like.method",
}

_CURRENT: contextvars.ContextVar[Trace | None] = contextvars.ContextVar(
    "outlines_like_trace", default=None
)
_TRACER: list[Any] = [None, None]  # [provider, tracer] of the last lookup


def tracer() -> Any:
    """The OpenTelemetry tracer to use, or ``None`` when no tracer provider is set.

    ``opentelemetry`` is never imported here: an application that set a provider has
    imported it already.
    """
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    provider = api.get_tracer_provider()
    if provider is _TRACER[0]:
        return _TRACER[1]
    if isinstance(provider, (api.ProxyTracerProvider, api.NoOpTracerProvider)):
        found = None
    else:
        found = provider.get_tracer("outlines_like", _version())
    _TRACER[:] = [provider, found]
    return found


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("outlines-like")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


def current() -> Trace | None:
    """The call being traced in this context (thread or task), if any."""
    return _CURRENT.get()


class Trace:
    """One request's record: span attributes and log fields, filled as the call goes.

    Args:
        operation: ``"chat"`` or ``"text_completion"`` (``gen_ai.operation.name``).
        layer: Which logger gets the record (``"models"``, ``"server"``).
        span: The OpenTelemetry span, or ``None`` when tracing is off.
    """

    __slots__ = ("_attached", "_ended", "_lazy", "_start", "_token", "fields", "layer", "span")

    def __init__(
        self, operation: str, layer: str, span: Any, fields: dict[str, Any] | None = None
    ) -> None:
        self.fields: dict[str, Any] = {"operation": operation}
        if fields:
            self.fields.update(fields)
        self.layer = layer
        self.span = span
        self._start = time.perf_counter()
        self._ended = False
        self._lazy: Callable[[], str | None] | None = None

    def __enter__(self) -> Trace:
        self._token = _CURRENT.set(self)
        self._attached = _attach(self.span) if self.span is not None else None
        return self

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        if self._attached is not None:
            sys.modules["opentelemetry.context"].detach(self._attached)
        _CURRENT.reset(self._token)
        self.end(error)

    def set(self, **fields: Any) -> None:
        """Record fields (``None`` values are left out); span attributes follow ``FIELDS``."""
        span = self.span
        for key, value in fields.items():
            if value is None:
                continue
            self.fields[key] = value
            if span is not None:
                name = _OURS.get(key)
                if name is not None:
                    span.set_attribute(name, value)

    def active(self) -> contextlib.AbstractContextManager[Trace]:
        """Make this the current call (and its span the current span) inside the block."""
        return _Active(self)

    def finishing(self) -> contextlib.AbstractContextManager[None]:
        """End the trace when the block ends, without making it current inside.

        For generators (a stream's body), which must not leave their context attached
        between items: the block's exception is the error, and ``GeneratorExit`` (the
        consumer closed the stream) ends it as closed.
        """
        return _Finishing(self)

    def request(
        self,
        *,
        model: str,
        server_kind: str | None,
        dialect: str | Callable[[], str | None] | None = None,
        max_tokens: object = None,
        temperature: object = None,
        address: str | Callable[[], tuple[str | None, int | None]] | None = None,
        port: int | None = None,
    ) -> None:
        """What was sent, to whom (called again when a request is rebuilt for a new server).

        ``dialect`` and ``address`` may be given as functions: they are then called only
        when a span or a log record needs them (``address`` returns the address and port).
        """
        span = self.span
        if callable(dialect):
            if span is None:
                self._lazy, dialect = dialect, None
            else:
                dialect = dialect()
        self.set(model=model, server_kind=server_kind, dialect=dialect)
        if span is None:
            return
        if callable(address):
            address, port = address()
        span.update_name(f"{self.fields['operation']} {model}")
        span.set_attribute("gen_ai.request.model", model)
        if server_kind is not None:
            span.set_attribute("gen_ai.provider.name", server_kind)
            span.set_attribute("gen_ai.system", server_kind)  # the older name of the same
        if isinstance(max_tokens, int) and not isinstance(max_tokens, bool):
            span.set_attribute("gen_ai.request.max_tokens", max_tokens)
        if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
            span.set_attribute("gen_ai.request.temperature", float(temperature))
        if address:
            span.set_attribute("server.address", address)
            if port is not None:
                span.set_attribute("server.port", port)

    def response(
        self,
        *,
        response_id: object = None,
        response_model: object = None,
        finish_reasons: Sequence[str | None] = (),
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        """What came back (usage is summed when a call sends more than one request)."""
        reasons = [r for r in finish_reasons if r]
        self.set(
            finish_reasons=reasons or None,
            input_tokens=_add(self.fields.get("input_tokens"), input_tokens),
            output_tokens=_add(self.fields.get("output_tokens"), output_tokens),
        )
        span = self.span
        if span is None:
            return
        if isinstance(response_id, str):
            span.set_attribute("gen_ai.response.id", response_id)
        if isinstance(response_model, str):
            span.set_attribute("gen_ai.response.model", response_model)
        if reasons:
            span.set_attribute("gen_ai.response.finish_reasons", reasons)
        if input_tokens is not None:
            span.set_attribute("gen_ai.usage.input_tokens", self.fields["input_tokens"])
        if output_tokens is not None:
            span.set_attribute("gen_ai.usage.output_tokens", self.fields["output_tokens"])

    def end(
        self,
        error: BaseException | None = None,
        *,
        closed: bool = False,
        ours: bool = True,
    ) -> None:
        """End the span and write the record (once; later calls do nothing).

        Args:
            error: The exception the call ended with (``error.type``, a WARNING record).
            closed: The caller stopped a stream before its end (not an error).
            ours: The error is a failure of this side (status ERROR); ``False`` for a
                server refusing a bad request (a 4xx: ``error.type`` only, an INFO record).
        """
        if self._ended:
            return
        self._ended = True
        fields = self.fields
        fields["duration_s"] = round(time.perf_counter() - self._start, 6)
        attempts = fields.get("attempts")
        if attempts is not None:
            self.set(retries=attempts - 1)
        if closed:
            fields["closed"] = True
        if error is not None:
            fields["error"] = type(error).__name__
        span = self.span
        if span is not None:
            route = fields.get("route")
            if route is not None:
                span.set_attribute("http.route", route)
            if closed:
                span.set_attribute("outlines_like.stream.closed", True)
            if error is not None:
                _record_error(span, error, status=ours)
            span.end()
        log = LOGGERS[self.layer]
        level = logging.WARNING if ours else logging.INFO
        if not log.isEnabledFor(level if error is not None else logging.DEBUG):
            return
        if self._lazy is not None:
            self.set(dialect=self._lazy())
        if error is not None:
            log.log(
                level,
                "%s failed after %.3f s: %s: %s",
                _what(fields),
                fields["duration_s"],
                fields["error"],
                error,
                extra=_extra(fields),
            )
        else:
            log.debug(
                "%s done in %.3f s (tokens in %s, out %s, attempts %s, verification %s)",
                _what(fields),
                fields["duration_s"],
                fields.get("input_tokens"),
                fields.get("output_tokens"),
                fields.get("attempts", 1),
                fields.get("verification", "-"),
                extra=_extra(fields),
            )


def start(
    operation: str,
    *,
    layer: str = "models",
    kind: str = "CLIENT",
    name: str | None = None,
    context: Any = None,
    **fields: Any,
) -> Trace:
    """Start a request's trace (its span too, when tracing is on); not current yet.

    Args:
        operation: ``gen_ai.operation.name`` (``"chat"``, ``"text_completion"``).
        layer: The logger the record goes to.
        kind: The span kind's name (``"CLIENT"``, ``"SERVER"``, ``"INTERNAL"``).
        name: The span's name before the model is known (default: ``operation``).
        context: The parent context (the server's extracted ``traceparent``); default: current.
        **fields: First fields (``method``, ``output_type``, ``constraint_kind``...).
    """
    found = tracer()
    span = None
    if found is not None:
        api = sys.modules["opentelemetry.trace"]
        span = found.start_span(
            name or operation,
            context=context,
            kind=getattr(api.SpanKind, kind),
            attributes={"gen_ai.operation.name": operation},
        )
    if span is None:  # no attributes to set: the fields go in as they are
        return Trace(operation, layer, None, {k: v for k, v in fields.items() if v is not None})
    trace = Trace(operation, layer, span)
    trace.set(**fields)
    return trace


class _Active:
    """``Trace.active()``: the trace (and its span) current inside a block."""

    __slots__ = ("_attached", "_token", "trace")

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def __enter__(self) -> Trace:
        trace = self.trace
        self._token = _CURRENT.set(trace)
        self._attached = _attach(trace.span) if trace.span is not None else None
        return trace

    def __exit__(self, *exc: object) -> None:
        if self._attached is not None:
            sys.modules["opentelemetry.context"].detach(self._attached)
        _CURRENT.reset(self._token)


def _attach(span: Any) -> object:
    """Make ``span`` the current span; return the token that undoes it."""
    api = sys.modules["opentelemetry.trace"]
    return sys.modules["opentelemetry.context"].attach(api.set_span_in_context(span))


class _Finishing:
    """``Trace.finishing()``."""

    __slots__ = ("trace",)

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        if isinstance(error, GeneratorExit):
            self.trace.end(closed=True)
        else:
            self.trace.end(error)


_NOTHING: contextlib.nullcontext[None] = contextlib.nullcontext()


def attempt(number: int) -> contextlib.AbstractContextManager[Any]:
    """One attempt at sending the current call's request: a child span, counted.

    A failed attempt records its error on its own span; the call's span says how the call
    ended. Outside a traced call (a detection probe, a bare flow) it does nothing.
    """
    trace = _CURRENT.get()
    if trace is None:
        return _NOTHING
    trace.fields["attempts"] = number
    found = tracer() if trace.span is not None else None
    if found is None:
        return _NOTHING
    api = sys.modules["opentelemetry.trace"]
    span = found.start_span(
        f"attempt {number}",
        kind=api.SpanKind.INTERNAL,
        attributes={"outlines_like.attempt": number},
    )
    return _spanned(api, span)


@contextlib.contextmanager
def _spanned(api: Any, span: Any) -> Iterator[None]:
    """``span`` current inside the block, ended after it (with the block's error, if any)."""
    try:
        with api.use_span(span, end_on_exit=False, record_exception=False):
            yield
    except BaseException as exc:
        _record_error(span, exc)
        raise
    finally:
        span.end()


@contextlib.contextmanager
def batch_span(size: int, operation: str) -> Iterator[None]:
    """A parent span over a batch: each item's call span is its child."""
    found = tracer()
    if found is None:
        yield
        return
    api = sys.modules["opentelemetry.trace"]
    with found.start_as_current_span(
        f"batch {operation}",
        kind=api.SpanKind.INTERNAL,
        attributes={"gen_ai.operation.name": operation, "outlines_like.batch.size": size},
    ):
        yield


def _record_error(span: Any, error: BaseException, *, status: bool = True) -> None:
    span.set_attribute("error.type", type(error).__qualname__)
    span.record_exception(error)
    if status:
        api = sys.modules["opentelemetry.trace"]
        span.set_status(api.Status(api.StatusCode.ERROR, f"{type(error).__name__}: {error}"[:500]))


def kind_name(value: object) -> str:
    """The snake-case name of ``value``'s type (``JsonSchema`` -> ``json_schema``)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", type(value).__name__).lower()


def _add(total: int | None, more: int | None) -> int | None:
    if more is None:
        return total
    return more if total is None else total + more


def _what(fields: dict[str, Any]) -> str:
    model = fields.get("model", "?")
    where = fields.get("server_kind") or fields.get("route") or "?"
    return f"{fields.get('method', fields['operation'])} {model} ({where})"


def _extra(fields: dict[str, Any]) -> dict[str, Any]:
    return {f"ol_{key}": value for key, value in fields.items()}
