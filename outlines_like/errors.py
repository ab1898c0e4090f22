"""Every exception outlines-like raises, in one tree.

```
OutlinesLikeError
├── APIError                      (status_code, request_id, retryable, retry_after)
│   ├── AuthenticationError       401
│   ├── PermissionDeniedError     403
│   ├── NotFoundError             404
│   ├── RateLimitError            429 (retryable; retry_after)
│   ├── BadRequestError           400, 409, 422 and other 4xx
│   ├── ServerError               5xx (retryable)
│   ├── APITimeoutError           no answer in time (retryable)
│   ├── APIConnectionError        no connection (retryable)
│   ├── ProviderResponseError     a 2xx answer we cannot read
│   └── GenerationError           refusal, content filter, output cut at max_tokens
├── UnsupportedConstraintError    (also TypeError) the server or engine cannot take this type
├── InvalidConstraintError        (also ValueError) the regex, schema or grammar is wrong
│   └── ConstraintTooLargeError   (limit, where) compiling or masking it ran past a budget
├── ParseError                    (also ValueError) text that does not fit the output type
│   └── ConstraintViolationError  a server's answer breaks the constraint that was sent
├── RejectedTokenError            (also ValueError) a matcher was given a disallowed token
└── MaxToolStepsError             (also RuntimeError) a tool loop hit its step limit
```

Warnings (all ``UserWarning``): ``TruncatedOutputWarning``, ``ConstraintViolationWarning``,
``ReasoningRecoveredWarning``, ``ThinkingConstrainedWarning``, ``ToolCallParseWarning``,
``UnenforcedKeywordWarning``.

Foreign exceptions (``openai``, ``httpx``) are translated to these at one boundary,
``outlines_like.models._errors``; programmer errors are never relabelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from outlines_like.messages import Attempt

__all__ = [
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "ConstraintTooLargeError",
    "ConstraintViolationError",
    "ConstraintViolationWarning",
    "GenerationError",
    "InvalidConstraintError",
    "MaxToolStepsError",
    "NotFoundError",
    "OutlinesLikeError",
    "ParseError",
    "PermissionDeniedError",
    "ProviderResponseError",
    "RateLimitError",
    "ReasoningRecoveredWarning",
    "RejectedTokenError",
    "ServerError",
    "ThinkingConstrainedWarning",
    "ToolCallParseWarning",
    "TruncatedOutputWarning",
    "UnenforcedKeywordWarning",
    "UnsupportedConstraintError",
]


class OutlinesLikeError(Exception):
    """Root of every exception this library raises on purpose."""


class APIError(OutlinesLikeError):
    """A request to a server failed.

    Attributes:
        status_code: The HTTP status, or ``None`` when no answer came.
        request_id: The server's request id (``x-request-id``), when it sent one.
        retryable: Whether sending the same request again may succeed.
        body: The decoded error body, when there was one.
        retry_after: The server's ``Retry-After`` hint in seconds (429 and 503 send it).
    """

    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        request_id: str | None = None,
        retryable: bool | None = None,
        body: object = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.request_id = request_id
        self.retryable = self.default_retryable if retryable is None else retryable
        self.body = body
        self.retry_after = retry_after

    def __str__(self) -> str:
        parts = [self.message]
        if self.status_code is not None:
            parts.append(f"(status {self.status_code})")
        if self.request_id:
            parts.append(f"[request {self.request_id}]")
        return " ".join(parts)


class AuthenticationError(APIError):
    """The server rejected the credentials (401)."""


class PermissionDeniedError(APIError):
    """The credentials are valid but not allowed to do this (403)."""


class NotFoundError(APIError):
    """The model or route does not exist on this server (404)."""


class RateLimitError(APIError):
    """Too many requests (429); ``retry_after`` holds the server's hint in seconds."""

    default_retryable = True


class BadRequestError(APIError):
    """The server refused the request as malformed (400, 409, 422, other 4xx)."""


class ServerError(APIError):
    """The server failed (5xx)."""

    default_retryable = True


class APITimeoutError(APIError):
    """No answer came in time."""

    default_retryable = True


class APIConnectionError(APIError):
    """The server could not be reached."""

    default_retryable = True


class ProviderResponseError(APIError):
    """The server answered 2xx with something we cannot read."""


class GenerationError(APIError):
    """The model's answer cannot be used: a refusal, a content filter, or output cut at max_tokens.

    Attributes:
        reason: ``"refusal"``, ``"content_filter"`` or ``"length"``.
        text: The (partial) text the model produced, when any.
    """

    def __init__(self, message: str, *, reason: str, text: str | None = None, **kwargs: object):
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.reason = reason
        self.text = text


