"""Tests for types.json_schema_grammar (JSON Schema -> a grammar linear in the schema) and _budget.

The grammar is checked byte by byte (``CompiledGrammar.accepts_text``) against the regex path
(same documents, same errors) and against ``jsonschema`` (what it accepts is valid).
"""

from __future__ import annotations

import copy
import functools
import json
import re
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from outlines_like.errors import InvalidConstraintError, UnenforcedKeywordWarning
from outlines_like.fsm.grammar import CompiledGrammar, compile_grammar
from outlines_like.fsm.vocabulary import Vocabulary
from outlines_like.types import CFG
from outlines_like.types.json_schema import json_schema_to_regex
from outlines_like.types.json_schema._quick import listed_values
from outlines_like.types.json_schema_budget import (
    RegexBudgetExceeded,
    bounded_json_schema_regex,
    schema_is_recursive,
)
from outlines_like.types.json_schema_grammar import json_schema_path, json_schema_to_grammar
from tests.types.test_json_schema import (
    ANY_DEPTH,
    CORPUS,
    KEYWORD_CASES,
    SCHEMAS_DIR,
    _depth,
    _dump,
    _for_generation,
    _hypothesis_jsonschema,
    _OutOfPolicy,
    _reorder,
    _scrub,
    load,
)

BYTES = Vocabulary([bytes([i]) for i in range(256)] + [b"<eos>"], [256])
SETTINGS = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@functools.lru_cache(maxsize=64)
def _compiled(schema_json: str, whitespace: str | None = None) -> CompiledGrammar:
    grammar = json_schema_to_grammar(json.loads(schema_json), whitespace_pattern=whitespace)
    return compile_grammar(CFG(grammar, "lark"), BYTES)


def accepts(schema: Any, text: str, whitespace: str | None = None) -> bool:
    return _compiled(json.dumps(schema), whitespace).accepts_text(text.encode())


def chain(depth: int) -> dict[str, Any]:
    """The issue's chain: each ``d_i`` has two optional members that are ``d_{i-1}``.

    Objects are closed (``additionalProperties: false``), as in the issue's measurement.
    """
    closed = {"type": "object", "additionalProperties": False}
    defs: dict[str, Any] = {"d0": {**closed, "properties": {"v": {"type": "integer"}}}}
    for i in range(1, depth + 1):
        ref = {"$ref": f"#/$defs/d{i - 1}"}
        defs[f"d{i}"] = {**closed, "properties": {"a": ref, "b": ref}}
    return {"$defs": defs, "$ref": f"#/$defs/d{depth}"}


def wide(properties: int = 200, definitions: int = 30) -> dict[str, Any]:
    """A synthetic large schema: many optional members, definitions that refer to each other."""
    defs: dict[str, Any] = {}
    kinds: list[dict[str, Any]] = [
        {"type": "string", "maxLength": 12},
        {"type": "integer", "minimum": 0, "maximum": 999},
        {"enum": ["red", "green", "blue"]},
        {"type": "boolean"},
        {"type": "array", "items": {"type": "string", "format": "date"}, "maxItems": 3},
    ]
    for i in range(definitions):
        members: dict[str, Any] = {f"f{j}": kinds[(i + j) % len(kinds)] for j in range(6)}
        if i:
            members["prev"] = {"$ref": f"#/$defs/D{i - 1}"}
            members["list"] = {"type": "array", "items": {"$ref": f"#/$defs/D{i // 2}"}}
        defs[f"D{i}"] = {"type": "object", "properties": members, "required": ["f0"]}
    properties = {
        f"p{i}": ({"$ref": f"#/$defs/D{i % definitions}"} if i % 3 == 0 else kinds[i % 5])
        for i in range(properties)
    }
    return {"$defs": defs, "type": "object", "properties": properties, "required": ["p1"]}


# ------------------------------------------------------------- same documents as the regex


@pytest.mark.parametrize(
    ("schema", "accepted", "rejected"),
    [pytest.param(s, a, r, id=name) for name, s, a, r in KEYWORD_CASES],
)
def test_keyword_table_agrees_with_the_regex(
    schema: dict[str, Any], accepted: list[str], rejected: list[str]
) -> None:
    for text in accepted:
        assert accepts(schema, text), text
    for text in rejected:
        if accepts(schema, text):  # only free values nested deeper than the regex's limit
            doc = json.loads(text)
            jsonschema.validate(doc, schema)
            assert _depth(doc) > 2, text


