"""A request's grammar: `%import` from Lark's `common` only, resolved the same in any directory."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from outlines_like.fsm import Vocabulary, compile_constraint
from outlines_like.fsm.compile import clear_caches
from outlines_like.server.grammar_check import check_directives, check_grammar
from outlines_like.types import CFG

TOKENS = [bytes([b]) for b in range(32, 127)] + [b"<eos>"]
EOS = len(TOKENS) - 1


@pytest.mark.parametrize(
    "grammar",
    [
        "start: NUMBER\n%import common.NUMBER\n",
        "start: N\n%import common.SIGNED_INT -> N\n",
        "start: INT\n%import common (INT, WS)  // two at once\n%ignore WS\n",
        "start: INT\n  %import   common.INT\n",
    ],
)
def test_imports_from_common_pass(grammar: str) -> None:
    check_directives(CFG(grammar))
    check_grammar(CFG(grammar))


@pytest.mark.parametrize(
    ("grammar", "named"),
    [
        ("start: X\n%import secrets.X\n", "%import secrets.X "),
        ("start: X\n%import .common.X\n", "%import .common.X "),
        ("start: X\n%import ..up.X\n", "%import ..up.X "),
        ("start: X\n%import secrets (X, Y)\n", "%import secrets (X, Y) "),
        ("start: X\n%import common.sub.X\n", "%import common.sub.X "),
        ("start: X\n%import python.NAME\n", "%import python.NAME "),
        ("start: X\n%import X\n", "%import X "),
        ("start: X\n%import\n", "%import (nothing) "),
        ("start: X\n%declare X\n", "%declare is not allowed"),
    ],
)
def test_every_other_import_is_refused_by_name(grammar: str, named: str) -> None:
    for check in (check_directives, check_grammar):
        with pytest.raises(ValueError, match="not allowed in a request's grammar") as info:
            check(CFG(grammar))
        assert named in str(info.value)


def test_common_does_not_depend_on_the_working_directory(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grammar = CFG("start: NUMBER\n%import common.NUMBER\n")
    vocab = Vocabulary(TOKENS, [EOS])

    def first_mask() -> bytes:
        clear_caches()
        words = np.zeros(vocab.mask_words, dtype=np.int32)
        compile_constraint(grammar, vocab).matcher().fill_bitmask(words)
        return words.tobytes()

    expected = first_mask()
    # decoys where a lookup relative to the working directory would find them
    (tmp_path / "common.lark").write_text("NUMBER: /x+/\n")
    (tmp_path / "grammars").mkdir()
    (tmp_path / "grammars" / "common.lark").write_text("NUMBER: /x+/\n")
    monkeypatch.chdir(tmp_path)
    check_grammar(grammar)
    assert first_mask() == expected
    allowed = compile_constraint(grammar, vocab).matcher().allowed_token_ids().tolist()
    assert TOKENS.index(b"7") in allowed
    assert TOKENS.index(b"x") not in allowed
