"""Rows keyed by the stack's top states are the rows computed from the whole stack."""

from __future__ import annotations

import contextlib
import random

import numpy as np
import pytest

from outlines_like.fsm._grammar_parser import _TOP_DEPTH, BOTTOM, GLRParser, NeedsBottom
from outlines_like.fsm.grammar import CompiledGrammar, _Partial
from tests.fsm.test_grammar import EOS_ID, VOCAB
from tests.fsm.test_grammar_properties import GRAMMARS

Config = object


def _walks(grammar: CompiledGrammar, seed: str, walks: int = 40) -> list[list[int]]:
    """Random walks: random allowed tokens, up to 30 a walk."""
    rng = random.Random(seed)
    out = []
    for _ in range(walks):
        m = grammar.matcher()
        tokens: list[int] = []
        for _ in range(rng.randint(1, 30)):
            choices = [t for t in m.allowed_token_ids().tolist() if t != EOS_ID]
            if not choices:
                break
            tokens.append(rng.choice(choices))
            m.advance(tokens[-1])
        out.append(tokens)
    return out


def _configs(grammar: CompiledGrammar, walks: list[list[int]]) -> list[tuple[Config, int]]:
    """The matcher states met along ``walks``, in order (state ids are per compile)."""
    out = []
    for tokens in walks:
        m = grammar.matcher()
        out.append((m._stack, m._lex))
        for token in tokens:
            m.advance(token)
            out.append((m._stack, m._lex))
    return out


@pytest.mark.parametrize("depths", [(1,), (1, 2, 3), (2, 4, 8)])
@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_keyed_rows_match_rows_from_scratch(name: str, depths: tuple[int, ...]) -> None:
    """Over many random configurations, a keyed row equals the row of the whole stack.

    Every state is asked twice (the second time from the partial rows cached, level by
    level), with the whole-row cache cleared before each.
    """
    text = GRAMMARS[name][0]
    scratch = CompiledGrammar(text, VOCAB)
    scratch._key_depths = ()  # never truncated: every row from the whole stack
    keyed = CompiledGrammar(text, VOCAB)
    keyed._key_depths = depths
    keyed._trie_rows = scratch._trie_rows = False  # (accel: the rows keyed, not one trie walk)
    walks = _walks(scratch, f"{name}-{depths}")
    pairs = list(zip(_configs(keyed, walks), _configs(scratch, walks), strict=True))
    for _ in range(2):
        for (config, lex), (whole, whole_lex) in pairs:
            keyed._masks.clear()
            np.testing.assert_array_equal(keyed._mask(config, lex), scratch._mask(whole, whole_lex))
    partials: list[_Partial] = list(keyed._partials.values())
    for partial in partials:
        partials.extend(partial.children.values())
    if name == "arith":  # its random walks nest parentheses: every pending path is reached
        assert any(p.items or p.groups for p in partials)
        assert any(p.children for p in partials) == (len(depths) > 1)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_truncated_steps_are_the_whole_steps_with_the_bottom_cut(name: str) -> None:
    """Each parser step on a truncated configuration raises or equals the whole step, cut."""
    grammar = CompiledGrammar(GRAMMARS[name][0], VOCAB)
    parser = grammar._parser
    names = sorted(set(grammar.terminal_names))
    checked = 0
    for config, _lex in _configs(grammar, _walks(grammar, name, walks=20)):
        for depth in (1, 2, 3):
            split = parser.split(config, depth)
            if split is None:
                continue
            short, bottom = split
            assert parser.join(short, bottom) == config
            for terminal in names:
                whole = parser.feed(config, terminal)
                try:
                    cut = parser.feed(short, terminal)
                except NeedsBottom:
                    continue
                checked += 1
                if cut is None:
                    assert whole is None
                else:
                    assert whole == parser.join(cut, bottom)
                    stacks = cut if isinstance(cut, frozenset) else [cut]
                    assert all(s[0] == BOTTOM and BOTTOM not in s[1:] for s in stacks)
            with contextlib.suppress(NeedsBottom):
                assert parser.accepts_end(short) == parser.accepts_end(config)
    assert checked


def test_glr_steps_explored_on_the_top_are_the_whole_steps() -> None:
    """A deep stack's step, explored on its top states and memoised, is the whole exploration.

    Random terminal walks (biased to nesting) reach stacks far deeper than the top explored.
    """
    grammar = CompiledGrammar(GRAMMARS["arith_ws_glr"][0], VOCAB)
    parser = grammar._parser
    assert isinstance(parser, GLRParser)
    names = frozenset(grammar.terminal_names)
    rng = random.Random("glr-top")
    deep = 0
    for _ in range(30):
        config = parser.initial
        for _ in range(60):
            shiftable = parser.shiftable(config, names)
            assert shiftable == frozenset(
                n for n in names if any(parser._explore(s, n) for s in config)
            )
            for stack in config:
                deep += len(stack) > 2 * _TOP_DEPTH
                for terminal in sorted(shiftable):
                    assert parser._stack_feed(stack, terminal) == parser._explore(stack, terminal)
            if not shiftable:
                break
            options = sorted(shiftable)
            nest = [n for n in options if n in ("LPAR", "MINUS")]
            terminal = rng.choice(nest if nest and rng.random() < 0.6 else options)
            after = parser.feed(config, terminal)
            assert after is not None
            config = after
    assert deep


def _eos_answer(grammar: CompiledGrammar, config: Config, lex: int) -> bool | None:
    """``_eos_ok``, None where it needs the stack's bottom."""
    try:
        return grammar._eos_ok(config, lex)
    except NeedsBottom:
        return None


@pytest.mark.parametrize("name", sorted(n for n, (_, kind) in GRAMMARS.items() if kind == "lalr"))
def test_end_filter_answers_as_the_parser(name: str) -> None:
    """EOS past the table's two necessary conditions (``_end_filter``) is the parser's answer
    over random configurations, whole and truncated, from every lexer state of their context;
    where the bottom would decide, the conditions may refuse at once (every stack with that
    top refuses). The conditions refuse some of them, so the test checks something."""
    grammar = CompiledGrammar(GRAMMARS[name][0], VOCAB)
    has_end, after = ends = grammar._end_filter()
    passed = ([True] * len(has_end), [True] * len(after))  # conditions that pass all
    refused = 0
    for config, _ in _configs(grammar, _walks(grammar, f"{name}-end", walks=12)):
        split = grammar._parser.split(config, 2)  # type: ignore[union-attr]
        for stack in [config] if split is None else [config, split[0]]:
            context = grammar._contexts[grammar._context_id(stack)]
            for lex in range(context.n_states):
                grammar._ends = passed
                expected = _eos_answer(grammar, stack, lex)
                grammar._ends = ends
                found = _eos_answer(grammar, stack, lex)
                assert found == expected or (expected is None and found is False)
                cls = int(context.winner[lex])
                if lex == 0 or (cls >= 0 and grammar._classes[cls][0] in grammar._ignore_ids):
                    refused += not has_end[stack[-1]]  # type: ignore[index]
                elif cls >= 0:
                    refused += not after[grammar._classes[cls][0]]
    assert refused