@pytest.mark.parametrize(
    ("whitespace", "text", "expected"),
    [
        (None, '{"a":1,"b":[1,2]}', True),
        (None, '{"a": 1, "b": [1, 2]}', False),
        ("[ ]?", '{"a": 1, "b": [1, 2]}', True),
        ("[ ]?", '{"a":  1,"b":[1,2]}', False),
        ("[ ]?", "{ }", True),
        ("[ ]?", "{  }", True),
        ("[ ]?", " {}", False),
        ("[ \n]*", '{\n  "a": 1,\n  "b": [\n    1,\n    2\n  ]\n}', True),
        ("[ \n]*", '{ "a" : 1 , "b" : [ 1 , 2 ] }', True),
        ("[ \n]*", '{"a":1}\n', False),
    ],
)
def test_whitespace_policy(whitespace: str | None, text: str, expected: bool) -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "array", "items": {"type": "integer"}},
        },
        "additionalProperties": False,
    }
    assert accepts(schema, text, whitespace) is expected
    regex = json_schema_to_regex(schema, whitespace_pattern=whitespace)
    assert (re.fullmatch(regex, text) is not None) is expected


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_generated_valid_documents_are_accepted(path: Path) -> None:
    """hypothesis-jsonschema's valid documents, in our policy, are accepted (as by the regex)."""
    schema = load(path)
    regex = re.compile(json_schema_to_regex(schema, max_any_depth=ANY_DEPTH))
    validator = jsonschema.validators.validator_for(schema)(
        schema, format_checker=jsonschema.FormatChecker()
    )
    with _hypothesis_jsonschema() as hj:
        try:
            strategy = hj.from_schema(
                _for_generation(copy.deepcopy(schema)),
                custom_formats={"uuid": st.uuids().map(str)},
            )
        except Exception as exc:  # recursive references: hypothesis-jsonschema cannot
            pytest.skip(f"hypothesis-jsonschema cannot generate for it: {exc}")

        @SETTINGS
        @given(doc=strategy)
        def check(doc: Any) -> None:
            doc = _scrub(doc)
            assume(validator.is_valid(doc))
            assume(_depth(doc) <= ANY_DEPTH + 1)
            try:
                text = _dump(_reorder(doc, schema, schema))
            except _OutOfPolicy:
                assume(False)
            assert regex.fullmatch(text), text
            assert accepts(schema, text), text

        try:
            check()
        except Exception as exc:
            if type(exc).__module__.startswith("hypothesis_jsonschema"):
                pytest.skip(f"hypothesis-jsonschema cannot generate for it: {exc}")
            raise


def _mutations(text: str) -> st.SearchStrategy[str]:
    """``text`` with one byte-level edit: a deletion, an insertion or a replacement."""
    pieces = '{}[],:"0123456789-.eE truefalsnl\\'
    return st.tuples(
        st.integers(0, max(len(text) - 1, 0)),
        st.sampled_from(["delete", "insert", "replace"]),
        st.sampled_from(list(pieces)),
    ).map(
        lambda edit: (
            text[: edit[0]] + text[edit[0] + 1 :]
            if edit[1] == "delete"
            else text[: edit[0]] + edit[2] + text[edit[0] + (edit[1] == "replace") :]
        )
    )


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_same_decision_as_the_regex_and_only_valid_documents(path: Path) -> None:
    """Texts of the regex, and one-byte edits of them: the grammar decides as the regex does
    (up to nesting the regex cuts off), and every text it accepts is a valid document."""
    schema = load(path)
    regex = json_schema_to_regex(schema, max_any_depth=1)
    deep = re.compile(json_schema_to_regex(schema, max_any_depth=ANY_DEPTH))
    validator = jsonschema.validators.validator_for(schema)(schema)

    @SETTINGS
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        text = data.draw(st.from_regex(regex, fullmatch=True))
        assert accepts(schema, text), text
        edited = data.draw(_mutations(text))
        if accepts(schema, edited):
            doc = json.loads(edited)
            assert validator.is_valid(doc), edited
            if not deep.fullmatch(edited):  # the regex's bounds: recursion and free values
                assert schema_is_recursive(schema) or _depth(doc) > ANY_DEPTH, edited
        else:
            assert not deep.fullmatch(edited), edited

    check()


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_grammars_are_lalr(path: Path) -> None:
    """Object members, arrays and unions as rules: no conflict, so no GLR on the corpus."""
    assert _compiled(json.dumps(load(path))).is_lalr


