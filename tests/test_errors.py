"""The exception tree: one root, builtin bases for bad input, attributes kept."""

from __future__ import annotations

import pytest

from outlines_like import errors as e


@pytest.mark.parametrize(
    "cls",
    [
        e.AuthenticationError,
        e.PermissionDeniedError,
        e.NotFoundError,
        e.RateLimitError,
        e.BadRequestError,
        e.ServerError,
        e.APITimeoutError,
        e.APIConnectionError,
        e.ProviderResponseError,
    ],
)
def test_api_errors_share_one_root(cls: type[e.APIError]) -> None:
    assert issubclass(cls, e.APIError)
    assert issubclass(cls, e.OutlinesLikeError)


@pytest.mark.parametrize(
    ("cls", "retryable"),
    [
        (e.RateLimitError, True),
        (e.ServerError, True),
        (e.APITimeoutError, True),
        (e.APIConnectionError, True),
        (e.BadRequestError, False),
        (e.AuthenticationError, False),
    ],
)
def test_retryable_defaults(cls: type[e.APIError], retryable: bool) -> None:
    assert cls("x").retryable is retryable
    assert cls("x", retryable=not retryable).retryable is (not retryable)


def test_api_error_carries_status_and_request_id() -> None:
    err = e.ServerError("boom", status_code=503, request_id="req-1", body={"error": "x"})
    assert err.status_code == 503
    assert err.request_id == "req-1"
    assert err.body == {"error": "x"}
    assert str(err) == "boom (status 503) [request req-1]"


def test_rate_limit_keeps_retry_after() -> None:
    err = e.RateLimitError("slow down", retry_after=2.5, status_code=429)
    assert err.retry_after == 2.5
    assert err.status_code == 429


def test_generation_error_reason_and_text() -> None:
    err = e.GenerationError("cut", reason="length", text='{"a":')
    assert isinstance(err, e.APIError)
    assert (err.reason, err.text) == ("length", '{"a":')


def test_bad_input_errors_are_builtin_errors_too() -> None:
    assert issubclass(e.UnsupportedConstraintError, TypeError)
    assert issubclass(e.InvalidConstraintError, ValueError)
    assert issubclass(e.ParseError, ValueError)
    with pytest.raises(TypeError):
        raise e.UnsupportedConstraintError("no")


def test_the_tree_is_drawn_in_the_docstring() -> None:
    doc = e.__doc__ or ""
    for name in e.__all__:
        assert name in doc, name
