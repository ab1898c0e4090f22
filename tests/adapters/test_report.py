"""The compatibility report: native, compiled or rejected, per JSON pointer."""

from __future__ import annotations

import pydantic
import pytest

from outlines_like.adapters.report import compatibility
from outlines_like.types import CFG, Regex


class Score(pydantic.BaseModel):
    score: float = pydantic.Field(ge=0, le=1)


class Step(pydantic.BaseModel):
    n: int = pydantic.Field(multiple_of=5)


def _status(report: object, pointer: str) -> str:
    rows = {r.pointer: r.enforcement for r in report.rows}  # type: ignore[attr-defined]
    return rows[pointer]


def test_llamacpp_number_bounds_are_compiled() -> None:
    report = compatibility(Score, "llamacpp")
    assert report.ok
    assert _status(report, "#/properties/score/minimum") == "compiled"
    assert _status(report, "#/properties/score/type") == "native"
    assert report.fields is not None
    assert "grammar" in report.fields["extra_body"]
    assert "compiled" in str(report)


def test_vllm_enforces_number_bounds_natively() -> None:
    report = compatibility(Score, "vllm")
    assert report.ok
    assert {r.enforcement for r in report.rows} == {"native"}
    assert report.fields == {
        "extra_body": {"structured_outputs": {"json": Score.model_json_schema()}}
    }


def test_what_cannot_be_enforced_is_rejected_with_the_reason() -> None:
    report = compatibility(Step, "llamacpp")
    assert not report.ok
    assert _status(report, "#/properties/n/multipleOf") == "rejected"
    assert report.error is not None
    assert "multipleOf" in report.error
    assert "refused before sending" in str(report)


@pytest.mark.parametrize(
    ("output_type", "server", "ok"),
    [
        (Regex("[a-z]+"), "openai", False),
        (Regex("[a-z]+"), "sglang", True),
        (CFG('start: "a"+'), "llamacpp", True),
        (CFG('start: "a"+'), "tgi", False),
        (None, "openai", True),
    ],
)
def test_regexes_and_grammars_are_one_row(output_type: object, server: str, ok: bool) -> None:
    report = compatibility(output_type, server)
    assert report.ok is ok
    assert len(report.rows) == (0 if output_type is None else 1)


def test_unknown_server_kind() -> None:
    with pytest.raises(ValueError, match="unknown server kind"):
        compatibility(int, "nope")