# ------------------------------------------------------------------- recursion, no depth cap


def _trees(depth: int) -> st.SearchStrategy[Any]:
    leaf = st.builds(lambda v: {"value": v, "children": []}, st.integers(-99, 99))
    if depth == 0:
        return leaf
    return st.builds(
        lambda v, kids: {"value": v, "children": kids},
        st.integers(-99, 99),
        st.lists(_trees(depth - 1), max_size=2),
    )


@SETTINGS
@given(tree=_trees(7))
def test_recursive_documents_any_depth(tree: dict[str, Any]) -> None:
    schema = load(SCHEMAS_DIR / "recursive_tree.json")
    jsonschema.validate(tree, schema)
    text = json.dumps(tree, separators=(",", ":"))
    assert accepts(schema, text)
    assert not accepts(schema, text.replace('"value"', '"valeu"', 1))


def _chain_docs(depth: int) -> st.SearchStrategy[Any]:
    if depth == 0:
        return st.fixed_dictionaries({}, optional={"v": st.integers(-5, 5)})
    inner = _chain_docs(depth - 1)
    members = st.fixed_dictionaries({}, optional={"a": inner, "b": inner})
    return members.map(lambda d: {k: d[k] for k in ("a", "b") if k in d})  # schema order


@pytest.mark.parametrize("depth", [8, 9, 20])
def test_chain_of_definitions_compiles_linearly_and_accepts_its_documents(depth: int) -> None:
    schema = chain(depth)
    start = time.perf_counter()
    grammar = json_schema_to_grammar(schema)
    assert time.perf_counter() - start < 2.0
    # one rule chain per definition: the grammar grows by a constant per level
    step = len(json_schema_to_grammar(chain(depth + 1))) - len(grammar)
    assert step < 200
    assert len(json_schema_to_grammar(chain(depth + 5))) - len(grammar) <= 5 * step + 50
    assert schema_is_recursive(schema) is False

    @SETTINGS
    @given(doc=_chain_docs(depth))
    def check(doc: Any) -> None:
        text = json.dumps(doc, separators=(",", ":"))
        assert accepts(schema, text), text
        assert not accepts(schema, text.replace("{", '{"x":1,', 1))

    check()


def test_the_regex_budget_stops_early_and_names_where() -> None:
    start = time.perf_counter()
    with pytest.raises(RegexBudgetExceeded, match=r"#/\$defs/d\d") as info:
        bounded_json_schema_regex(chain(9), budget=16_000)  # 5 MB of regex unbounded
    assert time.perf_counter() - start < 2.0
    assert isinstance(info.value, InvalidConstraintError)
    assert bounded_json_schema_regex(chain(3), budget=16_000) == json_schema_to_regex(chain(3))


def _union_of(count: int) -> dict[str, Any]:
    """An anyOf of ``count`` objects, each with an enum member (~60 characters of regex)."""
    return {
        "anyOf": [
            {
                "type": "object",
                "properties": {"task": {"enum": [f"task{i}@1", f"task{i}@2"]}},
                "required": ["task"],
            }
            for i in range(count)
        ]
    }


def test_a_union_stops_at_the_budget_as_it_grows() -> None:
    from outlines_like.types.json_schema_budget import _bounded_regex

    # the branches' alternation passes the budget about a tenth of the way through: the
    # branches after that are never converted (each sub-schema converted is checked once)
    seen: list[str] = []
    with pytest.raises(RegexBudgetExceeded, match="#"):
        _bounded_regex(_union_of(2_000), 12_000, None, False, False, check=seen.append)
    last = max(int(m.group(1)) for p in seen if (m := re.match(r"#/anyOf/(\d+)", p)))
    assert 150 < last < 400
    # an enum of many values too
    values = [f"value-{i:05d}" for i in range(20_000)]
    with pytest.raises(RegexBudgetExceeded):
        bounded_json_schema_regex({"enum": values}, budget=12_000)


