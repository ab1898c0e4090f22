"""Grammar conversions between Lark, EBNF (xgrammar/SGLang), GBNF (llama.cpp) and regex.

Every function is pure: text in, text out. Conversions go through one small intermediate
form (literals, character classes, rule references, sequences, alternatives, bounded or
unbounded repetition), so each dialect has one reader and one writer:

- Lark is read by Lark itself (``lark.Lark(...)``): it resolves ``%import`` (the common
  terminals come from Lark's own ``grammars/common.lark``), templates, ``?rule``, aliases and
  priorities, and compiles every terminal to one regex; the rules come out as plain BNF.
- EBNF/GBNF is read by the hand-written parser below (errors name the line and column).
- Regexes are read by the package's one regex reader (:mod:`outlines_like.types._regex`).

What cannot be carried over faithfully raises: ``InvalidConstraintError`` for invalid input
and for regex features no grammar can express (lookarounds, backreferences, word
boundaries), ``UnsupportedConstraintError`` for valid features a target dialect lacks
(``%declare``, lazy quantifiers inside Lark terminals, left recursion in GBNF).

The conversion is scannerless: a grammar accepts every way of splitting the text into the
source's terminals, as Lark's ``lexer="dynamic_complete"`` does. Lark's default lexers
split greedily, so for grammars where greedy splitting rejects a string the converted
grammar may accept it (see ``docs/grammars.md``).

For the local masker, whose lexer is contextual and maximal-munch, ``ebnf_to_lexeme_lark``
writes EBNF/GBNF with the grammar's regular parts as real terminals where a check proves the
lexer then reads the same language, and one-character terminals elsewhere.

Modules: ``_ir`` (the intermediate form), ``_from_regex``, ``_lark`` and ``_ebnf`` (readers),
``_write`` (writers), ``_passes`` (rewrites and checks on the IR), ``_lexemes`` (EBNF for the
masker's lexer) and ``_automata`` (the checks it runs on the terminals).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from outlines_like.errors import InvalidConstraintError
from outlines_like.types.grammars._ebnf import (
    ebnf_to_gbnf,
    ebnf_to_lark,
    gbnf_to_ebnf,
    validate_ebnf,
)
from outlines_like.types.grammars._from_regex import regex_to_ebnf, regex_to_gbnf, regex_to_lark
from outlines_like.types.grammars._lark import lark_to_ebnf, lark_to_gbnf, validate_lark
from outlines_like.types.grammars._lexemes import ebnf_to_lexeme_lark

if TYPE_CHECKING:
    from outlines_like.types._terms import CFG

__all__ = [
    "check_grammar",
    "ebnf_to_gbnf",
    "ebnf_to_lark",
    "ebnf_to_lexeme_lark",
    "gbnf_to_ebnf",
    "lark_to_ebnf",
    "lark_to_gbnf",
    "regex_to_ebnf",
    "regex_to_gbnf",
    "regex_to_lark",
    "validate_ebnf",
    "validate_lark",
]


def check_grammar(cfg: CFG) -> None:
    """Check a ``CFG`` term: Lark text loads in Lark; EBNF parses and converts to Lark.

    Raises:
        InvalidConstraintError: The grammar is invalid, with the line, column and offending
            text where known.
        UnsupportedConstraintError: The EBNF uses a feature that cannot be converted.
    """
    # duck-typed: ``_terms`` (where CFG lives) imports this package, not the other way round
    if not (isinstance(getattr(cfg, "definition", None), str) and hasattr(cfg, "syntax")):
        raise TypeError(f"check_grammar takes a CFG, got {type(cfg).__name__}")
    if cfg.syntax == "lark":
        validate_lark(cfg.definition)
        return
    lark_text = ebnf_to_lark(cfg.definition)
    try:
        validate_lark(lark_text)
    except InvalidConstraintError as exc:  # a converter bug, not the user's: say so
        raise InvalidConstraintError(
            f"the EBNF grammar converted to Lark does not load ({exc}); please report this"
        ) from exc
