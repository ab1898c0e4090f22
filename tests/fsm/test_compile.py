"""compile_constraint: every kind of output type, the caches, the grammar hand-off, errors."""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import pydantic
import pytest

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.fsm import (
    Compiled,
    FreeTextCompiled,
    RegexCompiled,
    RejectedTokenError,
    Vocabulary,
    clear_caches,
    compile_constraint,
)
from outlines_like.fsm.compile import CACHE_DIR_ENV, compile_regex_cached
from outlines_like.types import CFG, JsonSchema, Regex, integer

# one token per printable ASCII byte, a few multi-byte tokens, EOS last
TOKENS = [bytes([b]) for b in range(32, 127)] + [b"true", b'{"', b'":', b"<eos>"]
EOS = len(TOKENS) - 1


@pytest.fixture
def vocab() -> Vocabulary:
    return Vocabulary(TOKENS, [EOS])


def byte_ids(text: str) -> list[int]:
    return [b - 32 for b in text.encode()]


def walk(compiled: Compiled, ids: list[int]) -> None:
    m = compiled.matcher()
    for tok in ids:
        m.advance(tok)
    m.advance(EOS)
    assert m.is_finished()


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Point(pydantic.BaseModel):
    y: int
    x: int


@pytest.mark.parametrize(
    ("output_type", "good", "bad"),
    [
        (int, "-42", "4.2"),
        (bool, "true", "True"),
        (Literal["yes", "no"], "no", "maybe"),
        (Color, "green", "blue"),
        (Regex(r"[a-c]{2}"), "ab", "abc"),
        (integer, "17", "017"),
        (Point, '{"y":1,"x":2}', '{"x":2,"y":1}'),
        (JsonSchema({"type": "array", "items": {"type": "integer"}}), "[1,2]", "[1,]"),
    ],
)
def test_regex_shaped_types(vocab: Vocabulary, output_type: object, good: str, bad: str) -> None:
    compiled = compile_constraint(output_type, vocab)
    assert isinstance(compiled, RegexCompiled)
    walk(compiled, byte_ids(good))
    with pytest.raises(RejectedTokenError):
        walk(compiled, byte_ids(bad))


def test_json_schema_keeps_the_property_order(vocab: Vocabulary) -> None:
    schema = {
        "type": "object",
        "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}},
        "required": ["b", "a"],
        "additionalProperties": False,
    }
    for source in (schema, json.dumps(schema)):
        compiled = compile_constraint(JsonSchema(source), vocab)
        walk(compiled, byte_ids('{"b":1,"a":2}'))


def test_large_json_schema_regexes_are_built_lazily(vocab: Vocabulary) -> None:
    """Past JSON_EAGER_NFA_LIMIT a schema's DFA is lazy; the same regex alone is eager."""
    members = {f"m{i}": {"type": "string", "maxLength": 3} for i in range(6)}
    schema = {"type": "object", "properties": members, "additionalProperties": False}
    small = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    clear_caches()
    compiled = compile_constraint(JsonSchema(schema), vocab)
    assert isinstance(compiled, RegexCompiled)
    assert compiled.dfa.lazy
    alone = compile_constraint(Regex(compiled.pattern), vocab)
    assert isinstance(alone, RegexCompiled)
    assert not alone.dfa.lazy
    text = '{"m0":"ab","m3":""}'
    for c in (compiled, alone):
        walk(c, byte_ids(text))
    lazy, eager = compiled.matcher(), alone.matcher()
    for tok in byte_ids(text):
        np.testing.assert_array_equal(lazy.allowed_token_ids(), eager.allowed_token_ids())
        lazy.advance(tok)
        eager.advance(tok)
    small_compiled = compile_constraint(JsonSchema(small), vocab)
    assert isinstance(small_compiled, RegexCompiled)
    assert not small_compiled.dfa.lazy


def test_multi_byte_tokens_are_used(vocab: Vocabulary) -> None:
    compiled = compile_constraint(bool, vocab)
    m = compiled.matcher()
    assert TOKENS.index(b"true") in m.allowed_token_ids().tolist()
    m.advance(TOKENS.index(b"true"))
    m.advance(EOS)
    assert m.is_finished()


