"""Retries with backoff, a client-side rate limiter, and the sync/async drivers of I/O flows.

A model call is written once, as a generator (a *flow*) that yields the steps it needs
(``Send`` a request, ``Sleep``, or a server probe) and receives their results, or has
their exceptions thrown into it. ``drive`` runs a flow with blocking I/O, ``adrive`` with
``await``; they are the only twinned code (httpx's ``Auth.auth_flow`` works the same way).

```python
policy = RetryPolicy(max_attempts=5, initial_delay=1.0)
model = from_server(client, retry=policy, rate_limit=RateLimiter(requests_per_minute=600))
```
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import random as _random
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from outlines_like.errors import APIError
from outlines_like.models._errors import retry_after_of
from outlines_like.telemetry import LOGGERS, attempt

_log = LOGGERS["models"]

__all__ = [
    "RateLimiter",
    "RetryPolicy",
    "Send",
    "Sleep",
    "adrive",
    "drive",
    "retry_flow",
]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before sending a failed request again.

    Retried: errors with ``retryable`` set (429, 5xx, timeouts, connection errors).
    Never retried: 4xx answers, refusals, and output that fails validation.
    The wait before attempt ``k + 1`` is ``min(max_delay, initial_delay * multiplier**(k-1))``,
    drawn uniformly from ``[0, that]`` when ``jitter`` ("full jitter"); a server's
    ``Retry-After`` replaces it, and a hint longer than ``max_retry_after`` ends the retries
    (the error, with its ``retry_after``, goes to the caller).

    Attributes:
        max_attempts: Attempts in all, the first included (1 = no retries).
        initial_delay: Seconds before the first retry (before jitter).
        max_delay: Upper bound of one backoff wait, in seconds.
        multiplier: Growth of the wait per attempt.
        jitter: Draw each wait from ``[0, backoff]`` so that clients do not retry in step.
        max_retry_after: The longest server hint honoured, in seconds.
        sleep: Blocking sleep (injectable for tests).
        async_sleep: Async sleep (injectable for tests).
        random: Uniform draw in ``[0, 1)`` (injectable for tests).
    """

    max_attempts: int = 3
    initial_delay: float = 0.5
    max_delay: float = 20.0
    multiplier: float = 2.0
    jitter: bool = True
    max_retry_after: float = 60.0
    sleep: Callable[[float], None] = dataclasses.field(
        default=time.sleep, repr=False, compare=False, kw_only=True
    )
    async_sleep: Callable[[float], Awaitable[None]] = dataclasses.field(
        default=asyncio.sleep, repr=False, compare=False, kw_only=True
    )
    random: Callable[[], float] = dataclasses.field(
        default=_random.random, repr=False, compare=False, kw_only=True
    )

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise TypeError(f"max_attempts must be an int, got {self.max_attempts!r}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("initial_delay", "max_delay", "max_retry_after"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not isinstance(self.multiplier, (int, float)) or self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier!r}")

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (1-based), jitter applied."""
        ceiling = min(self.max_delay, self.initial_delay * self.multiplier ** (attempt - 1))
        return ceiling * self.random() if self.jitter else ceiling

    def delay(self, attempt: int, error: APIError) -> float | None:
        """The wait before retrying after ``error``, or ``None`` to give up."""
        if not error.retryable or attempt >= self.max_attempts:
            return None
        hint = retry_after_of(error)
        if hint is not None:
            return hint if hint <= self.max_retry_after else None
        return self.backoff(attempt)


NO_RETRY = RetryPolicy(max_attempts=1)
"""The policy used with ``retry=None``: one attempt."""


class RateLimiter:
    """A client-side token bucket: at most ``requests_per_minute`` requests, ``burst`` at once.

    Thread-safe and task-safe: ``reserve()`` takes the next slot under a lock and returns how
    long to wait for it; ``acquire()`` sleeps that long, ``await aacquire()`` likewise without
    blocking the loop. Slots are handed out in order, so waiters never starve.

    Args:
        requests_per_minute: The sustained rate.
        burst: Requests allowed back to back after a quiet spell (default 1: evenly spaced).
        clock: Monotonic clock in seconds (injectable for tests).
        sleep: Blocking sleep used by ``acquire``.
        async_sleep: Async sleep used by ``aacquire``.
    """

    def __init__(
        self,
        requests_per_minute: float,
        *,
        burst: int = 1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if (
            isinstance(requests_per_minute, bool)
            or not isinstance(requests_per_minute, (int, float))
            or not math.isfinite(requests_per_minute)
            or requests_per_minute <= 0
        ):
            raise ValueError(
                f"requests_per_minute must be a positive number, got {requests_per_minute!r}"
            )
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise ValueError(f"burst must be an int >= 1, got {burst!r}")
        self.requests_per_minute = float(requests_per_minute)
        self.burst = burst
        self._rate = self.requests_per_minute / 60.0  # tokens per second
        self._clock = clock
        self._sleep = sleep
        self._async_sleep = async_sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._stamp = clock()

    def reserve(self) -> float:
        """Take the next slot; return the seconds to wait before using it (0 when free)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self._rate)
            self._stamp = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self._rate

    def acquire(self) -> None:
        """Block until a request may go out."""
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)

    async def aacquire(self) -> None:
        """Wait, without blocking the event loop, until a request may go out."""
        wait = self.reserve()
        if wait > 0:
            await self._async_sleep(wait)

    def __repr__(self) -> str:
        return f"RateLimiter(requests_per_minute={self.requests_per_minute:g}, burst={self.burst})"


