"""Budget-aware closing: with any ``max_tokens`` that fits the shortest answer, answers end valid.

Random regexes (``test_properties``' generator), random JSON Schemas (on the regex path and
on the grammar path) and the grammar corpus (``test_grammar_properties``) meet random-weight
"models": every step's logits are random, masked by :class:`LogitsProcessor` with
``max_tokens``, and a token is sampled from what is left. Generation stops at EOS or at
``max_tokens``; either way the text must be a complete answer.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import lark
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlines_like.fsm import (
    Compiled,
    LogitsProcessor,
    RejectedTokenError,
    Vocabulary,
    _closing_walk,
    compile_constraint,
)
from outlines_like.fsm.closing import (
    HORIZON,
    ClosingMatcher,
    check_max_tokens,
    closing_matcher,
    shortest_document_tokens,
)
from outlines_like.fsm.grammar import CompiledGrammar
from outlines_like.fsm.matcher import RegexCompiled
from outlines_like.types import CFG, JsonSchema, Regex
from outlines_like.types.json_schema_grammar import json_schema_to_grammar
from tests.fsm import test_grammar as grammar_cases
from tests.fsm import test_json_grammar_path as json_cases
from tests.fsm import test_properties as regex_cases
from tests.fsm.test_grammar_properties import GRAMMARS

regex_mod = pytest.importorskip("regex")

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def generate(compiled: Compiled, max_tokens: int, seed: int, eos_bias: float = 0.0) -> bytes:
    """Sample one answer from random logits through the processor; stop at EOS or the limit."""
    vocab: Vocabulary = compiled.vocabulary
    rng = np.random.default_rng(seed)
    processor = LogitsProcessor(compiled, max_tokens=max_tokens)
    ids = [0]  # a one-token "prompt"
    out = b""
    eos = set(vocab.eos_token_ids)
    for _ in range(max_tokens):
        scores = rng.normal(size=(1, vocab.size)).astype(np.float32) * 3
        scores[0, sorted(eos)] += eos_bias
        processor(np.array([ids]), scores)
        token = int(np.argmax(scores[0] + rng.gumbel(size=vocab.size)))
        assert np.isfinite(scores[0, token])
        ids.append(token)
        if token in eos:
            break
        out += vocab.tokens[token]
    return out


# -- regexes ------------------------------------------------------------------------------


@SETTINGS
@given(pattern=regex_cases.patterns, extra=st.integers(0, 12), seed=st.integers(0, 2**16))
def test_random_regex_answers_close_within_max_tokens(
    pattern: regex_cases.Pattern, extra: int, seed: int
) -> None:
    compiled = compile_constraint(Regex(pattern.text), regex_cases.VOCAB)
    need = shortest_document_tokens(compiled)
    assert need is not None
    out = generate(compiled, max(1, need + extra), seed, eos_bias=-2.0)
    assert regex_mod.fullmatch(pattern.raw, out), (pattern.text, need, extra, out)


@pytest.mark.parametrize(
    ("pattern", "need"),
    [("a", 1), ("a|bbbbbbbbbb", 1), ("(ab)*c?a", 1), ("a{3,}b{2}", 3), ("b{6}", 3)],
)
def test_the_shortest_answer_in_tokens(pattern: str, need: int) -> None:
    # the fewest tokens of regex_cases.VOCAB: "aba" "bb" "ab" ... ("b{6}" is bb bb bb)
    compiled = compile_constraint(Regex(pattern), regex_cases.VOCAB)
    assert shortest_document_tokens(compiled) == need


def test_a_tempting_long_branch_is_refused_when_it_cannot_close() -> None:
    """``a|b{10}``: with 3 tokens left, ``b`` would need 5 more tokens, so only ``a`` stays."""
    compiled = compile_constraint(Regex("a|b{10}"), regex_cases.VOCAB)
    matcher = closing_matcher(compiled, 3)
    assert isinstance(matcher, ClosingMatcher)
    allowed = {regex_cases.VOCAB.tokens[t] for t in matcher.allowed_token_ids().tolist()}
    assert allowed == {b"a"}
    roomy = closing_matcher(compiled, 9)
    assert {regex_cases.VOCAB.tokens[t] for t in roomy.allowed_token_ids().tolist()} >= {
        b"a",
        b"b",
        b"bb",
    }


def test_the_matcher_commits_to_the_closing_path_when_the_tokens_run_short() -> None:
    compiled = compile_constraint(Regex("a{2,}b"), regex_cases.VOCAB)
    matcher = closing_matcher(compiled, 4)
    assert isinstance(matcher, ClosingMatcher)
    aa = regex_cases.VOCAB.tokens.index(b"aa")
    matcher.advance(aa)
    matcher.advance(aa)
    matcher.advance(aa)  # one token left: only "b" closes
    assert matcher.left == 1
    assert not matcher.closing
    assert [regex_cases.VOCAB.tokens[t] for t in matcher.allowed_token_ids().tolist()] == [b"b"]
    assert matcher.closing
    with pytest.raises(RejectedTokenError, match="must close"):
        matcher.advance(aa)
    copy = matcher.copy()
    matcher.advance(regex_cases.VOCAB.tokens.index(b"b"))
    assert matcher.is_accepting()
    assert matcher.left == 0
    assert copy.left == 1  # copies are independent
    matcher.reset()
    assert matcher.left == 4
    assert not matcher.closing


# -- JSON Schemas, both paths ----------------------------------------------------------------

_leaf = st.sampled_from(
    [
        {"type": "integer"},
        {"type": "integer", "minimum": 0, "maximum": 99},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "string", "maxLength": 4},
        {"type": "string", "minLength": 2, "maxLength": 3},
        {"enum": ["red", "green", 3]},
        {"type": "number"},
    ]
)


def _containers(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def obj(props: dict[str, dict[str, Any]], required: list[bool]) -> dict[str, Any]:
        names = list(props)
        return {
            "type": "object",
            "properties": props,
            "required": [n for n, r in zip(names, required, strict=False) if r],
            "additionalProperties": False,
        }

    names = st.sampled_from(["a", "name", "value", "children", "x"])
    return st.one_of(
        st.builds(
            obj,
            st.dictionaries(names, children, min_size=1, max_size=3),
            st.lists(st.booleans(), min_size=3, max_size=3),
        ),
        st.builds(
            lambda items, lo, extra: {
                "type": "array",
                "items": items,
                "minItems": lo,
                "maxItems": lo + extra,
            },
            children,
            st.integers(0, 2),
            st.integers(0, 2),
        ),
    )


schemas = st.recursive(_leaf, _containers, max_leaves=5)


@SETTINGS
@given(
    schema=schemas,
    path=st.sampled_from(["regex", "grammar"]),
    extra=st.integers(0, 20),
    seed=st.integers(0, 2**16),
)
def test_random_schema_answers_close_within_max_tokens(
    schema: dict[str, Any], path: str, extra: int, seed: int
) -> None:
    vocab = json_cases.VOCAB
    if path == "regex":
        compiled = compile_constraint(JsonSchema(schema), vocab)
    else:
        compiled = compile_constraint(CFG(json_schema_to_grammar(schema), "lark"), vocab)
        assert isinstance(compiled, CompiledGrammar)
    need = shortest_document_tokens(compiled)
    assert need is not None
    out = generate(compiled, need + extra, seed, eos_bias=-3.0)
    jsonschema.validate(json.loads(out), schema)


# -- Lark grammars ----------------------------------------------------------------------------


@SETTINGS
@given(name=st.sampled_from(sorted(GRAMMARS)), extra=st.integers(0, 25), seed=st.integers(0, 2**16))
def test_grammar_answers_close_within_max_tokens(name: str, extra: int, seed: int) -> None:
    grammar, parser = GRAMMARS[name]
    compiled = compile_constraint(CFG(grammar, "lark"), grammar_cases.VOCAB)
    need = shortest_document_tokens(compiled)
    assert need is not None
    out = generate(compiled, max(1, need + extra), seed, eos_bias=-3.0)
    lark.Lark(grammar, parser=parser).parse(out.decode("utf-8"))


# -- max_tokens below the shortest answer -----------------------------------------------------


def test_max_tokens_below_the_shortest_answer_is_a_value_error() -> None:
    compiled = compile_constraint(Regex("a{3,}b{2}"), regex_cases.VOCAB)
    assert isinstance(compiled, RegexCompiled)
    check_max_tokens(compiled, 3)
    with pytest.raises(ValueError, match=r"max_tokens=2 cannot fit a valid answer.* 3 tokens"):
        check_max_tokens(compiled, 2)
    with pytest.raises(ValueError, match="max_tokens=2"):
        LogitsProcessor(compiled, max_tokens=2)
    with pytest.raises(ValueError, match="positive int"):
        LogitsProcessor(compiled, max_tokens=0)


def test_free_text_and_no_limit_keep_the_plain_matcher() -> None:
    compiled = compile_constraint(Regex("a+"), regex_cases.VOCAB)
    assert not isinstance(closing_matcher(compiled, None), ClosingMatcher)
    free = compile_constraint(None, regex_cases.VOCAB)
    assert shortest_document_tokens(free) == 0
    assert not isinstance(closing_matcher(free, 5), ClosingMatcher)


def test_reasoning_tokens_count_against_the_budget() -> None:
    """Free tokens before ``</think>`` are spent from ``max_tokens`` too."""
    vocab = regex_cases.VOCAB
    compiled = compile_constraint(Regex("a{2,}b"), vocab)
    think_end = vocab.tokens.index(b"ba")  # any token works as the marker here
    processor = LogitsProcessor(compiled, think_end_token_id=think_end, max_tokens=6)
    ids = [0]
    for token in (vocab.tokens.index(b"bb"), think_end):  # two reasoning tokens
        processor(np.array([ids]), np.zeros((1, vocab.size), dtype=np.float32))
        ids.append(token)
    scores = np.zeros((1, vocab.size), dtype=np.float32)
    processor(np.array([ids]), scores)
    matcher = processor.matchers[0]
    assert isinstance(matcher, ClosingMatcher)
    assert matcher.left == 4


def test_a_grammar_state_with_too_many_tokens_to_check_closes_at_the_horizon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Successors not checked (over the limit): plain masks, then the closing path in time."""
    monkeypatch.setattr(_closing_walk, "MAX_GRAMMAR_SUCCESSORS", 0)
    grammar, parser = GRAMMARS["arith"]
    compiled = CompiledGrammar(grammar, grammar_cases.VOCAB)  # not cached: no successors known
    plain = compiled.matcher().allowed_token_ids().tolist()
    need = shortest_document_tokens(compiled)
    assert need
    far = closing_matcher(compiled, need + HORIZON + 1)
    assert far.allowed_token_ids().tolist() == plain
    near = closing_matcher(compiled, need + HORIZON)
    assert len(near.allowed_token_ids()) == 1
    for seed in range(5):
        out = generate(compiled, need + HORIZON + 3, seed, eos_bias=-5.0)
        lark.Lark(grammar, parser=parser).parse(out.decode("utf-8"))