@pytest.mark.parametrize("output_type", [None, str])
def test_free_text(vocab: Vocabulary, output_type: object) -> None:
    compiled = compile_constraint(output_type, vocab)
    assert isinstance(compiled, FreeTextCompiled)
    assert compiled.matcher().allowed_token_ids().shape[0] == len(TOKENS)


def test_grammars_go_to_the_grammar_path(vocab: Vocabulary) -> None:
    compiled = compile_constraint(CFG('start: "a" "b"+'), vocab)
    assert isinstance(compiled, Compiled)
    assert not isinstance(compiled, RegexCompiled)
    walk(compiled, byte_ids("abb"))


def test_dict_goes_to_the_json_grammar(vocab: Vocabulary) -> None:
    compiled = compile_constraint(dict, vocab)
    assert not isinstance(compiled, RegexCompiled)
    walk(compiled, byte_ids('{"a":[1,{"b":null}]}'))


def test_compiled_objects_are_cached_per_vocabulary(vocab: Vocabulary) -> None:
    a = compile_constraint(Regex(r"[0-9]+"), vocab)
    assert compile_constraint(Regex(r"[0-9]+"), vocab) is a
    # same regex from another type: same entry
    other = Vocabulary(TOKENS, [EOS])
    assert compile_constraint(Regex(r"[0-9]+"), other) is a  # equal vocabularies share
    different = Vocabulary([*TOKENS[:-1], b"x", b"<eos>"], [EOS + 1])
    assert compile_constraint(Regex(r"[0-9]+"), different) is not a
    clear_caches()
    assert compile_constraint(Regex(r"[0-9]+"), vocab) is not a


def test_disk_cache(tmp_path: Path, vocab: Vocabulary) -> None:
    clear_caches()
    dfa = compile_regex_cached(r"(ab|cd)+x", cache_dir=tmp_path)
    files = list(tmp_path.glob("dfa-*.npz"))
    assert len(files) == 1
    clear_caches()
    again = compile_regex_cached(r"(ab|cd)+x", cache_dir=tmp_path)
    assert again is not dfa
    np.testing.assert_array_equal(again.transitions, dfa.transitions)
    np.testing.assert_array_equal(again.accepting, dfa.accepting)
    assert again.start == dfa.start
    assert again.fullmatch(b"abcdx")


def test_disk_cache_from_environment(
    tmp_path: Path, vocab: Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    clear_caches()
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    compile_constraint(Regex(r"zz[0-9]"), vocab)
    assert len(list(tmp_path.glob("dfa-*.npz"))) == 1


def test_corrupt_disk_cache_is_ignored(tmp_path: Path) -> None:
    clear_caches()
    compile_regex_cached(r"q+", cache_dir=tmp_path)
    (path,) = tmp_path.glob("dfa-*.npz")
    path.write_bytes(b"not a zip file")
    clear_caches()
    assert compile_regex_cached(r"q+", cache_dir=tmp_path).fullmatch(b"qq")


def test_not_a_vocabulary_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="Vocabulary"):
        compile_constraint(int, [b"a"])  # type: ignore[arg-type]


def test_unsupported_type(vocab: Vocabulary) -> None:
    with pytest.raises(UnsupportedConstraintError):
        compile_constraint(object(), vocab)


def test_too_large_regex(vocab: Vocabulary) -> None:
    with pytest.raises(InvalidConstraintError, match="max_states"):
        compile_constraint(Regex(r"[ab]*a[ab]{12}"), vocab, max_states=100)


