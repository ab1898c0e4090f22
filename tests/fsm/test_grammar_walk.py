"""The grammar masker's shared lexical walks (:mod:`outlines_like.fsm._grammar_walk`, string
bodies: :mod:`outlines_like.fsm._grammar_body`).

A string's body walked through the vocabulary's token sets (only the tokens that do not fit
are walked) must give the same rows and stops as the walk of every token, in every lexer
state of every grammar of the corpus, with and without the ``accel`` extra.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from outlines_like.fsm import _accel
from outlines_like.fsm._grammar_body import body_key
from outlines_like.fsm._grammar_walk import LexemeWalk, lexeme_walk, sub_dfa
from outlines_like.fsm.grammar import CompiledGrammar
from outlines_like.fsm.index import token_trie
from outlines_like.fsm.vocabulary import Vocabulary
from tests.fsm.test_grammar import JSON_LARK, MULTI
from tests.fsm.test_grammar_keys import _configs, _walks
from tests.fsm.test_grammar_properties import GRAMMARS

# characters of 2, 3 and 4 bytes, whole, split, and beside quotes and escapes
WIDE = ["é", "€", "😀", "a€b", '€"', '"😀', "\\u00e9", "日本", "\n€"]
TOKENS = [bytes([b]) for b in range(256)] + MULTI + [w.encode() for w in WIDE]
TOKENS += [b"\xe2\x82", b"\xac", b"\xf0\x9f\x98", b"\x80\x80", b"\xed\xa0\x80", b"<|s|>", b"<e>"]


@pytest.fixture(params=[True, False], ids=["accel", "pure"])
def accel(request: pytest.FixtureRequest) -> Iterator[bool]:
    if request.param and not _accel.available():
        pytest.skip("numba is not installed (the accel extra)")
    _accel.set_enabled(request.param)
    yield request.param
    _accel.set_enabled(None)


def _vocab() -> Vocabulary:
    return Vocabulary(TOKENS, [len(TOKENS) - 1], [len(TOKENS) - 2])


def _as_sets(found: LexemeWalk) -> tuple[dict[int, bytes], set[tuple[int, int, int]]]:
    rows = {state: row.tobytes() for state, row in found.end_rows}
    stops = {
        (state, token, offset)
        for state, ids, offsets in found.stops
        for token, offset in zip(ids.tolist(), offsets.tolist(), strict=True)
    }
    return rows, stops


# strings that refuse some characters (one of 2 bytes, one of 3, those of 4): a loop on
# most ASCII bytes that is not a string's body (every token must then be walked)
PICKY = r"""
start: "[" [STR ("," STR)*] "]"
STR: /"[^"\\é]*"/ | /'[^'€]*'/ | /`[\x00-\x7f\u0080-\uffff]*`/
%ignore " "
"""
CASES = {**{name: text for name, (text, _) in GRAMMARS.items()}, "picky": PICKY}


@pytest.mark.parametrize("name", sorted(CASES))
def test_string_bodies_walk_only_the_tokens_that_do_not_fit(name: str, accel: bool) -> None:
    grammar = CompiledGrammar(CASES[name], _vocab())
    for config, _ in _configs(grammar, _walks(grammar, f"{name}-bodies", walks=8)):
        grammar._context_id(config)  # (builds the lexer contexts the walks meet)
    shortcuts = 0
    for context in list(grammar._contexts):
        for lex in range(context.n_states):
            order = sub_dfa(context.rows, lex)
            if order is None:
                continue
            args = (context.transitions, context.accepting, order)
            plain = _vocab()
            fast = _vocab()
            trie = token_trie(fast) if accel else None
            fast_grammar = CompiledGrammar(CASES[name], fast)
            expected = lexeme_walk(plain, grammar._table, *args, trie)
            found = lexeme_walk(fast, fast_grammar._table, *args, trie, fast_grammar._body_sets)
            assert _as_sets(found) == _as_sets(expected)
            shortcuts += body_key(_canon(context.transitions, order)) is not None
    if name in ("json", "lark_tutorial_json"):
        assert shortcuts  # a string's inside took the vocabulary's token sets
    if name == "picky":
        assert not shortcuts  # (a character of 2, 3 or 4 bytes does not loop)


def _canon(transitions: np.ndarray, order: list[int]) -> np.ndarray:
    remap = np.full(transitions.shape[0], -1, dtype=np.int32)
    remap[order] = np.arange(len(order), dtype=np.int32)
    sub = transitions[order]
    return np.where(sub >= 0, remap[sub], -1).astype(np.int32)


# a recursive schema (the grammar path) with a string value
TREE_SCHEMA = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
        }
    },
    "$ref": "#/$defs/node",
}
STRING_DOCS = {
    "lark": '{"a": ["é€ \\" \\u00e9 x", "😀"], "b": "日本"}',
    "schema": '{"name":"a€b \\\\ \\u00e9 😀","kids":[{"name":"\\n"}]}',
}


def _string_masks(vocab: Vocabulary, kind: str) -> list[bytes]:
    """Every mask along the document of ``kind``, token by token (one byte each)."""
    from outlines_like.fsm import compile_constraint
    from outlines_like.types import CFG, JsonSchema

    # (JSON_LARK spells its string regex otherwise than the JSON Schema converter)
    term = CFG(JSON_LARK, "lark") if kind == "lark" else JsonSchema(TREE_SCHEMA)
    matcher = compile_constraint(term, vocab).matcher()
    masks = []
    mask = np.zeros(vocab.mask_words, dtype=np.int32)
    for byte in STRING_DOCS[kind].encode():
        matcher.fill_bitmask(mask)
        masks.append(mask.tobytes())
        matcher.advance(byte)  # (token ``byte`` is that byte: TOKENS starts with all 256)
    return masks


@pytest.mark.parametrize("kind", ["lark", "schema"])
def test_setup_walks_the_inside_of_a_json_string_for_every_grammar(kind: str, accel: bool) -> None:
    from outlines_like.fsm import clear_caches, prepare_vocabulary
    from outlines_like.fsm._grammar_walk import _LEXEME_KEY

    clear_caches()  # (no compiled grammar nor terminal DFA from an earlier test)
    prepared = _vocab()
    prepare_vocabulary(prepared, stock_row_tables=False)
    walks = prepared._cache[_LEXEME_KEY]
    assert len(walks) == 1
    (walked,) = walks.values()
    assert bool(walked.rests) is accel  # the closing tokens' tries: the kernel's only
    (setup_key,) = walks
    masks = _string_masks(prepared, kind)
    # the grammar's string took the walk made in setup (the same canonical sub-DFA, though
    # the grammar spells its regex otherwise), and the rests' tries with it: no other walk
    # of a string's body was made (the pure masker also walks numbers, literals... so)
    assert walks[setup_key] is walked
    assert [key for key in walks if key != setup_key and body_key(_key_canon(key))] == []
    assert len(walked.rests) == (len(walked.stops) if accel else 0)
    clear_caches()
    assert masks == _string_masks(_vocab(), kind)  # the same masks as a walk made on first use


def _key_canon(key: bytes) -> np.ndarray:
    """The canonical sub-DFA a lexical walk is cached by (its transitions, then ``accepting``)."""
    n = len(key) // (256 * 4 + 1)
    return np.frombuffer(key[: n * 256 * 4], dtype=np.int32).reshape(n, 256)
