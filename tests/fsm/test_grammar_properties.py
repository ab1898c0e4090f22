"""Properties of the grammar masker: what it lets through parses, what parses gets through."""

from __future__ import annotations

import itertools
import json
from typing import Any

import lark
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlines_like.fsm.grammar import CompiledGrammar, compile_grammar
from outlines_like.types import CFG
from tests.fsm.test_grammar import (
    ARITH_LARK,
    ARITH_WS,
    EOS_ID,
    JSON_LARK,
    KEYWORDS,
    LARK_TUTORIAL_JSON,
    PRIORITY,
    TOKEN_ID,
    VOCAB,
    greedy,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (grammar, Lark parser that must accept every finished walk)
GRAMMARS = {
    "json": (JSON_LARK, "lalr"),
    "arith": (ARITH_LARK, "lalr"),
    "keywords": (KEYWORDS, "lalr"),
    "lark_tutorial_json": (LARK_TUTORIAL_JSON, "lalr"),
    "priority": (PRIORITY, "lalr"),
    "arith_ws_glr": (ARITH_WS, "earley"),
}

# The masking benchmark's grammar samples (../shared/bench/cases.py), inlined.
ARITH_SAMPLE = "(12 + 4.5) * 3 - 7 / (2 + 8) * -1.25 + ((6 - 2) * (9 / 3) - 100)"
JSON_DOC = {
    "library": {
        "name": "Ashgrove Public Library",
        "founded": 1897,
        "open": True,
        "rating": 4.75,
        "coordinates": [-122.6765, 45.5231],
    },
    "books": [
        {
            "isbn": "978-0-14-143951-8",
            "title": "Pride and Prejudice",
            "authors": ["Jane Austen"],
            "year": 1813,
            "available": True,
            "tags": ["classic", "romance"],
        },
        {
            "isbn": "978-0-452-28423-4",
            "title": "Nineteen Eighty-Four",
            "authors": ["George Orwell"],
            "year": 1949,
            "available": False,
            "tags": [],
        },
        {
            "isbn": "978-0-7432-7356-5",
            "title": 'The "Great" Gatsby',
            "authors": ["F. Scott Fitzgerald"],
            "year": 1925,
            "available": True,
            "due": None,
            "fines": -0.5e-2,
        },
    ],
    "meta": {"generated": "2024-05-01T12:00:00Z", "count": 3, "path": "C:\\data\\lib.json"},
}
JSON_SAMPLE = json.dumps(JSON_DOC, indent=2)


def compiled(name: str) -> CompiledGrammar:
    return compile_grammar(CFG(GRAMMARS[name][0]), VOCAB)


def oracle(name: str) -> lark.Lark:
    grammar, parser = GRAMMARS[name]
    return lark.Lark(grammar, parser=parser)


def split_tokens(text: bytes, cuts: list[int]) -> list[int]:
    """Tokenize ``text`` at the given cut points, each piece greedily (pieces may be bytes)."""
    bounds = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    out: list[int] = []
    for a, b in itertools.pairwise(bounds):
        out.extend(greedy(text[a:b]))
    return out


def accepts(grammar: CompiledGrammar, tokens: list[int]) -> bool:
    m = grammar.matcher()
    for t in tokens:
        if t not in m.allowed_token_ids():
            return False
        m.advance(t)
    if EOS_ID not in m.allowed_token_ids():
        return False
    m.advance(EOS_ID)
    return m.is_finished()


@pytest.mark.parametrize("name", sorted(GRAMMARS))
@SETTINGS
@given(data=st.data())
def test_random_walks_parse(name: str, data: st.DataObject) -> None:
    grammar = compiled(name)
    m = grammar.matcher()
    text = b""
    for step in range(40):
        allowed = m.allowed_token_ids().tolist()
        assert allowed, f"dead end after {text!r}"  # every reachable state can go on
        assert not VOCAB.special_token_ids - {EOS_ID} & set(allowed)
        if EOS_ID in allowed and (step >= 30 or data.draw(st.booleans())):
            m.advance(EOS_ID)
            break
        token = data.draw(st.sampled_from([t for t in allowed if t != EOS_ID]))
        m.advance(token)
        text += VOCAB.tokens[token]
    if m.is_finished():
        oracle(name).parse(text.decode("utf-8"))  # raises if Lark does not accept it


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@SETTINGS
@given(
    value=json_values,
    indent=st.sampled_from([None, 0, 2]),
    separators=st.sampled_from([None, (",", ":"), (", ", ": "), (" ,", " :  ")]),
    ensure_ascii=st.booleans(),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_json_sentences_are_never_rejected(
    value: Any,
    indent: int | None,
    separators: tuple[str, str] | None,
    ensure_ascii: bool,
    cuts: list[int],
) -> None:
    text = json.dumps(value, indent=indent, separators=separators, ensure_ascii=ensure_ascii)
    data = text.encode("utf-8")
    grammar = compiled("json")
    assert accepts(grammar, greedy(data)), text
    assert accepts(grammar, split_tokens(data, cuts)), text


@pytest.mark.parametrize(
    ("name", "sample"),
    [("json", JSON_SAMPLE), ("arith", ARITH_SAMPLE), ("arith_ws_glr", "(1 + 23) * 4")],
)
@SETTINGS
@given(cuts=st.lists(st.integers(0, 10_000), max_size=30))
def test_samples_walk_through_any_tokenization(name: str, sample: str, cuts: list[int]) -> None:
    data = sample.encode()
    grammar = compiled(name)
    assert accepts(grammar, split_tokens(data, cuts))


@pytest.mark.parametrize(("name", "sample"), [("json", JSON_SAMPLE), ("arith", ARITH_SAMPLE)])
def test_samples_walk_through_bytes_and_greedy(name: str, sample: str) -> None:
    data = sample.encode()
    grammar = compiled(name)
    assert accepts(grammar, greedy(data))
    assert accepts(grammar, [TOKEN_ID[bytes([b])] for b in data])
    assert not accepts(grammar, greedy(data[:-1]))  # the last byte is needed


@pytest.mark.parametrize("tree", ["default", "deep", "spent"])
@pytest.mark.parametrize("name", sorted(GRAMMARS))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_vectorised_masks_match_byte_by_byte_lexing(
    name: str, tree: str, data: st.DataObject
) -> None:
    """The numpy walk (batched over stacks) agrees with lexing each token byte by byte.

    ``default``: with the accel extra, an LALR grammar's rows are trie walks in the kernel.

    ``deep``: every group of tokens crossing lexemes goes on in the cached lexical tree as
    deep as it goes (a real vocabulary's large groups do), not in the matcher DFA; ``spent``:
    the tree's budget is used up, so all but the first step go through the matcher DFA.
    """
    grammar = compiled(name)
    if tree != "default":
        grammar = CompiledGrammar(grammar.grammar, VOCAB)
        grammar._trie_rows = False  # (accel, LALR) the keyed rows, not one walk of the trie
        if tree == "deep":
            grammar._lexical_group = 1
        else:
            grammar._lexical_nodes = 1 << 40
    m = grammar.matcher()
    walked: list[int] = []
    for _ in range(data.draw(st.integers(0, 12))):
        choices = [t for t in m.allowed_token_ids().tolist() if t != EOS_ID]
        if not choices:
            break
        walked.append(data.draw(st.sampled_from(choices)))
        m.advance(walked[-1])
    config, lex = m._stack, m._lex
    expected = np.zeros(len(VOCAB), dtype=np.bool_)
    for token_id in range(len(VOCAB)):
        if token_id in VOCAB.special_token_ids:
            continue
        state = grammar._step_token(config, lex, token_id)
        if state is not None:
            after, after_lex = state
            expected[token_id] = grammar._viable(after, grammar._context_id(after))[after_lex]
    got = np.zeros(len(VOCAB), dtype=np.bool_)
    got[m.allowed_token_ids()] = True
    eos_allowed = bool(got[EOS_ID])
    got[EOS_ID] = False
    np.testing.assert_array_equal(np.flatnonzero(got), np.flatnonzero(expected))
    # a matcher whose compiled grammar has no mask cached checks tokens one by one: same answers
    fresh = CompiledGrammar(grammar.grammar, VOCAB).matcher()
    for token in walked:
        fresh.advance(token)
    one_by_one = [t for t in range(len(VOCAB)) if t != EOS_ID and fresh.is_allowed(t)]
    assert one_by_one == np.flatnonzero(got).tolist()
    assert fresh.is_allowed(EOS_ID) is eos_allowed


ARITH_EBNF = r"""
root   ::= expr
expr   ::= term (ws [+-] ws term)*
term   ::= factor (ws [*/] ws factor)*
factor ::= number | "(" ws expr ws ")" | "-" factor
number ::= [0-9]+ ("." [0-9]+)?
ws     ::= [ ]*
"""

REAL_CASES = {
    "json_lark": (CFG(JSON_LARK), JSON_SAMPLE),
    "arith_lark": (CFG(ARITH_LARK), ARITH_SAMPLE),
    "arith_ebnf": (CFG(ARITH_EBNF, "ebnf"), ARITH_SAMPLE),
}


@pytest.mark.vocab
@pytest.mark.parametrize("vocab_name", ["llama3", "qwen3"])
@pytest.mark.parametrize("case", sorted(REAL_CASES))
def test_bench_samples_on_real_vocabularies(vocab_name: str, case: str) -> None:
    """The harness's grammar walks, on the real BPE tokenization (select alone: ``-m vocab``)."""
    from outlines_like.fsm.vocabulary import Vocabulary

    quicktok = pytest.importorskip("quicktok")
    enc = quicktok.get_encoding(vocab_name)
    tokens = [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
    special = sorted(enc.encode_single_token(s) for s in enc.special_tokens_set)
    eos = enc.encode_single_token({"llama3": "<|eot_id|>", "qwen3": "<|endoftext|>"}[vocab_name])
    vocab = Vocabulary(tokens, [eos], special)
    cfg, sample = REAL_CASES[case]
    m = compile_grammar(cfg, vocab).matcher()
    bitmask = np.zeros(vocab.mask_words, dtype=np.int32)
    not_eos = np.array([s for s in special if s != eos])
    for token in [*enc.encode_ordinary(sample), eos]:
        m.fill_bitmask(bitmask)
        bits = np.unpackbits(bitmask.view(np.uint8), bitorder="little")
        assert bits[token], (case, token, tokens[token])
        assert not bits[not_eos].any()
        m.advance(token)
    assert m.is_finished()


@pytest.mark.vocab
@pytest.mark.parametrize("case", ["arith_lark", "json_lark", "arith_ebnf"])
def test_real_vocabulary_masks_match_token_by_token_lexing(case: str) -> None:
    """On llama3, the masks along the sample agree with lexing tokens one by one (a sample).

    Large groups of tokens that cross lexemes (every token starting with a space, say) run
    through the cached lexical tree only on a real vocabulary; a fresh grammar without masks
    lexes each sampled token byte by byte.
    """
    from outlines_like.fsm.vocabulary import Vocabulary

    quicktok = pytest.importorskip("quicktok")
    enc = quicktok.get_encoding("llama3")
    tokens = [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
    special = sorted(enc.encode_single_token(s) for s in enc.special_tokens_set)
    eos = enc.encode_single_token("<|eot_id|>")
    vocab = Vocabulary(tokens, [eos], special)
    cfg, sample = REAL_CASES[case]
    grammar = CompiledGrammar(cfg.lark, vocab)
    reference = CompiledGrammar(cfg.lark, vocab)
    m, ref = grammar.matcher(), reference.matcher()
    rng = np.random.default_rng(0)
    probe = np.flatnonzero(np.array([len(t) > 0 for t in tokens]))
    probe = np.setdiff1d(probe, special)
    for step, token in enumerate(enc.encode_ordinary(sample)[:24]):
        allowed = set(m.allowed_token_ids().tolist())
        sampled = rng.choice(probe, 600, replace=False).tolist()
        # every allowed token, and a sample of the others
        for t in sorted(set(sampled) | {t for t in allowed if t != eos}):
            assert ref.is_allowed(t) == (t in allowed), (case, step, tokens[t])
        m.advance(token)
        ref.advance(token)
