"""``outlines_like.telemetry``: the layer loggers, the per-request record, the no-op path."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from outlines_like import telemetry
from outlines_like.adapters import LlamaCppAdapter
from outlines_like.types import JsonSchema, Regex


def test_one_logger_per_layer_and_no_handlers() -> None:
    assert sorted(telemetry.LOGGERS) == ["adapters", "engine", "models", "server"]
    for layer, log in telemetry.LOGGERS.items():
        assert log.name == f"outlines_like.{layer}"


def test_importing_and_calling_configures_no_logging_and_imports_no_opentelemetry() -> None:
    code = (
        "import logging, sys\n"
        "import outlines_like as ol, outlines_like.models, outlines_like.telemetry\n"
        "t = outlines_like.telemetry.start('chat', method='call')\n"
        "with t.active(): pass\n"
        "t.end()\n"
        "names = [n for n in logging.root.manager.loggerDict if n.startswith('outlines_like')]\n"
        "print(sum(len(logging.getLogger(n).handlers) for n in names), len(logging.root.handlers),"
        " any(m.startswith('opentelemetry') for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "0", "False"]


@pytest.mark.parametrize(
    ("value", "name"),
    [(Regex("a"), "regex"), (JsonSchema({}), "json_schema"), (ValueError(), "value_error")],
)
def test_kind_name(value: object, name: str) -> None:
    assert telemetry.kind_name(value) == name


def test_a_trace_without_spans_still_writes_its_record(caplog: pytest.LogCaptureFixture) -> None:
    trace = telemetry.start("chat", method="call", output_type="Hero")
    assert trace.span is None
    with trace.active():
        assert telemetry.current() is trace
        with telemetry.attempt(1):
            pass
        with telemetry.attempt(2):
            pass
    assert telemetry.current() is None
    trace.request(model="m", server_kind="vllm", max_tokens=5)
    trace.response(input_tokens=3, output_tokens=2, finish_reasons=["stop"])
    trace.response(input_tokens=4, output_tokens=1)  # a second request of the same call
    with caplog.at_level(logging.DEBUG, logger="outlines_like"):
        trace.end()
        trace.end()  # once only
    (record,) = caplog.records
    assert record.levelno == logging.DEBUG
    assert (record.ol_input_tokens, record.ol_output_tokens) == (7, 3)  # type: ignore[attr-defined]
    assert (record.ol_attempts, record.ol_retries) == (2, 1)  # type: ignore[attr-defined]
    assert "call m (vllm) done" in record.getMessage()


@pytest.mark.parametrize(("ours", "level"), [(True, logging.WARNING), (False, logging.INFO)])
def test_a_failure_is_a_warning_unless_it_is_the_requests_fault(
    caplog: pytest.LogCaptureFixture, ours: bool, level: int
) -> None:
    trace = telemetry.start("chat", layer="server", route="/v1/chat/completions")
    with caplog.at_level(logging.DEBUG, logger="outlines_like"):
        trace.end(ValueError("bad"), ours=ours)
    (record,) = caplog.records
    assert (record.name, record.levelno) == ("outlines_like.server", level)
    assert record.ol_error == "ValueError"  # type: ignore[attr-defined]


def test_a_closed_stream_is_not_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    trace = telemetry.start("chat", method="stream")
    with caplog.at_level(logging.DEBUG, logger="outlines_like"):
        trace.end(closed=True)
    (record,) = caplog.records
    assert record.levelno == logging.DEBUG
    assert record.ol_closed is True  # type: ignore[attr-defined]


def test_the_adapter_logs_when_a_schema_goes_as_our_compiled_form(
    caplog: pytest.LogCaptureFixture,
) -> None:
    schema = {"type": "string", "pattern": "ab+c", "title": "telemetry-test"}
    with caplog.at_level(logging.DEBUG, logger="outlines_like.adapters"):
        fields = LlamaCppAdapter().constraint_fields(JsonSchema(schema), endpoint="chat")
    assert "grammar" in fields["extra_body"]
    (record,) = caplog.records
    assert record.name == "outlines_like.adapters"
    assert record.ol_dropped == ["pattern"]  # type: ignore[attr-defined]
    assert "our compiled regex" in record.getMessage()


def test_the_docs_name_every_record_field() -> None:
    import pathlib

    page = (pathlib.Path(__file__).parent.parent / "docs" / "observability.md").read_text()
    missing = [f for f in telemetry.FIELDS if f"`ol_{f}`" not in page]
    assert not missing