class UnsupportedConstraintError(OutlinesLikeError, TypeError):
    """The output type cannot be sent to this server or compiled by this engine.

    Raised before any request goes out; the message names the server and what would work.
    """


class InvalidConstraintError(OutlinesLikeError, ValueError):
    """The regex, JSON Schema or grammar is wrong; the message says where."""


class ConstraintTooLargeError(InvalidConstraintError):
    """Compiling or masking a constraint ran past a budget (``outlines_like.fsm.Budget``).

    Raised where the work happens (while a regex's automaton grows, a grammar's tables are
    built, a JSON Schema is converted or a mask is computed), so the work stops there.

    Attributes:
        limit: What ran out: ``"seconds"``, ``"states"``, ``"bytes"``, ``"grammar_size"`` or
            ``"depth"``.
        where: The construct being built when it ran out (a JSON pointer when known).
    """

    def __init__(self, message: str, *, limit: str, where: str = "") -> None:
        super().__init__(message)
        self.limit = limit
        self.where = where


class ParseError(OutlinesLikeError, ValueError):
    """Text that does not fit the requested output type; the message quotes the text.

    Attributes:
        text: The text that failed to parse.
        attempts: When the call reasked (``model.parse(..., retries=N)``): every answer it
            got, this one last, each with its error and usage; empty otherwise.
    """

    def __init__(self, message: str, *, text: str) -> None:
        super().__init__(message)
        self.text = text
        self.attempts: tuple[Attempt, ...] = ()


class ConstraintViolationError(ParseError):
    """A server returned text that breaks the constraint it was sent.

    Raised when the local check of an answer fails (``verify=True``, the default): the
    server dropped or mis-enforced part of the constraint. It is a ``ParseError``, so code
    that catches parse failures catches it too.

    Attributes:
        text: The answer as the server returned it.
        reason: Why it does not fit (JSON pointer, regex or grammar position).
        server: The server kind the request was built for (``"llamacpp"``, ``"vllm"``...).
        server_version: The server's version when detection learnt it, else ``None``.
        fields: The constraint fields that were sent (``response_format``, ``extra_body``...).
    """

    def __init__(
        self,
        message: str,
        *,
        text: str,
        reason: str,
        server: str | None = None,
        server_version: str | None = None,
        fields: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, text=text)
        self.reason = reason
        self.server = server
        self.server_version = server_version
        self.fields = fields or {}


class MaxToolStepsError(OutlinesLikeError, RuntimeError):
    """The model still asked for tools after ``max_steps`` calls.

    Attributes:
        messages: The conversation so far (OpenAI message dicts), to resume or inspect.
        steps: How many model calls were made.
    """

    def __init__(self, message: str, *, messages: list[dict[str, Any]], steps: int) -> None:
        super().__init__(message)
        self.messages = messages
        self.steps = steps


class RejectedTokenError(OutlinesLikeError, ValueError):
    """``Matcher.advance`` was given a token the constraint does not allow here.

    Attributes:
        token_id: The rejected token id.
    """

    def __init__(self, message: str, *, token_id: int) -> None:
        super().__init__(message)
        self.token_id = token_id


# --------------------------------------------------------------------------- warnings


class UnenforcedKeywordWarning(UserWarning):
    """A schema keyword narrows the valid documents but the regex cannot enforce it.

    Emitted instead of :class:`~outlines_like.errors.InvalidConstraintError` when
    ``json_schema_to_regex(..., lenient=True)``; the keyword is then ignored.
    """


class TruncatedOutputWarning(UserWarning):
    """Constrained output was cut at ``max_tokens``: it is likely incomplete and invalid.

    ``model(...)`` and ``model.stream(...)`` warn; ``model.parse(...)`` raises
    ``GenerationError(reason="length")`` instead. Raise ``max_tokens`` to fix it.
    """


class ToolCallParseWarning(UserWarning):
    """A tool call in the model's text could not be read; it was left in the text."""


class ReasoningRecoveredWarning(UserWarning):
    """The answer was found in a reasoning field (a known server bug) and moved back.

    Seen with vLLM's and LM Studio's reasoning parsers when thinking is disabled or the
    output is constrained: ``content`` is empty and the whole answer sits in
    ``reasoning_content``.
    """


class ThinkingConstrainedWarning(UserWarning):
    """A constraint will be enforced from the first token of a thinking model's output.

    Without a reasoning parser on the server, the schema or regex also applies to the
    model's ``<think>`` block, so the model cannot think: quality drops, silently.
    """


class ConstraintViolationWarning(UserWarning):
    """A server's answer breaks its constraint, and ``verify="warn"`` returns it anyway.

    With the default ``verify=True`` the same finding raises ``ConstraintViolationError``.
    """
