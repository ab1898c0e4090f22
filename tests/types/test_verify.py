"""The local check of answers: every term kind, right and wrong texts."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Literal

import pydantic
import pytest

from outlines_like.errors import ConstraintViolationError, ParseError
from outlines_like.types import CFG, JsonObject, JsonSchema, Regex, to_term
from outlines_like.types.verify import violation


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Score(pydantic.BaseModel):
    score: float = pydantic.Field(ge=0, le=1)


ARITH = CFG('start: expr\nexpr: NUMBER | expr "+" expr\nNUMBER: /[0-9]+/\n')
GBNF = CFG('root ::= "yes" | "no" | [0-9]+')


@pytest.mark.parametrize(
    ("output_type", "good", "bad"),
    [
        (int, "42", "4.2"),
        (int, "-7", "07"),
        (float, "1.5e3", "abc"),
        (bool, "true", "True!"),
        (Literal["a", "b"], "a", "c"),
        (Color, "green", "blue"),
        (dt.date, "2024-02-29", "2024-2-29"),
        (Regex(r"[A-Z]{3}-[0-9]{4}"), "QXT-0193", "QXT-193"),
        (Regex(r"\d+"), "123", "١٢٣"),  # \d is ASCII, as in the masker
        (Regex(r"a.c"), "abc", "a\nc"),
        (Score, '{"score": 0.5}', '{"score": 660}'),
        (Score, '{"score": 1}', '{"score": NaN}'),
        (JsonSchema({"type": "integer", "multipleOf": 5}), "10", "6"),
        (JsonSchema({"type": "object", "minProperties": 1}), '{"a": 1}', "{}"),
        (JsonSchema({"type": "string", "format": "date"}), '"2024-02-29"', '"2023-02-29"'),
        (
            JsonSchema({"type": "string", "format": "date-time"}),
            '"2024-12-08T14:00:00Z"',
            '"2024-12-08T14:00:00"',
        ),
        (JsonSchema({"type": "string", "format": "ipv4"}), '"10.0.0.1"', '"10.0.0.256"'),
        (JsonObject(), '{"x": [1]}', "[1]"),
        (dict, "{}", '{"a": }'),
        (ARITH, "1+22+3", "1++2"),
        (GBNF, "yes", "maybe"),
        (list[int], "[1, 2]", '[1, "2"]'),
    ],
)
def test_good_texts_pass_and_bad_ones_say_why(output_type: object, good: str, bad: str) -> None:
    term = to_term(output_type)
    assert violation(term, good) is None
    reason = violation(term, bad)
    assert isinstance(reason, str)
    assert reason


def test_free_text_always_fits() -> None:
    assert violation(None, "anything at all") is None


def test_reasons_name_the_place() -> None:
    term = JsonSchema({"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}})
    assert violation(term, '{"n": 9}') == "at /n: 9 is greater than the maximum of 3"
    assert "position" in (violation(term, '{"n": ') or "")
    assert "regex" in (violation(to_term(int), "x") or "")


def test_the_violation_error_is_a_parse_error_with_context() -> None:
    err = ConstraintViolationError(
        "answer breaks the constraint",
        text="6",
        reason="at /: 6 is not a multiple of 5",
        server="llamacpp",
        server_version="b6000",
        fields={"json_schema": {"type": "integer", "multipleOf": 5}},
    )
    assert isinstance(err, ParseError)
    assert (err.text, err.server, err.server_version) == ("6", "llamacpp", "b6000")
    assert err.fields["json_schema"]["multipleOf"] == 5
