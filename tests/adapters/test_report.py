"""The compatibility report: native, compiled or rejected, per JSON pointer."""

from __future__ import annotations

import pydantic
import pytest

from outlines_like.adapters.report import check
from outlines_like.types import CFG, Regex


class Score(pydantic.BaseModel):
    score: float = pydantic.Field(ge=0, le=1)


class Step(pydantic.BaseModel):
    n: int = pydantic.Field(multiple_of=3, ge=0)  # a step the local masker cannot enforce


def _status(report: object, pointer: str) -> str:
    rows = {r.pointer: r.enforcement for r in report.rows}  # type: ignore[attr-defined]
    return rows[pointer]


def test_llamacpp_number_bounds_are_compiled() -> None:
    report = check(Score, "llamacpp")
    assert report.ok
    assert _status(report, "#/properties/score/minimum") == "compiled"
    assert _status(report, "#/properties/score/type") == "native"
    assert report.fields is not None
    assert "grammar" in report.fields["extra_body"]
    assert "compiled" in str(report)


def test_vllm_enforces_number_bounds_natively() -> None:
    report = check(Score, "vllm")
    assert report.ok
    assert {r.enforcement for r in report.rows} == {"native"}
    assert report.fields == {
        "extra_body": {"structured_outputs": {"json": Score.model_json_schema()}}
    }


def test_what_cannot_be_enforced_is_rejected_with_the_reason() -> None:
    report = check(Step, "llamacpp")
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
    report = check(output_type, server)
    assert report.ok is ok
    assert len(report.rows) == (0 if output_type is None else 1)


def test_unknown_server_kind() -> None:
    with pytest.raises(ValueError, match="unknown server kind"):
        check(int, "nope")


def test_the_top_level_name_and_the_command(tmp_path: object, capsys: object) -> None:
    import json
    import pathlib

    import outlines_like as ol
    from outlines_like.cli import main

    assert ol.check is check
    path = pathlib.Path(str(tmp_path)) / "score.json"
    path.write_text(json.dumps(Score.model_json_schema()))
    assert main(["check", str(path), "--server", "llamacpp"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "#/properties/score/minimum" in out
    assert "compiled" in out
    path.write_text(json.dumps(Step.model_json_schema()))
    assert main(["check", str(path), "--server", "llamacpp"]) == 1
    assert "refused before sending" in capsys.readouterr().out  # type: ignore[attr-defined]
    assert main(["check", str(path), "--server", "nope"]) == 2
