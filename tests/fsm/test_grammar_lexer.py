"""The grammar lexer's terminal DFAs: the process-wide memo."""

from __future__ import annotations

import numpy as np
import pytest

from outlines_like.errors import UnsupportedConstraintError
from outlines_like.fsm._grammar_lexer import clear_terminal_dfas, terminal_dfa
from outlines_like.fsm.compile import clear_caches
from outlines_like.fsm.regex_dfa import compile_regex


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
