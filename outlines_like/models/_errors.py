"""The one boundary where ``openai`` and ``httpx`` exceptions become ``outlines_like.errors``.

Every I/O step a model performs (a request, a stream read, a server probe) runs inside
``translate_errors()``. Foreign exceptions are matched most specific first and re-raised as
our own with ``raise ... from exc``; anything else (programmer errors included) passes
through untouched.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Literal

import httpx
import openai

from outlines_like.errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    NotFoundError,
    PermissionDeniedError,
    ProviderResponseError,
    RateLimitError,
    ServerError,
)

try:  # openai >= 3 talks through httpx2; older releases through httpx
    import httpx2

    _TIMEOUTS: tuple[type[BaseException], ...] = (httpx.TimeoutException, httpx2.TimeoutException)
    _TRANSPORT: tuple[type[BaseException], ...] = (httpx.TransportError, httpx2.TransportError)
    _STATUS: tuple[type[BaseException], ...] = (httpx.HTTPStatusError, httpx2.HTTPStatusError)
except ImportError:  # pragma: no cover - depends on the openai release installed
    _TIMEOUTS = (httpx.TimeoutException,)
    _TRANSPORT = (httpx.TransportError,)
    _STATUS = (httpx.HTTPStatusError,)

__all__ = ["parse_retry_after", "retry_after_of", "translate", "translate_errors"]

_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    408: APITimeoutError,
    429: RateLimitError,
}


def parse_retry_after(
    headers: Mapping[str, str], *, now: Callable[[], float] = time.time
) -> float | None:
    """Read a wait hint in seconds from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` is either a number of seconds or an HTTP date; a date in the past gives 0.
    Unreadable values give ``None`` (no hint), never an error.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return max(value, 0.0)
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        return max(when.timestamp() - now(), 0.0)
    return max(value, 0.0) if math.isfinite(value) else None


def _message_of(body: object, fallback: str) -> str:
    """Find the human-readable message in an error body of any server's shape."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            for key in ("message", "detail", "msg"):
                if isinstance(inner.get(key), str):
                    return str(inner[key])
        if isinstance(inner, str):
            return inner
        detail = body.get("detail")
        if isinstance(detail, str):
            return detail
        if detail is not None:
            return repr(detail)[:500]
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return fallback


def _from_status(
    status: int,
    headers: Mapping[str, str],
    body: object,
    fallback: str,
    request_id: str | None,
) -> APIError:
    message = _message_of(body, fallback)
    if request_id is None:
        request_id = headers.get("x-request-id") or headers.get("request-id")
    retry_after = parse_retry_after(headers)
    if status == 429:
        return RateLimitError(
            f"rate limited: {message}",
            retry_after=retry_after,
            status_code=status,
            request_id=request_id,
            body=body,
        )
    if status >= 500:
        return ServerError(
            f"server error: {message}",
            status_code=status,
            request_id=request_id,
            body=body,
            retry_after=retry_after,
        )
    cls = _BY_STATUS.get(status, BadRequestError)
    return cls(
        message, status_code=status, request_id=request_id, body=body, retry_after=retry_after
    )


def translate(exc: BaseException) -> APIError | None:
    """Return our error for a foreign ``exc``, or ``None`` when it is not ours to translate."""
    if isinstance(exc, APIError):
        return None
    # openai's own tree, most specific first (APITimeoutError < APIConnectionError < APIError).
    if isinstance(exc, openai.APITimeoutError):
        return APITimeoutError("the request timed out")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        why = f": {cause}" if cause is not None and str(cause) else ""
        return APIConnectionError(f"could not reach the server{why}")
    if isinstance(exc, openai.APIStatusError):
        return _from_status(
            exc.status_code,
            exc.response.headers,
            exc.body,
            exc.message,
            getattr(exc, "request_id", None),
        )
    if isinstance(exc, openai.APIResponseValidationError):
        return ProviderResponseError(
            f"the server's answer does not have the expected shape: {exc.message}",
            status_code=exc.status_code,
            body=exc.body,
        )
    if isinstance(exc, openai.APIError):  # e.g. an error event inside an SSE stream
        return ServerError(f"the server reported an error: {exc.message}", body=exc.body)
    if isinstance(exc, json.JSONDecodeError):  # the SDK decoding a 2xx body or an SSE event
        return ProviderResponseError(
            f"the server's answer is not JSON ({exc.msg} at character {exc.pos}): {exc.doc[:200]!r}"
        )
    # Raw httpx / httpx2 errors (server probes, stream reads outside the SDK's wrapping).
    if isinstance(exc, _TIMEOUTS):
        return APITimeoutError("the request timed out")
    if isinstance(exc, _STATUS):
        response: Any = exc.response  # type: ignore[attr-defined]
        try:
            body: object = response.json()
        except Exception:  # any unreadable body is just "no body"
            body = getattr(response, "text", None)
        return _from_status(response.status_code, response.headers, body, str(exc), None)
    if isinstance(exc, _TRANSPORT):
        return APIConnectionError(f"could not reach the server: {exc}")
    return None


def retry_after_of(error: APIError) -> float | None:
    """The server's wait hint carried by ``error``, in seconds, when it sent one."""
    return error.retry_after


class translate_errors:  # lower case: used like a function, `with translate_errors():`
    """Context manager: re-raise foreign exceptions from the block as ``outlines_like.errors``.

    A class rather than ``@contextmanager`` because it wraps every request (cheaper).
    """

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if exc is None or not isinstance(exc, Exception):
            return False
        ours = translate(exc)
        if ours is None:
            return False
        raise ours from exc