def _bounded_or_none(schema: Any, budget: int) -> str | None:
    try:
        return bounded_json_schema_regex(schema, budget=budget, lenient=True)
    except RegexBudgetExceeded:
        return None


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_the_running_union_floor_changes_no_verdict(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # at the budgets where the alternations' running floors cross it (and one under), the
    # bounded regex is what it was when only finished sub-schemas were measured: the floor
    # never passes a budget the finished alternation fits
    from outlines_like.types.json_schema import _driver
    from outlines_like.types.json_schema_budget import _BudgetedConverter

    schema = json.loads(path.read_text())
    floors: list[int] = []
    with monkeypatch.context() as m:
        m.setattr(_BudgetedConverter, "grown", lambda self, size, path: floors.append(size))
        if _bounded_or_none(schema, 10**9) is None:
            return
    budgets = sorted({b for f in sorted(set(floors))[-12:] for b in (f, f - 1)} | {50, 500})
    running = [_bounded_or_none(schema, b) for b in budgets]
    for small in (_union_of(3), {"enum": ["a", "b", "a", 1, 1.0]}, {"anyOf": [{}, {}]}):
        regex = json_schema_to_regex(small)
        assert bounded_json_schema_regex(small, budget=len(regex)) == regex
    monkeypatch.setattr(_driver._Written, "add", lambda self, part: None)
    assert running == [_bounded_or_none(schema, b) for b in budgets]


def test_required_recursion_without_exit_accepts_nothing() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}
    with pytest.raises(InvalidConstraintError, match="accepts no document"):
        json_schema_to_grammar(schema)
    # optional recursion: the member that cannot end is pruned, the rest stays
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/loop"}, "b": {"type": "null"}},
        "$defs": {
            "loop": {
                "type": "object",
                "properties": {"x": {"$ref": "#/$defs/loop"}},
                "required": ["x"],
            }
        },
    }
    assert accepts(schema, '{"b":null}')
    assert not accepts(schema, '{"a":{"x":{}}}')


def _grammar_both_prunes(schema: dict[str, Any]) -> tuple[str, str, bool]:
    """The grammar with prune's shortcut as taken, the grammar with the full productivity
    check forced, and whether the shortcut was taken."""
    from outlines_like.types.json_schema_grammar import _GrammarConverter

    out: list[str] = []
    shortcut = False
    for force_full in (False, True):
        converter = _GrammarConverter(
            dict(schema), whitespace_pattern=None, lenient=True, max_size=200_000
        )
        start = converter.symbol({"$ref": "#"}, "#")
        assert start is not None
        if force_full:
            converter.all_productive = False
        else:
            shortcut = converter.all_productive
        out.append(converter.lark(start))
    return out[0], out[1], shortcut


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_prune_shortcut_is_the_full_check(path: Path) -> None:
    # without a shared rule used inside its own body or without a body, every rule
    # completes a document: prune skips the productivity check and must write the same
    schema = json.loads(path.read_text())
    try:
        fast, full, _ = _grammar_both_prunes(schema)
    except InvalidConstraintError:
        return
    assert fast == full


def test_prune_drops_a_reference_to_no_document() -> None:
    # not recursive, but the definition accepts nothing: the full check runs and drops it
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/none"}, "b": {"type": "null"}},
        "$defs": {"none": False},
    }
    fast, full, shortcut = _grammar_both_prunes(schema)
    assert not shortcut
    assert fast == full
    assert accepts(schema, '{"b":null}')
    assert not accepts(schema, '{"a":null}')
    fast, full, shortcut = _grammar_both_prunes({"type": "object", "properties": {"b": True}})
    assert shortcut
    assert fast == full


_FREE_OBJECT = {"type": "object"}  # ~3.9k characters of regex each (any member, any value)
_THREE_FREE = {  # the third optional member is in three alternatives: ~23k characters
    "type": "object",
    "properties": {"a": _FREE_OBJECT, "b": _FREE_OBJECT, "c": _FREE_OBJECT, "d": {"type": "null"}},
}


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_the_regex_floor_is_under_the_regex(path: Path) -> None:
    from outlines_like.types.json_schema_budget import _Floor, regex_surely_past

    schema = json.loads(path.read_text())
    if schema_is_recursive(schema):
        return
    for whitespace in (None, r"[ ]?"):
        floor = _Floor(schema, whitespace, 10**9).of(schema)
        try:
            regex = json_schema_to_regex(schema, whitespace_pattern=whitespace, lenient=True)
        except InvalidConstraintError:
            continue
        assert floor <= len(regex)
        for budget in (50, 500, 5_000):
            if regex_surely_past(schema, budget, whitespace):
                with pytest.raises(RegexBudgetExceeded):
                    bounded_json_schema_regex(
                        schema, budget=budget, whitespace_pattern=whitespace, lenient=True
                    )


