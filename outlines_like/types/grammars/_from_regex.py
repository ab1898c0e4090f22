"""Regex -> IR (through the package's one regex reader) and the regex -> grammar writers."""

from __future__ import annotations

import re

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.types import _regex as rx
from outlines_like.types._charset import case_closure, complement
from outlines_like.types.grammars._ir import Class, Grammar, Lit, Node, alt, make_class, rep, seq
from outlines_like.types.grammars._write import Dialect, Writer, write_grammar


def regex_node(
    pattern: str, *, flags: int = 0, where: str = "regex", allow_lazy: bool = True
) -> Node:
    """Read ``pattern`` (Python's Unicode meaning of the class escapes) into the IR."""
    if not isinstance(pattern, str):
        raise TypeError(f"a regex pattern must be a str, got {type(pattern).__name__}")
    tree = rx.parse_regex(
        pattern,
        classes="unicode",
        flags=flags,
        inline_flags=True,
        strip_anchors=True,
        where=where,
    )
    return _Converter(pattern, where, allow_lazy).convert(tree)


def literal(point: int, flags: int) -> Node:
    """One literal character (its case variants under ``re.IGNORECASE``)."""
    if flags & re.IGNORECASE:
        klass = case_closure(((point, point),))
        if len(klass) > 1 or klass[0][0] != klass[0][1]:
            return Class(klass)
    return Lit(chr(point))


class _Converter:
    """Turns one read regex into the IR; ``where`` names it in error messages."""

    def __init__(self, pattern: str, where: str, allow_lazy: bool) -> None:
        self.pattern = pattern
        self.where = where
        self.allow_lazy = allow_lazy

    def fail(self, what: str, exc: type[Exception] = InvalidConstraintError) -> Exception:
        return exc(f"{self.where} {self.pattern!r}: {what} cannot be expressed in a grammar")

    def convert(self, node: rx.Node) -> Node:
        if isinstance(node, rx.Chars):
            ranges = node.ranges
            if not ranges:
                raise self.fail("a character class that matches no character")
            if len(ranges) == 1 and ranges[0][0] == ranges[0][1] and not node.negated:
                return Lit(chr(ranges[0][0]))
            if node.negated:  # keep the source's negation unless the positive form is shorter
                return make_class(complement(ranges), negated=True)
            return make_class(ranges)
        if isinstance(node, rx.Concat):
            return seq(self.convert(item) for item in node.items)
        if isinstance(node, rx.Alt):
            return alt(self.convert(item) for item in node.items)
        if isinstance(node, rx.Repeat):
            if node.mode == "lazy" and not self.allow_lazy:
                raise self.fail(
                    "a lazy quantifier (its shortest-match meaning for a lexer)",
                    UnsupportedConstraintError,
                )
            return rep(self.convert(node.item), node.low, node.high)
        # anchors are stripped and atomic groups refused by the reader
        raise self.fail(f"the regex construct {node!r}")


def regex_to_gbnf(pattern: str, rule_name: str = "root") -> str:
    r"""Convert a regex (Python syntax, full-match meaning) to a GBNF grammar.

    The output is also valid xgrammar EBNF. Anchors at the ends are dropped; ``\\d \\w \\s``
    and ``.`` become character classes with Python's (Unicode) meaning, or ASCII under
    ``(?a)``; ``(?i)`` is expanded into classes; lazy quantifiers are matched like greedy
    ones (same full-match language).

    Args:
        pattern: The regular expression.
        rule_name: The rule to define (``root`` when the regex is the whole grammar).

    Raises:
        InvalidConstraintError: The regex is invalid or uses what no grammar can express:
            lookarounds, backreferences, word boundaries, anchors in the middle, atomic
            groups and possessive quantifiers.
    """
    return _regex_grammar(pattern, rule_name, "gbnf")


def regex_to_ebnf(pattern: str, rule_name: str = "root") -> str:
    """Convert a regex to xgrammar EBNF (see ``regex_to_gbnf``)."""
    return _regex_grammar(pattern, rule_name, "ebnf")


def _regex_grammar(pattern: str, rule_name: str, dialect: Dialect) -> str:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", rule_name):
        raise ValueError(f"invalid rule name {rule_name!r}: use letters, digits, '-' or '_'")
    body = Writer(dialect, {}).write(regex_node(pattern))
    return f"{rule_name} ::= {body}\n"


def regex_to_lark(pattern: str, *, one_char_terminals: bool = False) -> str:
    """A Lark grammar whose ``start`` rule is the regex, written as Lark rules.

    The regex is converted structurally (not kept as one terminal) so that Lark's Earley
    parser accepts exactly the strings ``re.fullmatch`` accepts, whatever the greedy lexer
    would do. ``one_char_terminals``: as in ``ebnf_to_lark``.
    """
    grammar = Grammar({"root": regex_node(pattern)}, "root")
    return write_grammar(grammar, "lark", one_char=one_char_terminals)