@dataclasses.dataclass(frozen=True, slots=True)
class Send:
    """Flow step: send ``request`` once and hand back the response."""

    request: Any
    attempt: int = 1


@dataclasses.dataclass(frozen=True, slots=True)
class Sleep:
    """Flow step: wait ``seconds`` (blocking or awaited, as the driver does)."""

    seconds: float


@dataclasses.dataclass(frozen=True, slots=True)
class Acquire:
    """Flow step: wait for the rate limiter's next slot."""

    limiter: RateLimiter


Flow = Generator[Any, Any, T]
"""A flow yields steps, receives their results (or their exceptions, thrown in), returns T."""


def retry_flow(
    request: object, policy: RetryPolicy, limiter: RateLimiter | None = None
) -> Flow[Any]:
    """Send ``request`` until it succeeds or ``policy`` gives up; return the response.

    The final error propagates unchanged (with its ``__cause__``), so callers see the
    same exception type whether or not retries happened. Each retry is logged at INFO on
    ``outlines_like.models`` (``extra``: ``ol_attempt``, ``ol_error``, ``ol_status_code``,
    ``ol_delay_s``).
    """
    number = 1
    while True:
        if limiter is not None:
            yield Acquire(limiter)
        try:
            return (yield Send(request, number))
        except APIError as error:
            wait = policy.delay(number, error)
            if wait is None:
                raise
            if _log.isEnabledFor(logging.INFO):
                _log.info(
                    "attempt %d failed (%s: %s); retrying in %.3f s",
                    number,
                    type(error).__name__,
                    error,
                    wait,
                    extra={
                        "ol_attempt": number,
                        "ol_error": type(error).__name__,
                        "ol_status_code": error.status_code,
                        "ol_delay_s": wait,
                    },
                )
        yield Sleep(wait)
        number += 1


def drive(flow: Flow[T], execute: Callable[[Any], Any], policy: RetryPolicy) -> T:
    """Run ``flow`` with blocking I/O: ``execute`` performs I/O steps, sleeps use ``policy``."""
    try:
        step = next(flow)
        while True:
            try:
                result = None
                if isinstance(step, Sleep):
                    policy.sleep(step.seconds)
                elif isinstance(step, Acquire):
                    step.limiter.acquire()
                elif isinstance(step, Send):
                    with attempt(step.attempt):
                        result = execute(step)
                else:
                    result = execute(step)
            except Exception as exc:  # handed to the flow, which re-raises
                step = flow.throw(exc)
            else:
                step = flow.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        flow.close()


async def adrive(flow: Flow[T], execute: Callable[[Any], Awaitable[Any]], policy: RetryPolicy) -> T:
    """Run ``flow`` with async I/O: ``await execute(step)``; sleeps use ``policy.async_sleep``."""
    try:
        step = next(flow)
        while True:
            try:
                result = None
                if isinstance(step, Sleep):
                    await policy.async_sleep(step.seconds)
                elif isinstance(step, Acquire):
                    await step.limiter.aacquire()
                elif isinstance(step, Send):
                    with attempt(step.attempt):
                        result = await execute(step)
                else:
                    result = await execute(step)
            except Exception as exc:  # handed to the flow, which re-raises
                step = flow.throw(exc)
            else:
                step = flow.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        flow.close()