def test_a_regex_surely_past_the_budget_is_not_attempted() -> None:
    from outlines_like.types.json_schema_budget import regex_surely_past

    assert regex_surely_past(_THREE_FREE, 16_000, None)
    with pytest.raises(RegexBudgetExceeded):
        bounded_json_schema_regex(_THREE_FREE, budget=16_000)
    assert json_schema_path(_THREE_FREE, regex_budget=16_000) == (
        "",
        json_schema_to_grammar(_THREE_FREE),
    )
    # what may have no document counts for nothing: a required member that may have none
    # makes the object's floor unknown, an optional one is not counted
    maybe_none = {"type": "string", "minLength": 3}  # (a keyword the floor does not read)
    for required in (["a"], ["z"]):
        schema = {**_THREE_FREE, "properties": {"z": maybe_none, **_THREE_FREE["properties"]}}
        assert regex_surely_past({**schema, "required": required}, 16_000, None) == (
            required == ["a"]
        )
    assert not regex_surely_past({"type": "array", "items": _THREE_FREE, "minItems": 1}, 100, None)
    assert regex_surely_past({"type": "array", "items": _THREE_FREE}, 16_000, None)


@pytest.mark.parametrize(
    "node",
    [
        {"type": "string"},
        {"type": "integer", "description": "annotations leave it alone"},
        {"type": "number"},
        {"type": "string", "format": "date-time"},
        {"type": "string", "format": "email"},
        {"type": "integer", "format": "int32"},  # (the number converter reads no format)
        {"type": "number", "format": "double"},
    ],
)
def test_the_floor_of_a_plain_scalar_is_its_regex(node: dict[str, Any]) -> None:
    from outlines_like.types.json_schema_budget import _Floor

    assert _Floor(node, None, 10**9).of(node) == len(json_schema_to_regex(node))
    # a union: at least its longest part
    union = {**node, "type": [node["type"], "null"]}
    assert _Floor(union, None, 10**9).of(union) == len(json_schema_to_regex(node))


def test_plain_scalars_count_in_the_floor() -> None:
    # 300 members of plain strings, numbers and dates: ~32k characters of regex, whose floor
    # passes the budget (the attempt is skipped) only when the scalars count in full
    from outlines_like.types.json_schema_budget import regex_surely_past

    kinds = [{"type": "string"}, {"type": "number"}, {"type": "string", "format": "date"}]
    members = {f"m{i}": kinds[i % 3] for i in range(300)}
    schema = {"type": "object", "properties": members, "required": list(members)}
    assert regex_surely_past(schema, 16_000, None)
    with pytest.raises(RegexBudgetExceeded):
        bounded_json_schema_regex(schema, budget=16_000)
    smaller = {**schema, "properties": dict(list(members.items())[:100])}
    smaller["required"] = list(smaller["properties"])
    assert not regex_surely_past(smaller, 16_000, None)
    assert len(bounded_json_schema_regex(smaller, budget=16_000)) < 16_000


def test_a_skipped_regex_attempt_still_raises_its_own_error_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the regex attempt meets the unknown format first; were the grammar's error another
    # one, the regex attempt's is still the one raised, as when it runs first
    from outlines_like.types import json_schema_grammar

    schema = {
        "type": "object",
        "properties": {"f": {"type": "string", "format": "no-such-format"}, "x": _THREE_FREE},
    }

    def fails(*args: Any, **kwargs: Any) -> str:
        raise InvalidConstraintError("the grammar's error")

    monkeypatch.setattr(json_schema_grammar, "_grammar_of", fails)
    with pytest.raises(InvalidConstraintError, match="no-such-format"):
        json_schema_path(schema, regex_budget=16_000)
    with pytest.raises(InvalidConstraintError, match="the grammar's error"):
        json_schema_path(schema, regex_budget=16_000, lenient=True)


