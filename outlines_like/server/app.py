"""The reference server's HTTP side: an OpenAI-compatible FastAPI app over the generation service.

Routes: ``GET /health``, ``GET /version``, ``GET /v1/models``, ``GET /stats``,
``GET /metrics`` (Prometheus text), ``POST /v1/chat/completions`` and ``POST /v1/completions``
(SSE streaming with OpenAI chunk shapes, a final usage chunk with
``stream_options.include_usage``). With ``--api-key`` every route but ``/health`` and
``/version`` needs the key, ``/metrics`` included. This module holds the routes and HTTP
concerns only (auth, body size, status codes); the rest is plain code:
:mod:`~outlines_like.server.validation` checks bodies, :mod:`~outlines_like.server.service`
generates, :mod:`~outlines_like.server.responses` shapes the answers,
:mod:`~outlines_like.server.tracing` and :mod:`~outlines_like.server.metrics` observe them.

Every refusal is an OpenAI-style error body ``{"error": {"message", "type", "param", "code"}}``
with a 4xx status; the server keeps answering.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal, TypeVar

from outlines_like.server import tracing
from outlines_like.server.config import SERVER_VERSION, ServerConfig
from outlines_like.server.dialects import RequestError
from outlines_like.server.loading import load_service
from outlines_like.server.metrics import CONTENT_TYPE, MetricsMiddleware
from outlines_like.server.playground import install_playground
from outlines_like.server.responses import (
    chat_completion,
    chat_events,
    error_body,
    error_kind,
    response_head,
    text_completion,
    text_completion_events,
)
from outlines_like.server.service import GenerationService
from outlines_like.server.validation import (
    ChatRequest,
    CompletionRequest,
    check_model,
    parse_body,
    validate_chat,
    validate_completion,
)

try:
    from fastapi import FastAPI, Request, Response
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.requests import ClientDisconnect
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the reference server needs the server extra: pip install 'outlines-like[server]'"
    ) from _exc

__all__ = ["create_app"]

_log = logging.getLogger("outlines_like.server")
_T = TypeVar("_T")
_DISCONNECT_POLL_S = 0.25


def _error(status: int, message: str, param: str | None, code: str | None) -> JSONResponse:
    return JSONResponse(
        error_body(message, kind=error_kind(status), param=param, code=code), status_code=status
    )


def _check_auth(request: Request, api_key: str | None) -> None:
    if api_key is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        token.strip().encode(), api_key.encode()
    ):
        raise RequestError("invalid or missing API key", code="invalid_api_key", status=401)


async def _read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The raw body, refused (413) as soon as it grows past ``limit`` bytes (408 if too slow)."""
    try:
        return await asyncio.wait_for(_read_all(request, limit), timeout)
    except asyncio.TimeoutError:
        raise RequestError(
            f"the request body did not arrive within {timeout:g} s",
            code="body_timeout",
            status=408,
        ) from None


async def _read_all(request: Request, limit: int) -> bytes:
    too_large = RequestError(f"request body over {limit} bytes", code="body_too_large", status=413)
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _client_left(request: Request) -> None:
    """One log line for a client that went away (no traceback: it is not our failure)."""
    peer = request.client.host if request.client is not None else "?"
    _log.info("client %s went away (%s %s)", peer, request.method, request.url.path)