def test_clear_caches_empties_the_memos_and_the_vocabularys_grammars(vocab: Vocabulary) -> None:
    from outlines_like.fsm import _regex_estimate, grammar
    from outlines_like.types import _regex
    from outlines_like.types.json_schema import _base

    compile_constraint(Regex(r"(?:\d{1,3}\.){3}\d{1,3}(?:x[a-f]+)?"), vocab)
    # (the kernels estimate the blowup without the memo: fill it as the pure path does)
    _regex_estimate.dfa_blowup(_regex.parse_regex("(?:[0-9]*1)x"))
    names = CFG('start: NAME ("," NAME)*\nNAME: /[a-z]+/\n', "lark")
    compile_constraint(names, vocab)
    first = grammar.compile_grammar(names, vocab)
    assert grammar.compile_grammar(names, vocab) is first  # (kept on the vocabulary)
    assert _regex._GROUP_MEMOS
    assert _regex_estimate._WORST
    assert grammar._compiled_regexps
    compile_constraint(
        JsonSchema({"type": "object", "properties": {"a": {"type": "integer"}}}), vocab
    )
    assert _base._MEMBER_KEYS
    clear_caches()
    assert not _regex._GROUP_MEMOS
    assert not _regex_estimate._WORST
    assert not grammar._compiled_regexps
    assert not _base._MEMBER_KEYS
    assert not vocab._cache[grammar._COMPILED_KEY]
    if "outlines_like.fsm._accel_program" in sys.modules:
        assert not sys.modules["outlines_like.fsm._accel_program"]._store.code
    assert grammar.compile_grammar(names, vocab) is not first


class _Sized:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def test_byte_bound_evicts_the_oldest_and_sees_growth_within_the_resum_period() -> None:
    import collections

    from outlines_like.fsm import compile as compile_mod

    cache: collections.OrderedDict[int, _Sized] = collections.OrderedDict()
    put = compile_mod._lru_put
    for k in range(4):
        put(cache, k, _Sized(10), limit=100, max_bytes=45)
    assert list(cache) == [0, 1, 2, 3]
    put(cache, 4, _Sized(10), limit=100, max_bytes=45)  # 50 bytes: the oldest goes
    assert list(cache) == [1, 2, 3, 4]
    put(cache, 4, _Sized(20), limit=100, max_bytes=45)  # replaced: 10 more, not 20
    assert list(cache) == [2, 3, 4]
    cache[2].nbytes = 40  # grown after it was cached: seen at the next sum at the latest
    for k in range(5, 5 + compile_mod._RESUM_EVERY):
        put(cache, k, _Sized(0), limit=100, max_bytes=45)
    assert 2 not in cache
    assert sum(v.nbytes for v in cache.values()) <= 45


def test_byte_bound_forgets_the_bytes_of_entries_evicted_by_count() -> None:
    import collections

    from outlines_like.fsm import compile as compile_mod

    cache: collections.OrderedDict[int, _Sized] = collections.OrderedDict()
    for k in range(10):  # two 40-byte entries fit both limits: no more is evicted
        compile_mod._lru_put(cache, k, _Sized(40), limit=2, max_bytes=200)
        assert list(cache) == list(range(max(0, k - 1), k + 1))


def test_byte_bound_sums_at_every_insertion_past_half_the_bound() -> None:
    import collections

    from outlines_like.fsm import compile as compile_mod

    cache: collections.OrderedDict[int, _Sized] = collections.OrderedDict()
    put = compile_mod._lru_put
    put(cache, 0, _Sized(60), limit=100, max_bytes=100)  # past half: summed from now on
    cache[0].nbytes = 95  # grown after it was cached
    put(cache, 1, _Sized(10), limit=100, max_bytes=100)
    assert list(cache) == [1]


def test_the_collector_is_paused_for_a_compile_and_restored(
    vocab: Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    import outlines_like.fsm.compile as compile_module

    seen: list[bool] = []
    real = compile_module._compile

    def spy(*args: object, **kwargs: object) -> Compiled:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compile_module, "_compile", spy)
    clear_caches()
    assert gc.isenabled()
    compile_constraint(JsonSchema({"type": "array", "items": {"type": "integer"}}), vocab)
    nothing = {"type": "object", "properties": {"a": False}, "required": ["a"]}
    with pytest.raises(InvalidConstraintError, match="no document"):  # raised in the compile
        compile_constraint(JsonSchema(nothing), vocab)
    assert seen == [False, False]
    assert gc.isenabled()
    gc.disable()  # a caller's paused collector stays paused
    try:
        compile_constraint(Regex("[0-9]+x"), vocab)
        assert not gc.isenabled()
    finally:
        gc.enable()