def test_all_of_of_two_recursive_schemas_terminates() -> None:
    node = {
        "type": "object",
        "properties": {"next": {"$ref": "#/$defs/A"}, "v": {"type": "integer"}},
    }
    schema = {
        "$defs": {
            "A": node,
            "B": {"type": "object", "properties": {"next": {"$ref": "#/$defs/B"}}},
        },
        "allOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}],
    }
    assert accepts(schema, '{"next":{"next":{"next":{"v":1}}},"v":2}')
    assert not accepts(schema, '{"v":2,"next":{}}')


@pytest.mark.parametrize(
    ("schema", "recursive"),
    [
        ({"type": "integer"}, False),
        ({"items": {"$ref": "#"}}, True),
        ({"$defs": {"A": {"items": {"$ref": "#/$defs/A"}}}, "type": "string"}, False),
        (
            {
                "$defs": {"A": {"items": {"$ref": "#/$defs/B"}}, "B": {"$ref": "#/$defs/A"}},
                "$ref": "#/$defs/A",
            },
            True,
        ),
        (chain(4), False),
    ],
)
def test_schema_is_recursive(schema: dict[str, Any], recursive: bool) -> None:
    assert schema_is_recursive(schema) is recursive


# ------------------------------------------------------------------------------ big schemas


def test_a_wide_synthetic_schema_compiles_linearly() -> None:
    schema = wide()
    start = time.perf_counter()
    grammar = json_schema_to_grammar(schema)
    assert time.perf_counter() - start < 3.0
    assert len(grammar) < 2 * len(json.dumps(schema))
    with pytest.raises(RegexBudgetExceeded):
        bounded_json_schema_regex(schema, budget=16_000)
    compiled = compile_grammar(CFG(grammar, "lark"), BYTES)
    assert compiled.is_lalr
    doc = {"p1": 7, "p3": {"f0": True, "prev": {"f0": "red"}}, "p199": ["2024-02-29"]}
    jsonschema.validate(doc, schema)
    assert compiled.accepts_text(json.dumps(doc, separators=(",", ":")).encode())
    assert not compiled.accepts_text(b'{"p3":{"f0":5}}')  # p1 is required


def kubernetes_deployment() -> dict[str, Any]:
    """Kubernetes' Deployment schema made standalone (its refs point into _definitions.json)."""
    kv = pytest.importorskip("kubernetes_validate")
    folder = Path(kv.__file__).parent / "kubernetes-json-schema" / "v1.36.0-local-strict"
    if not folder.exists():
        pytest.skip("kubernetes_validate ships no v1.36.0 schemas")
    definitions = json.loads((folder / "_definitions.json").read_text())["$defs"]
    used: dict[str, Any] = {}
    todo: list[str] = []

    def local(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: local(v) for k, v in node.items() if k != "$ref"}
            if isinstance(node.get("$ref"), str):
                name = node["$ref"].split("#/$defs/")[-1]
                todo.append(name)
                out["$ref"] = "#/$defs/" + name.replace("~", "~0").replace("/", "~1")
            return out
        if isinstance(node, list):
            return [local(v) for v in node]
        return node

    root = local(json.loads((folder / "deployment-apps-v1.json").read_text()))
    while todo:
        name = todo.pop()
        if name not in used:
            used[name] = local(definitions[name])
    root["$defs"] = used
    return root


@pytest.mark.filterwarnings("ignore::outlines_like.errors.UnenforcedKeywordWarning")
def test_kubernetes_deployment_converts_in_linear_size() -> None:
    schema = kubernetes_deployment()
    start = time.perf_counter()
    pattern, grammar = json_schema_path(schema, lenient=True, regex_budget=16_000)
    assert time.perf_counter() - start < 10.0
    assert pattern == ""
    assert grammar is not None
    assert len(grammar) < len(json.dumps(schema)) / 2
    compiled = compile_grammar(CFG(grammar, "lark"), BYTES)
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"image": "nginx:1.27", "name": "web"}]},
            },
        },
    }
    jsonschema.validate(doc, schema)
    text = _dump(_reorder(doc, schema, schema))
    assert compiled.accepts_text(text.encode()), text
    assert not compiled.accepts_text(text.replace('"replicas":3', '"replicas":"3"').encode())


# ----------------------------------------------------------------------- errors, budgets


