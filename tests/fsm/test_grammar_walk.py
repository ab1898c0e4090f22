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
from tests.fsm.test_grammar import MULTI
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
