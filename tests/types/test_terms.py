"""Terms: construction checks, combinators and their regex."""

from __future__ import annotations

import re

import pytest

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.types import (
    CFG,
    Alternatives,
    Choice,
    JsonSchema,
    Regex,
    Repeat,
    Sequence,
    String,
    at_least,
    at_most,
    between,
    either,
    escape_regex,
    exactly,
    integer,
    one_or_more,
    optional,
    to_regex,
    zero_or_more,
)


def test_invalid_regex_names_the_position() -> None:
    with pytest.raises(InvalidConstraintError, match="position 3"):
        Regex("abc[")
    with pytest.raises(ValueError):  # also a ValueError
        Regex("(a")


def test_regex_takes_a_str() -> None:
    with pytest.raises(TypeError, match="str pattern"):
        Regex(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("term", "good", "bad"),
    [
        ("Answer: " + integer, ["Answer: 42", "Answer: -1"], ["Answer: x", "42"]),
        (integer + "!", ["1!"], ["1"]),
        (integer | "none", ["7", "none"], ["None", ""]),
        ("a" | Regex("[0-9]"), ["a", "5"], ["b"]),
        (optional("-") + Regex("[0-9]+"), ["-1", "12"], ["--1"]),
        (either("x", "y", Regex("z+")), ["x", "y", "zzz"], ["xy"]),
        (zero_or_more("ab"), ["", "ab", "abab"], ["a", "aba"]),
        (one_or_more("ab"), ["ab", "abab"], ["", "a"]),
        (exactly(3, Regex("[a-c]")), ["abc"], ["ab", "abca"]),
        (at_least(2, "x"), ["xx", "xxxx"], ["x"]),
        (at_most(2, "x"), ["", "x", "xx"], ["xxx"]),
        (between(1, 2, String("a.b")), ["a.b", "a.ba.b"], ["axb", ""]),
        (Choice(["a+b", "(c)", "d|e"]), ["a+b", "(c)", "d|e"], ["ab", "d", "c"]),
        (Sequence(["[", integer, "]"]), ["[3]"], ["3"]),
    ],
)
def test_combinators(term: object, good: list[str], bad: list[str]) -> None:
    pattern = to_regex(term)
    for text in good:
        assert re.fullmatch(pattern, text), (pattern, text)
    for text in bad:
        assert not re.fullmatch(pattern, text), (pattern, text)


def test_sequences_and_alternatives_flatten() -> None:
    s = String("a") + "b" + "c"
    assert isinstance(s, Sequence)
    assert len(s.terms) == 3
    alt = String("a") | "b" | "c"
    assert isinstance(alt, Alternatives)
    assert len(alt.terms) == 3


@pytest.mark.parametrize(
    "make",
    [lambda: Repeat(String("a"), 3, 2), lambda: Repeat(String("a"), -1, None), lambda: Choice([])],
)
def test_bad_bounds_and_empty_choices_raise(make: object) -> None:
    with pytest.raises(InvalidConstraintError):
        make()  # type: ignore[operator]


def test_combining_with_a_non_term_raises() -> None:
    with pytest.raises(UnsupportedConstraintError, match="Term or a str"):
        integer + 3  # type: ignore[operator]


def test_choice_items_must_be_str() -> None:
    with pytest.raises(TypeError):
        Choice(["a", 1])  # type: ignore[list-item]


@pytest.mark.parametrize(
    "text", ["a.b", "x*y+z?", "(1|2)", "[a]{2}", "tab\tnl\n", "back\\slash", "^$"]
)
def test_escape_regex_matches_itself_only(text: str) -> None:
    pattern = escape_regex(text)
    assert re.fullmatch(pattern, text)
    assert not re.fullmatch(pattern, text + "x")


def test_terms_are_hashable_and_equal_by_value() -> None:
    assert Regex("a") == Regex("a")
    assert hash(Regex("a")) == hash(Regex("a"))
    assert JsonSchema({"type": "integer"}) == JsonSchema('{"type": "integer"}')
    assert hash(JsonSchema({"type": "integer"})) == hash(JsonSchema('{"type":"integer"}'))
    assert JsonSchema({"type": "integer"}) != JsonSchema({"type": "integer"}, "[ ]?")


