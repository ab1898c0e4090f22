"""An OpenTelemetry SDK with an in-memory exporter, set up for one test and taken down after.

The SDK allows one global tracer provider per process; the ``spans`` fixture resets the API's
globals around each test (as OpenTelemetry's own test utilities do), so tests that do not ask
for spans run with tracing off, the library's default.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

trace = pytest.importorskip("opentelemetry.trace")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
export = pytest.importorskip("opentelemetry.sdk.trace.export")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")


def _reset() -> None:
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]


@pytest.fixture
def spans() -> Iterator[Any]:
    """The in-memory exporter of a tracer provider set for this test only."""
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    _reset()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        _reset()


def by_name(exporter: Any, name: str) -> list[Any]:
    """The finished spans called ``name``."""
    return [s for s in exporter.get_finished_spans() if s.name == name]


def children(exporter: Any, parent: Any) -> list[Any]:
    """The finished spans whose parent is ``parent``, in start order."""
    found = [
        s
        for s in exporter.get_finished_spans()
        if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]
    return sorted(found, key=lambda s: s.start_time)