@pytest.mark.parametrize(
    ("schema", "keyword", "path"),
    [
        ({"type": "integer", "multipleOf": 3}, "multipleOf", "#/multipleOf"),
        (
            {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
            "uniqueItems",
            "#/properties/a/uniqueItems",
        ),
        ({"not": {"pattern": "^a"}}, "not", "#/not"),
        ({"type": "string", "format": "idn-hostname"}, "format", "#/format"),
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "oneOf", "#/oneOf"),
        (
            {"$defs": {"X": {"type": "integer", "multipleOf": 3}}, "items": {"$ref": "#/$defs/X"}},
            "multipleOf",
            "#/$defs/X/multipleOf",
        ),
        (
            {
                "$defs": {
                    "T": {"oneOf": [{"$ref": "#/$defs/T"}, {"items": {"$ref": "#/$defs/T"}}]}
                },
                "$ref": "#/$defs/T",
            },
            "oneOf",
            "#/$defs/T/oneOf",
        ),
    ],
)
def test_unenforced_keywords_raise_or_warn(schema: dict[str, Any], keyword: str, path: str) -> None:
    with pytest.raises(InvalidConstraintError, match=re.escape(repr(keyword))) as info:
        json_schema_to_grammar(schema)
    assert path in str(info.value)
    with pytest.warns(UnenforcedKeywordWarning, match=re.escape(repr(keyword))):
        json_schema_to_grammar(schema, lenient=True)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "strnig"}, r"#/type.*'strnig'"),
        ({"$ref": "#/$defs/Missing"}, r"points to nothing"),
        ({"type": "integer", "minimum": 5, "maximum": 1}, r"lower bound 5 is greater"),
        ({"type": "array", "minItems": 3, "maxItems": 2}, r"minItems 3 is greater"),
        ({"enum": []}, r"accepts no document"),
        ({"type": "integer", "enum": ["a"]}, r"accepts no document"),
        ({"not": {}}, r"accepts no document"),
        ({"$defs": {"A": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"}, r"accepts no document"),
    ],
)
def test_invalid_schemas_say_where(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidConstraintError, match=message):
        json_schema_to_grammar(schema)


def test_the_grammar_budget_names_the_construct() -> None:
    schema = {
        "type": "object",
        "properties": {"rows": {"type": "array", "items": {"type": "integer"}, "minItems": 10**6}},
    }
    start = time.perf_counter()
    with pytest.raises(InvalidConstraintError, match="#/properties/rows"):
        json_schema_to_grammar(schema)
    assert time.perf_counter() - start < 2.0
    with pytest.raises(InvalidConstraintError, match="grows past 50 symbols at #"):
        json_schema_to_grammar(wide(20, 5), max_size=50)


def test_an_overlapping_one_of_is_refused_before_its_branches_are_built() -> None:
    # (the branches' rules would pass the 50-symbol budget first: GitLab CI's 64 if/then
    # combinations took 0.9 s before the oneOf they sit in was refused)
    branch = wide(20, 5)
    schema = {"$defs": branch.pop("$defs"), "oneOf": [branch, {"type": "object"}]}
    with pytest.raises(InvalidConstraintError, match="'oneOf' at #/oneOf is not enforced"):
        json_schema_to_grammar(schema, max_size=50)


def catalogue(tools: int) -> dict[str, Any]:
    """Azure Pipelines' shape: a member that is a union of one-name branches, beside a union
    of one branch per tool whose ``pattern`` keeps its own name (and its own inputs)."""
    names = [f"Tool{i}@{i % 3 + 1}" for i in range(tools)]
    per_tool = [
        {
            "properties": {
                "task": {"pattern": f"^{name}$", "description": f"tool {i}"},
                "inputs": {
                    "type": "object",
                    "properties": {f"in{i}": {"type": "string"}, "flag": {"type": "boolean"}},
                    "additionalProperties": False,
                },
            },
            "required": ["task"],
        }
        for i, name in enumerate(names)
    ]
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "task": {"anyOf": [{"enum": [name], "description": name} for name in names]},
            "inputs": {"type": "object"},
            "name": {"type": "string"},
        },
        "anyOf": per_tool,
    }


