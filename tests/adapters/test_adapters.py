"""Every output type x every server dialect -> the request fields, or an error naming the server."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import time
from typing import Any, Literal

import pydantic
import pytest
from typing_extensions import TypedDict

from outlines_like.adapters import (
    SERVER_KINDS,
    GenericAdapter,
    LlamaCppAdapter,
    OllamaAdapter,
    OpenAIAdapter,
    ServerInfo,
    SGLangAdapter,
    TGIAdapter,
    VLLMAdapter,
    get_adapter,
    get_adapter_for,
)
from outlines_like.adapters.base import Adapter
from outlines_like.adapters.vllm import parse_version
from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.types import (
    CFG,
    Choice,
    JsonObject,
    JsonSchema,
    Regex,
    Term,
    integer,
    to_regex,
    to_term,
)
from outlines_like.types import grammars as grammar_conv

# --- the output types ---------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Character(pydantic.BaseModel):
    name: str
    age: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 9},
        "ok": {"type": "boolean"},
    },
    "required": ["color", "n", "ok"],
    "additionalProperties": False,
}
OPEN_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
LARK = 'start: "answer: " ("yes" | "no") "."'
GBNF = 'root ::= "answer: " ("yes" | "no") "."'

# id -> (output type, category). The category decides the expected fields below.
OUTPUT_TYPES: dict[str, tuple[object, str]] = {
    "int": (int, "regex"),
    "float": (float, "regex"),
    "bool": (bool, "regex"),
    "date": (dt.date, "regex"),
    "Literal": (Literal["yes", "no", "maybe"], "choice"),
    "Literal-int": (Literal[1, 2], "regex"),
    "Enum": (Color, "choice"),
    "Regex": (Regex(r"[a-z]{3}-[0-9]{2}"), "regex"),
    "Choice": (Choice(["yes", "no"]), "choice"),
    "combinator": ("Answer: " + (integer | "none"), "regex"),
    "pydantic": (Character, "schema"),
    "dataclass": (Point, "schema"),
    "TypedDict": (Movie, "schema"),
    "dict-schema": (JsonSchema(SCHEMA), "schema"),
    "open-schema": (JsonSchema(OPEN_SCHEMA), "schema"),
    "JsonSchema-ws": (JsonSchema(SCHEMA, whitespace_pattern=r"[ ]?"), "schema"),
    "list[int]": (list[int], "schema"),
    "dict": (dict, "object"),
    "CFG-lark": (CFG(LARK), "lark"),
    "CFG-ebnf": (CFG(GBNF), "ebnf"),
}

DIALECTS: dict[str, Adapter] = {
    "sglang": SGLangAdapter(),
    "vllm": VLLMAdapter("0.32.0"),
    "vllm-unknown": VLLMAdapter(None),
    "vllm-old": VLLMAdapter("0.11.2"),
    "llamacpp": LlamaCppAdapter(),
    "openai": OpenAIAdapter(),
    "tgi": TGIAdapter(),
    "ollama": OllamaAdapter(),
    "generic": GenericAdapter(),
}


@dataclasses.dataclass(frozen=True)
class Raises:
    """The adapter raises UnsupportedConstraintError whose message contains ``words``."""

    words: tuple[str, ...]


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(schema))
    stack: list[Any] = [out]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend(node)
    return out


def _rf_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": schema.get("title", "output"),
                "schema": schema,
                "strict": True,
            },
        }
    }


def expected(dialect: str, category: str, endpoint: str, term: Term) -> object:
    """The fields each dialect must send (DESIGN section 4, docs/servers/*)."""
    chat = endpoint == "chat"
    if category in ("regex", "choice"):
        pattern = to_regex(term)
        items = list(term.items) if isinstance(term, Choice) else None
        table: dict[str, object] = {
            "sglang": {"extra_body": {"regex": pattern}},
            "vllm": {"extra_body": {"structured_outputs": {"choice": items}}}
            if items
            else {"extra_body": {"structured_outputs": {"regex": pattern}}},
            "vllm-old": {"extra_body": {"guided_choice": items}}
            if items
            else {"extra_body": {"guided_regex": pattern}},
            "llamacpp": {"extra_body": {"grammar": grammar_conv.regex_to_gbnf(pattern)}},
            "tgi": {"extra_body": {"response_format": {"type": "regex", "value": pattern}}}
            if chat
            else Raises(("TGI", "completions", "chat")),
            "openai": Raises(("OpenAI", "regular expression", "sglang, vllm, llamacpp")),
            "ollama": Raises(("Ollama", "regular expression", "sglang, vllm, llamacpp")),
            "generic": Raises(("unknown kind", "regular expression", "sglang, vllm")),
        }
        table["vllm-unknown"] = table["vllm"]
        return table[dialect]
    if category == "schema":
        assert isinstance(term, JsonSchema)
        schema = term.schema
        ws = term.whitespace_pattern
        so: dict[str, Any] = {"json": schema}
        old: dict[str, Any] = {"guided_json": schema}
        if ws is not None:
            so["whitespace_pattern"] = ws
            old["guided_whitespace_pattern"] = ws
        llama_schema = (
            schema
            if chat or ws is not None
            else {"x-guidance": {"whitespace_flexible": False}, **schema}
        )
        table = {
            "sglang": _rf_schema(_closed(schema))
            if chat
            else {"extra_body": {"json_schema": json.dumps(_closed(schema))}},
            "vllm": {"extra_body": {"structured_outputs": so}},
            "vllm-old": {"extra_body": old},
            "llamacpp": {"extra_body": {"json_schema": llama_schema}},
            "tgi": {"extra_body": {"response_format": {"type": "json", "value": schema}}}
            if chat
            else Raises(("TGI", "completions")),
            "openai": Raises(("OpenAI", "completions", "chat"))
            if not chat
            else "strict"
            if schema.get("type") == "object"
            else Raises(("OpenAI strict mode", "object at the root", "sglang, vllm")),
            "ollama": _rf_schema(schema) if chat else Raises(("Ollama", "completions")),
            "generic": _rf_schema(schema) if chat else Raises(("unknown kind", "completions")),
        }
        if ws is not None:
            # Only vLLM's field carries a whitespace pattern: the others get our compiled
            # regex in their regex field, or refuse (nothing is dropped silently).
            pattern = to_regex(term)
            table["sglang"] = {"extra_body": {"regex": pattern}}
            table["llamacpp"] = {"extra_body": {"grammar": grammar_conv.regex_to_gbnf(pattern)}}
            table["tgi"] = (
                {"extra_body": {"response_format": {"type": "regex", "value": pattern}}}
                if chat
                else Raises(("TGI", "whitespace_pattern"))
            )
            for name in ("openai", "ollama", "generic"):
                table[name] = Raises(("whitespace_pattern", "takes no regex field"))
        table["vllm-unknown"] = table["vllm"]
        return table[dialect]
    if category == "object":
        json_object = {"response_format": {"type": "json_object"}}
        table = {
            "sglang": json_object
            if chat
            else {"extra_body": {"json_schema": json.dumps({"type": "object"})}},
            "vllm": {"extra_body": {"structured_outputs": {"json_object": True}}},
            "vllm-old": json_object,
            "llamacpp": json_object
            if chat
            else {"extra_body": {"json_schema": {"type": "object"}}},
            "tgi": {
                "extra_body": {"response_format": {"type": "json", "value": {"type": "object"}}}
            }
            if chat
            else Raises(("TGI", "completions")),
            "openai": json_object if chat else Raises(("OpenAI", "completions")),
            "ollama": json_object if chat else Raises(("Ollama", "completions")),
            "generic": json_object if chat else Raises(("unknown kind", "completions")),
        }
        table["vllm-unknown"] = table["vllm"]
        return table[dialect]
    assert isinstance(term, CFG)
    text = term.definition
    vllm_text = text if category == "ebnf" else grammar_conv.lark_to_ebnf(text)
    table = {
        "sglang": {
            "extra_body": {
                "ebnf": grammar_conv.gbnf_to_ebnf(text)
                if category == "ebnf"
                else grammar_conv.lark_to_ebnf(text)
            }
        },
        "vllm": {"extra_body": {"structured_outputs": {"grammar": vllm_text}}},
        "vllm-old": {"extra_body": {"guided_grammar": vllm_text}},
        "llamacpp": {
            "extra_body": {
                "grammar": grammar_conv.ebnf_to_gbnf(text)
                if category == "ebnf"
                else grammar_conv.lark_to_gbnf(text)
            }
        },
        "tgi": Raises(("TGI", "context-free grammar", "sglang, vllm, llamacpp")),
        "openai": Raises(("OpenAI", "context-free grammar", "sglang, vllm, llamacpp")),
        "ollama": Raises(("Ollama", "context-free grammar")),
        "generic": Raises(("unknown kind", "context-free grammar")),
    }
    table["vllm-unknown"] = table["vllm"]
    return table[dialect]


CASES = [
    pytest.param(type_id, dialect, endpoint, id=f"{type_id}-{dialect}-{endpoint}")
    for type_id in OUTPUT_TYPES
    for dialect in DIALECTS
    for endpoint in ("chat", "completions")
]


@pytest.mark.parametrize(("type_id", "dialect", "endpoint"), CASES)
def test_fields_for_every_type_and_dialect(type_id: str, dialect: str, endpoint: str) -> None:
    output_type, category = OUTPUT_TYPES[type_id]
    term = to_term(output_type)
    assert term is not None
    adapter = DIALECTS[dialect]
    want = expected(dialect, category, endpoint, term)
    if isinstance(want, Raises):
        with pytest.raises(UnsupportedConstraintError) as info:
            adapter.constraint_fields(term, endpoint=endpoint)  # type: ignore[arg-type]
        for word in want.words:
            assert word in str(info.value), (word, str(info.value))
        return
    got = adapter.constraint_fields(term, endpoint=endpoint)  # type: ignore[arg-type]
    if want == "strict":  # OpenAI: checked in detail in test_schema.py
        fmt: Any = got["response_format"]
        assert fmt["type"] == "json_schema"
        assert fmt["json_schema"]["strict"] is True
        schema = fmt["json_schema"]["schema"]
        assert schema["additionalProperties"] is False
        assert schema["required"] == list(schema["properties"])
        return
    assert got == want


# --- the shapes the real servers were seen to enforce (../shared/servers/recordings) -------

RECORDED_REGEX = "[a-z]{3}-[0-9]{2}"


@pytest.mark.parametrize(
    ("adapter", "term", "endpoint", "body"),
    [
        # vLLM 0.32.0, every one PASS in vllm-0.32-cpu.jsonl
        (
            VLLMAdapter("0.32.0"),
            JsonSchema(SCHEMA),
            "chat",
            {"structured_outputs": {"json": SCHEMA}},
        ),
        (
            VLLMAdapter("0.32.0"),
            JsonSchema(SCHEMA),
            "completions",
            {"structured_outputs": {"json": SCHEMA}},
        ),
        (
            VLLMAdapter("0.32.0"),
            Regex(RECORDED_REGEX),
            "chat",
            {"structured_outputs": {"regex": RECORDED_REGEX}},
        ),
        (
            VLLMAdapter("0.32.0"),
            Choice(["yes", "no", "maybe"]),
            "completions",
            {"structured_outputs": {"choice": ["yes", "no", "maybe"]}},
        ),
        (VLLMAdapter("0.32.0"), CFG(GBNF), "chat", {"structured_outputs": {"grammar": GBNF}}),
        # Lark is sent as EBNF: the recorded request sent the Lark text (also a PASS), the
        # converted one passes against the same server in tests/integration/test_servers.py.
        (
            VLLMAdapter("0.32.0"),
            CFG(LARK),
            "chat",
            {"structured_outputs": {"grammar": 'root ::= "answer: yes." | "answer: no."\n'}},
        ),
        # llama.cpp (xllamacpp), PASS in llamacpp-xllamacpp.jsonl (GBNF normalised: a newline)
        (LlamaCppAdapter(), JsonSchema(SCHEMA), "chat", {"json_schema": SCHEMA}),
        (LlamaCppAdapter(), CFG(GBNF), "chat", {"grammar": GBNF + "\n"}),
        (LlamaCppAdapter(), CFG(GBNF), "completions", {"grammar": GBNF + "\n"}),
        (
            LlamaCppAdapter(),
            JsonSchema(SCHEMA),
            "completions",
            {"json_schema": {"x-guidance": {"whitespace_flexible": False}, **SCHEMA}},
        ),
    ],
)
def test_recorded_request_bodies(
    adapter: Adapter, term: Term, endpoint: Literal["chat", "completions"], body: object
) -> None:
    assert adapter.constraint_fields(term, endpoint=endpoint) == {"extra_body": body}


def test_vllm_old_never_gets_fields_it_ignores() -> None:
    """vLLM >= 0.12 ignores guided_*; older vLLM ignores structured_outputs (HTTP 200 both)."""
    for version, forbidden in (("0.32.0", "guided_"), ("0.11.2", "structured_outputs")):
        adapter = VLLMAdapter(version)
        for output_type, _ in OUTPUT_TYPES.values():
            term = to_term(output_type)
            for endpoint in ("chat", "completions"):
                fields = adapter.constraint_fields(term, endpoint=endpoint)
                assert not any(k.startswith(forbidden) for k in fields.get("extra_body", {}))


def test_llamacpp_never_sends_response_format_on_completions() -> None:
    for output_type, _ in OUTPUT_TYPES.values():
        fields = LlamaCppAdapter().constraint_fields(to_term(output_type), endpoint="completions")
        assert "response_format" not in fields


@pytest.mark.parametrize(
    ("version", "legacy"),
    [
        ("0.32.0", False),
        ("0.12.0", False),
        ("0.12.0rc1", False),
        ("v0.13.1+cpu", False),
        ("1.0.0", False),
        ("0.11.2", True),
        ("0.6.3.post1", True),
        ("0.4", True),
        (None, False),
        ("", False),
        ("dev", False),
    ],
)
def test_vllm_version_decides_the_dialect(version: str | None, legacy: bool) -> None:
    assert VLLMAdapter(version).legacy is legacy


def test_parse_version() -> None:
    assert parse_version("0.12.0rc1") == (0, 12, 0)
    assert parse_version("0.6.3.post1") == (0, 6, 3)
    assert parse_version("7") == (7, 0, 0)
    assert parse_version("nightly") is None


# --- general behaviour ----------------------------------------------------------------------


@pytest.mark.parametrize("adapter", list(DIALECTS.values()), ids=list(DIALECTS))
def test_free_text_has_no_fields(adapter: Adapter) -> None:
    assert adapter.constraint_fields(None, endpoint="chat") == {}
    assert adapter.constraint_fields(None, endpoint="completions") == {}


def test_bad_endpoint_is_rejected() -> None:
    with pytest.raises(ValueError, match="endpoint"):
        SGLangAdapter().constraint_fields(integer, endpoint="embeddings")  # type: ignore[arg-type]


def test_unknown_term_is_rejected() -> None:
    class Odd(Term):
        __slots__ = ()

    with pytest.raises(UnsupportedConstraintError, match="sglang"):
        SGLangAdapter().constraint_fields(Odd(), endpoint="chat")


@pytest.mark.parametrize("dialect", ["sglang", "openai", "vllm", "llamacpp", "tgi"])
def test_term_schema_is_never_mutated(dialect: str) -> None:
    term = JsonSchema(OPEN_SCHEMA)
    before = term.schema_json
    fields = DIALECTS[dialect].constraint_fields(term, endpoint="chat")
    # callers may scribble on what they get: neither the term nor the cache may change
    fields.setdefault("extra_body", {})["x"] = 1
    if "response_format" in fields:
        fields["response_format"]["json_schema"]["name"] = "changed"  # type: ignore[typeddict-item]
    assert term.schema_json == before
    again = DIALECTS[dialect].constraint_fields(term, endpoint="chat")
    assert "x" not in again.get("extra_body", {})
    if "response_format" in again:
        assert again["response_format"]["json_schema"]["name"] != "changed"  # type: ignore[typeddict-item]


@pytest.mark.parametrize(
    ("title", "name"),
    [
        ("Character", "Character"),
        ("My Model (v2)", "My_Model_v2"),
        ("é" * 3, "output"),
        ("x" * 80, "x" * 64),
        (None, "output"),
    ],
)
def test_schema_name_fits_openai_rules(title: str | None, name: str) -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "integer"}}}
    if title is not None:
        schema["title"] = title
    fields = SGLangAdapter().constraint_fields(JsonSchema(schema), endpoint="chat")
    assert fields["response_format"]["json_schema"]["name"] == name  # type: ignore[typeddict-item]


def test_sglang_closes_only_objects_with_properties() -> None:
    schema = {
        "type": "object",
        "properties": {
            "inner": {"type": "object", "properties": {"a": {"type": "integer"}}},
            "free": {"type": "object", "additionalProperties": {"type": "integer"}},
            "any": {"type": "object"},
        },
    }
    fields = SGLangAdapter().constraint_fields(JsonSchema(schema), endpoint="chat")
    sent = fields["response_format"]["json_schema"]["schema"]  # type: ignore[typeddict-item]
    assert sent["additionalProperties"] is False
    assert sent["properties"]["inner"]["additionalProperties"] is False
    assert sent["properties"]["free"]["additionalProperties"] == {"type": "integer"}
    assert "additionalProperties" not in sent["properties"]["any"]


# --- get_adapter -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("info", "cls"),
    [
        (ServerInfo("sglang"), SGLangAdapter),
        (ServerInfo("vllm", "0.32.0"), VLLMAdapter),
        (ServerInfo("llamacpp", "b6000"), LlamaCppAdapter),
        (ServerInfo("openai"), OpenAIAdapter),
        (ServerInfo("tgi", "3.0.1"), TGIAdapter),
        (ServerInfo("ollama", "0.5.7"), OllamaAdapter),
        (ServerInfo("generic"), GenericAdapter),
    ],
)
def test_get_adapter(info: ServerInfo, cls: type) -> None:
    adapter = get_adapter(info)
    assert isinstance(adapter, cls)
    assert adapter.kind == info.kind


def test_get_adapter_passes_the_vllm_version() -> None:
    old = get_adapter_for("vllm", "0.8.5")
    assert isinstance(old, VLLMAdapter)
    assert old.legacy
    assert get_adapter_for("vllm").constraint_fields(integer, endpoint="chat") == {
        "extra_body": {"structured_outputs": {"regex": to_regex(integer)}}
    }


def test_get_adapter_for_every_kind_and_unknown() -> None:
    assert {get_adapter_for(k).kind for k in SERVER_KINDS} == set(SERVER_KINDS)
    with pytest.raises(ValueError, match="unknown server kind 'triton'"):
        get_adapter_for("triton")


def test_cached_call_is_cheap() -> None:
    """After the first call, a call costs well under 300 us (a cached conversion + copies)."""
    adapter = OpenAIAdapter()
    term = to_term(Character)
    adapter.constraint_fields(term, endpoint="chat")
    rounds = 2000
    start = time.process_time()
    for _ in range(rounds):
        adapter.constraint_fields(term, endpoint="chat")
    per_call = (time.process_time() - start) / rounds
    assert per_call < 100e-6, per_call


@pytest.mark.parametrize(
    ("adapter", "term", "words"),
    [
        (LlamaCppAdapter(), Regex(r"a(?=b)"), ("llama.cpp", "as GBNF", "lookahead")),
        (LlamaCppAdapter(), CFG("start: start"), ("llama.cpp", "Lark grammar as GBNF")),
        (SGLangAdapter(), CFG("start: foo"), ("SGLang", "Lark grammar as EBNF", "foo")),
        (SGLangAdapter(), CFG("root ::= (", syntax="ebnf"), ("SGLang", "xgrammar's EBNF")),
    ],
)
def test_conversion_errors_name_the_server(
    adapter: Adapter, term: Term, words: tuple[str, ...]
) -> None:
    with pytest.raises((UnsupportedConstraintError, InvalidConstraintError)) as info:
        adapter.constraint_fields(term, endpoint="chat")
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_sglang_rewrites_gbnf_for_xgrammar() -> None:
    fields = SGLangAdapter().constraint_fields(CFG("root ::= [a-z] ."), endpoint="chat")
    assert "." not in fields["extra_body"]["ebnf"].split("::=")[1]


def test_json_object_term_alone() -> None:
    assert SGLangAdapter().constraint_fields(JsonObject(), endpoint="chat") == {
        "response_format": {"type": "json_object"}
    }
