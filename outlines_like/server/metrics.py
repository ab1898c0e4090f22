"""The reference server's metrics, written in the Prometheus text format (``GET /metrics``).

No client library: counters, a histogram and the text format (version 0.0.4) are small
enough to write here. What is counted:

- ``outlines_like_requests_total{route, status}``: every answered request (the route's
  template, ``other`` for unknown paths, so that random paths do not grow the label set);
- ``outlines_like_request_duration_seconds``: time to the response's start (a stream's
  start; its end is on the request's span);
- ``outlines_like_prompt_tokens_total``, ``outlines_like_completion_tokens_total``;
- ``outlines_like_queue_depth``, ``outlines_like_running_sequences``: read from the scheduler
  at scrape time;
- ``outlines_like_mask_step_seconds``: the masker's time in each engine step that masked
  (filling and applying masks, advancing matchers, waiting for mask threads).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from outlines_like.engine.pipeline import GenerationRequest, StepOutput, TransformersPipeline
    from outlines_like.engine.scheduler import Scheduler

__all__ = ["CONTENT_TYPE", "Histogram", "Metrics", "MetricsMiddleware", "TimedPipeline"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

MASK_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class Histogram:
    """A cumulative histogram (thread-safe); ``observe`` costs a bisect and two additions.

    Args:
        buckets: The upper bounds, increasing (``+Inf`` is added).
    """

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self._counts = [0] * (len(self.buckets) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        """Count one observation."""
        i = bisect.bisect_left(self.buckets, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value

    def lines(self, name: str) -> list[str]:
        """The ``_bucket``, ``_sum`` and ``_count`` lines."""
        with self._lock:
            counts = list(self._counts)
            total = self._sum
        out = []
        running = 0
        for bound, count in zip((*self.buckets, float("inf")), counts, strict=True):
            running += count
            le = "+Inf" if bound == float("inf") else _number(bound)
            out.append(f'{name}_bucket{{le="{le}"}} {running}')
        out.append(f"{name}_sum {_number(total)}")
        out.append(f"{name}_count {running}")
        return out


class Metrics:
    """The server's counters and histograms; ``render`` writes them as Prometheus text."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str], int] = {}
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.request_seconds = Histogram(REQUEST_BUCKETS)
        self.mask_step_seconds = Histogram(MASK_BUCKETS)

    def request(self, route: str, status: int, seconds: float) -> None:
        """Count one answered request."""
        key = (route, str(status))
        with self._lock:
            self.requests[key] = self.requests.get(key, 0) + 1
        self.request_seconds.observe(seconds)

    def tokens(self, prompt: int, completion: int) -> None:
        """Count the tokens of one finished request."""
        with self._lock:
            self.prompt_tokens += prompt
            self.completion_tokens += completion

    def render(self, scheduler: Scheduler | None = None) -> str:
        """Everything, in the Prometheus text format (gauges read from ``scheduler``)."""
        with self._lock:
            requests = sorted(self.requests.items())
            prompt, completion = self.prompt_tokens, self.completion_tokens
        out: list[str] = []

        def head(name: str, kind: str, text: str) -> None:
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")

        head("outlines_like_requests_total", "counter", "Requests answered, by route and status.")
        for (route, status), count in requests:
            out.append(
                f'outlines_like_requests_total{{route="{_label(route)}",status="{status}"}} {count}'
            )
        head(
            "outlines_like_request_duration_seconds",
            "histogram",
            "Time from a request's arrival to its response's start.",
        )
        out += self.request_seconds.lines("outlines_like_request_duration_seconds")
        head("outlines_like_prompt_tokens_total", "counter", "Prompt tokens of finished requests.")
        out.append(f"outlines_like_prompt_tokens_total {prompt}")
        head("outlines_like_completion_tokens_total", "counter", "Tokens generated.")
        out.append(f"outlines_like_completion_tokens_total {completion}")
        if scheduler is not None:
            head("outlines_like_queue_depth", "gauge", "Requests waiting for a batch slot.")
            out.append(f"outlines_like_queue_depth {scheduler.queue_depth}")
            head("outlines_like_running_sequences", "gauge", "Requests in the running batch.")
            out.append(f"outlines_like_running_sequences {scheduler.running}")
        head(
            "outlines_like_mask_step_seconds",
            "histogram",
            "The masker's time in each engine step that masked.",
        )
        out += self.mask_step_seconds.lines("outlines_like_mask_step_seconds")
        return "\n".join(out) + "\n"


class TimedPipeline:
    """A pipeline that reports the masker's time of each step to a histogram.

    The scheduler steps this instead of the pipeline itself; the time is the step's share of
    ``pipeline.stats.mask_seconds``, read on the engine thread that writes it.
    """

    def __init__(self, pipeline: TransformersPipeline, histogram: Histogram) -> None:
        self.pipeline = pipeline
        self.histogram = histogram

    def execute(self, batch: Sequence[GenerationRequest]) -> dict[str, StepOutput]:
        """Run one step of the pipeline; observe its mask time when it masked."""
        stats = self.pipeline.stats
        before = stats.mask_seconds
        try:
            return self.pipeline.execute(batch)
        finally:
            spent = stats.mask_seconds - before
            if spent > 0:
                self.histogram.observe(spent)

    def release(self, request_id: str) -> None:
        """Free a request's state."""
        self.pipeline.release(request_id)


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class MetricsMiddleware:
    """Plain ASGI middleware: counts every HTTP request by route template and status.

    Args:
        app: The ASGI app inside.
        metrics: Where to count; a callable returning the ``Metrics`` (or ``None`` before
            the service is loaded).
    """

    def __init__(self, app: Any, metrics: Callable[[], Metrics | None]) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; count it when its response starts (or when it fails)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]  # what an exception that escapes the app becomes

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
                self._count(scope, status[0], started)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except BaseException:
            self._count(scope, 500, started)
            raise

    def _count(self, scope: Scope, status: int, started: float) -> None:
        metrics = self.metrics()
        if metrics is None or scope.get("_ol_counted"):
            return
        scope["_ol_counted"] = True
        route = scope.get("route")
        path = getattr(route, "path", None)
        metrics.request(
            path if isinstance(path, str) else "other", status, time.perf_counter() - started
        )
