"""The grammar lexer: the process-wide memo of terminal DFAs, and the contexts' rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from outlines_like.errors import UnsupportedConstraintError
from outlines_like.fsm import _accel, _grammar_lexer
from outlines_like.fsm import grammar as grammar_module
from outlines_like.fsm._grammar_lexer import (
    ContextDFA,
    build_context,
    clear_terminal_dfas,
    terminal_dfa,
)
from outlines_like.fsm._grammar_parser import LALRParser
from outlines_like.fsm.compile import clear_caches
from outlines_like.fsm.grammar import CompiledGrammar
from outlines_like.fsm.regex_dfa import compile_regex
from tests.fsm import test_grammar as grammar_cases
from tests.fsm.test_grammar import VOCAB


def test_terminal_dfas_are_shared_and_read_only() -> None:
    clear_terminal_dfas()
    first = terminal_dfa("A", "re", "[0-9]+", ())
    assert terminal_dfa("B", "re", "[0-9]+", ()) is first  # the name plays no part
    assert terminal_dfa("C", "str", "[0-9]+", ()) is not first  # a literal of that text
    with pytest.raises(ValueError):
        first.transitions[0, 0] = 1
    expected = compile_regex("[0-9]+")
    np.testing.assert_array_equal(first.transitions[:-1], expected.transitions)
    np.testing.assert_array_equal(first.transitions[-1], -1)
    clear_caches()  # empties the memo too
    assert terminal_dfa("A", "re", "[0-9]+", ()) is not first


def test_errors_are_not_memoised_and_name_their_terminal() -> None:
    for name in ("FIRST", "SECOND"):
        with pytest.raises(UnsupportedConstraintError, match=name):
            terminal_dfa(name, "re", "a", ("s",))


# 70 literals and a regex in one context: more live terminals at its start than refinement takes
MANY_WORDS = "start: (w | NAME)+\nw: " + " | ".join(
    f'"{a}{b}x"' for a in "abcdefghij" for b in "klmnopq"
)
MANY_WORDS += '\nNAME: /[a-z]+y/\n%ignore " "\n'

# a JSON Schema's grammar in small: member names as literals beside a string regex they share
# prefixes with (never equal to one, so no retyping), and a free string value
MEMBERS = r"""
start: "{" [pair ("," pair)*] "}"
pair: NAME ":" VALUE | "\"alpha\"" ":" VALUE | "\"alps\"" ":" VALUE | "\"beta\"" ":" VALUE
NAME: /"[a-z]*[0-9]"/
VALUE: /"([^"\\]|\\.)*"/ | /-?[0-9]+/
%ignore /[ ]/
"""


@pytest.mark.parametrize(
    "grammar",
    [
        grammar_cases.JSON_LARK,
        grammar_cases.ARITH_LARK,
        grammar_cases.KEYWORDS,
        grammar_cases.PRIORITY,
        grammar_cases.LARK_TUTORIAL_JSON,
        grammar_cases.ARITH_WS,
        grammar_cases.REDUCE_REDUCE,
        MANY_WORDS,
        MEMBERS,
    ],
)
def test_context_builds_agree(grammar: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three ways to build a context (rows by partition refinement, by ``np.unique`` over
    the members' rows, and the compiled kernel where it applies) give the same context, state
    numbers included."""
    built: list[tuple[Any, ...]] = []
    hooks: list[Any] = [None]
    if _accel.available():
        from outlines_like.fsm import _accel_lexer

        hooks.append(lambda: _accel_lexer)

    def each(*args: Any, **kwargs: Any) -> ContextDFA:
        contexts = []
        # (the kernel's hook, the most members refinement takes, the most states the kernel
        # makes: past it, the Python build takes over)
        ways = [(None, 10**9, 1 << 13), (None, 0, 1 << 13)]
        ways += [(h, 10**9, most) for h in hooks[1:] for most in (1 << 13, 2)]
        for hook, refine_max, kernel_max in ways:
            monkeypatch.setattr(_grammar_lexer, "_kernels_hook", hook)
            monkeypatch.setattr(_grammar_lexer, "_REFINE_MAX", refine_max)
            monkeypatch.setattr(_grammar_lexer, "_KERNEL_MAX_STATES", kernel_max)
            contexts.append(build_context(*args, **kwargs))
        a = contexts[0]
        for b in contexts[1:]:
            np.testing.assert_array_equal(a.transitions, b.transitions)
            np.testing.assert_array_equal(a.winner, b.winner)
            np.testing.assert_array_equal(a.reach, b.reach)
            assert a.rows == b.rows
            np.testing.assert_array_equal(a.flat, b.flat)
        built.append(args[0])
        return a

    kernel_built: list[bool] = []
    compiled_context = _grammar_lexer._compiled_context

    def counted(*args: Any) -> Any:
        out = compiled_context(*args)
        kernel_built.append(out is not None)
        return out

    monkeypatch.setattr(_grammar_lexer, "_compiled_context", counted)
    monkeypatch.setattr(grammar_module, "build_context", each)
    compiled = CompiledGrammar(grammar, VOCAB)
    compiled.matcher().fill_bitmask(np.zeros((1, VOCAB.mask_words), dtype=np.int32))
    if isinstance(compiled._parser, LALRParser):
        for state in compiled._parser.actions:
            compiled._state_context(state)
    assert built
    if len(hooks) > 1 and grammar in (MEMBERS, MANY_WORDS, grammar_cases.JSON_LARK):
        assert any(kernel_built)  # the kernel's way was taken, not only the Python builds
