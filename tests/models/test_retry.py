"""Retry policy, rate limiter, the retry flow and its sync/async drivers (no real sleeping)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from outlines_like.errors import (
    APIConnectionError,
    APIError,
    BadRequestError,
    GenerationError,
    RateLimitError,
    ServerError,
)
from outlines_like.models.retry import (
    Acquire,
    RateLimiter,
    RetryPolicy,
    Send,
    Sleep,
    adrive,
    drive,
    retry_flow,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


def make_policy(clock: Clock, **kw: Any) -> RetryPolicy:
    return RetryPolicy(sleep=clock.sleep, async_sleep=clock.asleep, **kw)


# ----------------------------------------------------------------------------- policy


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_attempts": 0}, ValueError, "max_attempts must be >= 1"),
        ({"max_attempts": 2.5}, TypeError, "max_attempts must be an int"),
        ({"max_attempts": True}, TypeError, "max_attempts must be an int"),
        ({"initial_delay": -1}, ValueError, "initial_delay"),
        ({"max_delay": float("inf")}, ValueError, "max_delay"),
        ({"multiplier": 0.5}, ValueError, "multiplier"),
    ],
)
def test_policy_validation(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize(
    ("attempt", "draw", "jitter", "expected"),
    [
        (1, 0.5, False, 0.5),
        (2, 0.5, False, 1.0),
        (3, 0.5, False, 2.0),
        (10, 0.5, False, 20.0),  # capped at max_delay
        (1, 0.5, True, 0.25),  # full jitter: uniform in [0, backoff]
        (3, 0.0, True, 0.0),
        (3, 0.999, True, 2.0 * 0.999),
    ],
)
def test_backoff(attempt: int, draw: float, jitter: bool, expected: float) -> None:
    policy = RetryPolicy(jitter=jitter, random=lambda: draw)
    assert policy.backoff(attempt) == pytest.approx(expected)


def rate_limited(after: float | None) -> RateLimitError:
    return RateLimitError("slow down", retry_after=after, status_code=429)


@pytest.mark.parametrize(
    ("error", "attempt", "expected"),
    [
        (ServerError("boom", status_code=500), 1, 0.5),
        (ServerError("boom", status_code=500), 3, None),  # max_attempts reached
        (APIConnectionError("down"), 2, 1.0),
        (BadRequestError("bad", status_code=400), 1, None),  # not retryable
        (GenerationError("refused", reason="refusal"), 1, None),
        (rate_limited(7.0), 1, 7.0),  # Retry-After wins over backoff
        (rate_limited(0.0), 1, 0.0),
        (rate_limited(61.0), 1, None),  # longer than max_retry_after: give up
        (rate_limited(None), 2, 1.0),
    ],
)
def test_delay(error: APIError, attempt: int, expected: float | None) -> None:
    policy = RetryPolicy(jitter=False)
    assert policy.delay(attempt, error) == expected


def test_server_error_retry_after_is_honoured() -> None:
    error = ServerError("busy", status_code=503)
    error.retry_after = 3.0  # type: ignore[attr-defined]  # as _errors sets it from headers
    assert RetryPolicy(jitter=False).delay(1, error) == 3.0


# ----------------------------------------------------------------------------- the flow


def test_flow_steps() -> None:
    policy = RetryPolicy(jitter=False)
    flow = retry_flow("req", policy)
    assert next(flow) == Send("req", 1)
    assert flow.throw(ServerError("boom")) == Sleep(0.5)
    assert flow.send(None) == Send("req", 2)
    with pytest.raises(StopIteration) as stop:
        flow.send("response")
    assert stop.value.value == "response"


def test_flow_with_limiter_acquires_before_each_attempt() -> None:
    limiter = RateLimiter(60)
    flow = retry_flow("req", RetryPolicy(jitter=False), limiter)
    assert next(flow) == Acquire(limiter)
    assert flow.send(None) == Send("req", 1)


def test_flow_reraises_the_same_error() -> None:
    flow = retry_flow("req", RetryPolicy(max_attempts=1))
    next(flow)
    error = ServerError("boom")
    with pytest.raises(ServerError) as info:
        flow.throw(error)
    assert info.value is error


class Sender:
    """Fails with the queued errors, then answers."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.attempts: list[int] = []

    def __call__(self, step: Send) -> str:
        self.attempts.append(step.attempt)
        if self.errors:
            raise self.errors.pop(0)
        return f"ok after {len(self.attempts)}"

    async def acall(self, step: Send) -> str:
        await asyncio.sleep(0)
        return self(step)