async def _unless_disconnected(request: Request, work: Awaitable[_T]) -> _T:
    """Await ``work``, cancelling it when the client disconnects (nobody waits for the answer).

    Raises:
        ClientDisconnect: the client went away (the work was cancelled).
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=_DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                raise ClientDisconnect()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> Response:
        return _error(exc.status, exc.message, exc.param, exc.code)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _error(exc.status_code, str(exc.detail), None, None)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        return _error(400, str(exc), None, "invalid_request")

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, exc: ClientDisconnect) -> Response:
        _client_left(request)
        return _error(400, "the client went away", None, "client_disconnected")

    @app.exception_handler(Exception)
    async def _server_error(request: Request, exc: Exception) -> Response:
        _log.exception("request failed")
        return _error(500, f"internal error: {type(exc).__name__}", None, "internal_error")


def create_app(
    service: GenerationService | None = None, config: ServerConfig | None = None
) -> FastAPI:
    """Build the FastAPI app.

    Args:
        service: A ready generation service (tests build one once); else one is loaded from
            ``config`` at start-up.
        config: Limits and the model to load (ignored when ``service`` carries its own).

    Returns:
        The app; run it with uvicorn. The engine thread starts and stops with the app.
    """
    holder: dict[str, GenerationService] = {}
    if service is not None:
        holder["service"] = service

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if "service" not in holder:
            holder["service"] = await asyncio.to_thread(load_service, config or ServerConfig())
        holder["service"].start()
        try:
            yield
        finally:
            if service is None:  # ours: stop it; a caller's service is the caller's to stop
                holder["service"].stop()

    app = FastAPI(
        title="outlines-like reference server", lifespan=lifespan, docs_url=None, redoc_url=None
    )
    _install_error_handlers(app)
    app.add_middleware(
        MetricsMiddleware,
        metrics=lambda: holder["service"].metrics if "service" in holder else None,
    )

    def authorized(request: Request) -> GenerationService:
        svc = holder["service"]
        _check_auth(request, svc.config.api_key)
        return svc

    async def body_of(request: Request) -> tuple[GenerationService, dict[str, Any]]:
        svc = authorized(request)
        config = svc.config
        body = parse_body(await _read_body(request, config.max_body_bytes, config.body_timeout))
        check_model(body, svc.model_name)
        return svc, body

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": SERVER_VERSION, "server": "outlines-like"}

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        return {"object": "list", "data": [authorized(request).model_card()]}

    @app.get("/stats")
    async def stats(request: Request) -> dict[str, Any]:
        return authorized(request).stats()

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        svc = authorized(request)
        return PlainTextResponse(svc.metrics.render(svc.scheduler), media_type=CONTENT_TYPE)

    async def generate(request: Request, kind: Literal["chat", "completion"]) -> Response:
        """One generation request, traced from its body to its last byte."""
        route = request.url.path
        trace = tracing.start(
            route, "chat" if kind == "chat" else "text_completion", request.headers
        )
        try:
            svc, body = await body_of(request)
            valid: ChatRequest | CompletionRequest
            if kind == "chat":
                valid = validate_chat(body, svc.config)
            else:
                valid = validate_completion(body, svc.config, svc.pipeline.vocab_size)
            tracing.record_request(
                trace, valid, svc.model_name, request.url.hostname, request.url.port
            )
            if isinstance(valid, ChatRequest):
                job = await svc.prepare_chat(valid)
            else:
                job = await svc.prepare_completion(valid)
            head = response_head(kind, svc.model_name)
            whole, events = _SHAPES[kind]
            if job.common.stream:
                stream = events(head, job, svc.stream(job))
                traced = tracing.traced_events(trace, stream, job, head, svc.metrics)
                return StreamingResponse(traced, media_type="text/event-stream")
            done = await _unless_disconnected(request, svc.finish(job))
            tracing.finished(trace, done, head, svc.metrics)
        except BaseException as exc:
            tracing.end(trace, exc, closed=isinstance(exc, ClientDisconnect))
            raise
        tracing.end(trace)
        return JSONResponse(whole(head, done))

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: Request) -> Response:
        return await generate(request, "chat")

    @app.post("/v1/completions", response_model=None)
    async def completions(request: Request) -> Response:
        return await generate(request, "completion")

    install_playground(app, body_of)  # GET / (the browser playground), POST /v1/constraints/check
    return app


_SHAPES: dict[str, tuple[Callable[..., dict[str, Any]], Callable[..., AsyncIterator[bytes]]]] = {
    "chat": (chat_completion, chat_events),
    "completion": (text_completion, text_completion_events),
}