def test_json_schema_sources() -> None:
    import dataclasses

    import pydantic
    from typing_extensions import TypedDict

    class M(pydantic.BaseModel):
        a: int

    @dataclasses.dataclass
    class D:
        a: int

    class T(TypedDict):
        a: int

    def f(a: int, b: str = "x") -> None:
        """Do f."""

    for source in (M, D, T):
        schema = JsonSchema(source).schema
        assert schema["properties"]["a"]["type"] == "integer"
        assert schema["required"] == ["a"]
    fn = JsonSchema(f).schema
    assert fn["required"] == ["a"]
    assert set(fn["properties"]) == {"a", "b"}


def test_json_schema_schema_is_a_fresh_copy() -> None:
    term = JsonSchema({"type": "object"})
    term.schema["type"] = "string"
    assert term.schema["type"] == "object"


@pytest.mark.parametrize("source", ['{"type": "object", "x": [1]}', {"type": "object", "x": [1]}])
def test_json_schema_first_schema_is_the_dict_read_at_construction(
    source: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text is not read again for the first ``schema`` (a compile's one read); later
    reads are fresh copies, untouched by changes to the first."""
    import json

    from outlines_like.types import _terms

    term = JsonSchema(source)
    reads: list[str] = []
    loads = json.loads

    def counted(text: str) -> object:
        reads.append(text)
        return loads(text)

    monkeypatch.setattr(_terms.json, "loads", counted)
    first = term.schema
    assert reads == []
    assert first == {"type": "object", "x": [1]}
    first["x"].append(2)
    assert term.schema == {"type": "object", "x": [1]}
    assert term.schema is not term.schema
    assert len(reads) == 3
    assert term == JsonSchema(source)  # equality and hash read the text only
    assert hash(term) == hash(JsonSchema(source))


@pytest.mark.parametrize(
    "source",
    [
        {"type": "object", "properties": {"a": {"const": 1.0}, "é": {"enum": [None, True]}}},
        {"x": (1, 2.5, float("nan")), 3: "three", True: {"y": float("inf")}},
        {1: "a", "1": {"b": []}},  # one key written twice: the last one, both ways
    ],
)
def test_json_schema_text_of_a_dict_reads_back_as_its_schema(source: dict[object, object]) -> None:
    import json

    term = JsonSchema(source)
    assert json.loads(term.schema_json) == term.schema  # (nan compares as itself here)
    again = JsonSchema(term.schema)
    assert again.schema_json == json.dumps(term.schema)
    assert (again == term) is (len(source) == len(term.schema))


def test_json_schema_pickles_and_copies_without_its_unread_dict() -> None:
    """A pickle (a term sent to a compile worker) or a copy carries the text, not the text and
    the dict kept for the first ``schema``; both read it back equal."""
    import copy
    import pickle

    source = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(50)}}
    unread, read = JsonSchema(source), JsonSchema(source)
    read.schema  # noqa: B018 (hands out its dict)
    assert len(pickle.dumps(unread)) == len(pickle.dumps(read))
    for other in (pickle.loads(pickle.dumps(unread)), copy.copy(unread), copy.deepcopy(unread)):
        assert other == unread
        assert hash(other) == hash(unread)
        assert other.schema == source
    assert unread.schema == source  # (its own dict still there for it)


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("{not json", InvalidConstraintError),
        ("[1, 2]", InvalidConstraintError),
        (3, UnsupportedConstraintError),
    ],
)
def test_json_schema_bad_sources(source: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        JsonSchema(source)


def test_json_schema_bad_whitespace_pattern() -> None:
    with pytest.raises(InvalidConstraintError):
        JsonSchema({"type": "integer"}, whitespace_pattern="[")


def test_cfg_detects_its_syntax(tmp_path: object) -> None:
    import pathlib

    assert CFG("start: 'a'").syntax == "lark"
    assert CFG('root ::= "a" | "b"').syntax == "ebnf"
    assert CFG("start: 'a'").lark == "start: 'a'"
    path = pathlib.Path(str(tmp_path)) / "g.gbnf"
    path.write_text('root ::= "x"\n')
    assert CFG.from_file(path).syntax == "ebnf"
    with pytest.raises(TypeError):
        CFG(3)  # type: ignore[arg-type]


def test_grammars_and_dicts_have_no_regex() -> None:
    with pytest.raises(UnsupportedConstraintError, match="grammar"):
        to_regex(CFG("start: 'a'"))
    with pytest.raises(UnsupportedConstraintError):
        to_regex(dict)
    with pytest.raises(UnsupportedConstraintError, match="free text"):
        to_regex(str)