@pytest.mark.parametrize(
    ("errors", "max_attempts", "outcome", "slept"),
    [
        ((), 3, "ok after 1", []),
        ((ServerError("a"),), 3, "ok after 2", [0.5]),
        ((ServerError("a"), APIConnectionError("b")), 3, "ok after 3", [0.5, 1.0]),
        ((ServerError("a"),) * 3, 3, ServerError, [0.5, 1.0]),
        ((rate_limited(2.0),), 3, "ok after 2", [2.0]),
        ((BadRequestError("no"),), 3, BadRequestError, []),
        ((ValueError("bug"),), 3, ValueError, []),  # not an APIError: never retried
    ],
)
async def test_drivers_agree(
    errors: tuple[Exception, ...], max_attempts: int, outcome: object, slept: list[float]
) -> None:
    for mode in ("sync", "async"):
        clock = Clock()
        policy = make_policy(clock, max_attempts=max_attempts, jitter=False)
        sender = Sender(*errors)
        flow = retry_flow("req", policy)
        result: object
        try:
            if mode == "sync":
                result = drive(flow, sender, policy)
            else:
                result = await adrive(flow, sender.acall, policy)
        except Exception as exc:  # compared below
            result = type(exc)
        assert result == outcome, mode
        assert clock.slept == slept, mode
        assert sender.attempts == list(range(1, len(sender.attempts) + 1))


# ----------------------------------------------------------------------------- rate limiter


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"requests_per_minute": 0}, "requests_per_minute"),
        ({"requests_per_minute": -5}, "requests_per_minute"),
        ({"requests_per_minute": float("nan")}, "requests_per_minute"),
        ({"requests_per_minute": 60, "burst": 0}, "burst"),
    ],
)
def test_limiter_validation(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RateLimiter(**kwargs)


def test_limiter_spaces_requests() -> None:
    clock = Clock()
    limiter = RateLimiter(120, clock=clock, sleep=clock.sleep)  # one every 0.5 s
    for _ in range(4):
        limiter.acquire()
    assert clock.slept == [0.5, 0.5, 0.5]


def test_limiter_reservations_queue_up() -> None:
    clock = Clock()
    limiter = RateLimiter(60, burst=2, clock=clock)
    assert [limiter.reserve() for _ in range(5)] == [0.0, 0.0, 1.0, 2.0, 3.0]
    clock.now = 10.0  # a quiet spell refills up to the burst, no more
    assert [limiter.reserve() for _ in range(3)] == [0.0, 0.0, 1.0]


def test_limiter_is_thread_safe() -> None:
    clock = Clock()
    limiter = RateLimiter(60, clock=clock)
    waits: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(50):
            wait = limiter.reserve()
            with lock:
                waits.append(wait)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(waits) == [float(i) for i in range(200)]  # every slot handed out once


async def test_limiter_async_acquire() -> None:
    clock = Clock()
    limiter = RateLimiter(30, clock=clock, async_sleep=clock.asleep)
    await asyncio.gather(*(limiter.aacquire() for _ in range(3)))
    assert sorted(clock.slept) == [2.0, 2.0]  # the clock advanced after the first wait
    assert repr(limiter) == "RateLimiter(requests_per_minute=30, burst=1)"