def test_branches_that_only_list_refused_values_are_not_converted() -> None:
    # each tool's task merges with the 200 one-name branches: 40,000 merges, 200 of them
    # not empty; refuted by their values, they cost the grammar nothing (past 100,000
    # symbols before, at tool 116)
    schema = catalogue(200)
    grammar = json_schema_to_grammar(schema, max_size=60_000)
    assert len(grammar) < len(json.dumps(schema))
    compiled = compile_grammar(CFG(grammar, "lark"), BYTES)
    good = {"task": "Tool7@2", "inputs": {"in7": "x", "flag": True}, "name": "n"}
    for doc, valid in [
        (good, True),
        ({"task": "Tool7@2"}, True),
        ({**good, "task": "Tool8@3"}, False),  # another tool's name with tool 7's inputs
        ({**good, "task": "Tool7@1"}, False),  # no tool has that name
        ({**good, "task": "Tool7@2x"}, False),
    ]:
        assert jsonschema.Draft202012Validator(schema).is_valid(doc) is valid
        assert compiled.accepts_text(_dump(_reorder(doc, schema, schema)).encode()) is valid


@pytest.mark.parametrize(
    ("branch", "values"),
    [
        ({"enum": ["b", 1]}, ["b", 1]),
        ({"const": "b", "title": "t", "x-vendor": 1}, ["b"]),
        ({"enum": ["b"], "const": "b"}, ["b"]),
        ({"enum": ["b"], "minLength": 0}, None),  # says more than its values
        ({"enum": ["b"], "$ref": "#/$defs/A"}, None),
        ({"enum": ["b"], "not": {"pattern": "^a"}}, None),
        ({"enum": ["b"], "x-outlines-like-never": True}, None),  # a converter's marker
        ({"enum": "b"}, None),  # invalid: the conversion says so
        ({"type": "string"}, None),
        (True, None),
    ],
)
def test_the_branches_that_only_list_values(branch: Any, values: list[Any] | None) -> None:
    assert listed_values(branch) == values


def test_a_branch_that_says_more_than_its_values_is_converted() -> None:
    # its value fits none of the keywords beside, but its `not` is still refused by name
    schema = {
        "pattern": "^a$",
        "anyOf": [{"enum": ["b"], "not": {"pattern": "^b"}}, {"const": "a"}],
    }
    for convert in (json_schema_to_grammar, json_schema_to_regex):
        with pytest.raises(InvalidConstraintError, match="#/anyOf/0/not"):
            convert(copy.deepcopy(schema))


def test_a_refuted_branch_keeps_the_other_branches_numbers() -> None:
    schema = {"type": "string", "anyOf": [{"enum": [1]}, {"pattern": "(?<=a)b"}]}
    for convert in (json_schema_to_grammar, json_schema_to_regex):
        with pytest.raises(InvalidConstraintError, match="anyOf/1"):
            convert(copy.deepcopy(schema))
    one_of = {"type": "string", "oneOf": [{"enum": [1]}, {"enum": ["a"]}, {"minLength": 2}]}
    for convert in (json_schema_to_grammar, json_schema_to_regex):
        out = convert(copy.deepcopy(one_of))  # branch 0 is empty: 1 and 2 are told apart
        assert out


@pytest.mark.parametrize(
    "name", ['a"b', "back\\slash", "sl/ash", "é東", "tab\there", "new\nline", "x'''y", "/"]
)
def test_names_and_values_that_need_escaping(name: str) -> None:
    schema = {
        "type": "object",
        "properties": {name: {"enum": [name, 1]}, "p": {"type": "string", "pattern": "^a/b$"}},
        "required": [name],
    }
    doc = {name: name, "p": "a/b"}
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    assert accepts(schema, text), text
    assert accepts(schema, json.dumps({name: 1}, separators=(",", ":"), ensure_ascii=False))
    assert not accepts(schema, text.replace("a/b", "a/c"))


def test_arrays_prefix_items_and_bounds() -> None:
    schema = {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "items": {"type": "boolean"},
        "minItems": 1,
        "maxItems": 4,
    }
    for text, ok in [
        ("[]", False),
        ("[1]", True),
        ('[1,"a"]', True),
        ('[1,"a",true,false]', True),
        ('[1,"a",true,false,true]', False),
        ('["a"]', False),
        ('[1,"a",1]', False),
    ]:
        assert accepts(schema, text) is ok, text
        assert (re.fullmatch(json_schema_to_regex(schema), text) is not None) is ok
