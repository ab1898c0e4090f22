"""EBNF/GBNF -> IR: the hand-written reader (errors name the line and column) and its converters."""

from __future__ import annotations

import re

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.types._charset import MAX_CODEPOINT
from outlines_like.types.grammars._ir import (
    Class,
    Grammar,
    Lit,
    Node,
    Ref,
    alt,
    make_class,
    rep,
    seq,
)
from outlines_like.types.grammars._passes import (
    reject_left_recursion,
    remove_immediate_left_recursion,
)
from outlines_like.types.grammars._write import write_grammar


class _EbnfParser:
    """Reads GBNF (llama.cpp) and xgrammar EBNF; errors name the line and column."""

    _NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
    _SPACE = re.compile(r"(?:[ \t\r\n]+|#[^\n]*)*")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.uses: dict[str, int] = {}

    def where(self, pos: int) -> tuple[int, int]:
        line = self.text.count("\n", 0, pos) + 1
        return line, pos - (self.text.rfind("\n", 0, pos) + 1) + 1

    def error(self, message: str, pos: int | None = None) -> InvalidConstraintError:
        pos = self.pos if pos is None else pos
        line, col = self.where(pos)
        source = self.text.splitlines()[line - 1] if self.text.splitlines() else ""
        if line > len(self.text.splitlines()):
            source = ""
        return InvalidConstraintError(
            f"EBNF syntax error at line {line} column {col}: {message}\n"
            f"  {source}\n  {' ' * (col - 1)}^"
        )

    def skip(self) -> None:
        m = self._SPACE.match(self.text, self.pos)
        self.pos = m.end() if m else self.pos

    def peek(self) -> str:
        return self.text[self.pos : self.pos + 1]

    def at_rule_start(self) -> bool:
        m = self._NAME.match(self.text, self.pos)
        if not m:
            return False
        after = self._SPACE.match(self.text, m.end())
        end = after.end() if after else m.end()
        return self.text.startswith("::=", end)

    def parse(self) -> Grammar:
        rules: dict[str, Node] = {}
        starts: dict[str, int] = {}
        self.skip()
        while self.pos < len(self.text):
            begin = self.pos
            m = self._NAME.match(self.text, self.pos)
            if not m:
                raise self.error(f"expected a rule name, found {self.found()}")
            name = m.group(0)
            self.pos = m.end()
            self.skip()
            if not self.text.startswith("::=", self.pos):
                raise self.error(
                    f"expected '::=' after the rule name {name!r}, found {self.found()}"
                )
            self.pos += 3
            if name in rules:
                line, col = self.where(starts[name])
                raise self.error(
                    f"rule {name!r} is defined twice (first at line {line} column {col})", begin
                )
            starts[name] = begin
            rules[name] = self.alternatives()
            self.skip()
        if not rules:
            raise InvalidConstraintError("EBNF grammar has no rules: it needs `root ::= ...`")
        if "root" not in rules:
            raise InvalidConstraintError(
                "EBNF grammar has no `root` rule: the start rule must be called root"
            )
        for name, pos in self.uses.items():
            if name not in rules:
                raise self.error(f"rule {name!r} is used but not defined", pos)
        return Grammar(rules, "root")

    def found(self) -> str:
        if self.pos >= len(self.text):
            return "the end of the text"
        return repr(self.text[self.pos : self.pos + 10].split("\n")[0] or "\n")

    def alternatives(self) -> Node:
        branches = [self.sequence()]
        self.skip()
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.sequence())
            self.skip()
        return alt(branches)

    def sequence(self) -> Node:
        items: list[Node] = []
        while True:
            self.skip()
            ch = self.peek()
            if not ch or ch in "|)" or self.at_rule_start():
                return seq(items)
            items.append(self.postfix(self.atom()))

    def atom(self) -> Node:
        ch = self.peek()
        if ch == '"':
            return self.string()
        if ch == "[":
            return self.char_class()
        if ch == ".":
            self.pos += 1
            return Class(((0x0A, 0x0A),), negated=True)
        if ch == "(":
            if self.text.startswith("(=", self.pos):
                raise UnsupportedConstraintError(
                    "EBNF lookahead assertions `(= ...)` at line "
                    f"{self.where(self.pos)[0]} cannot be converted; remove them"
                )
            self.pos += 1
            body = self.alternatives()
            self.skip()
            if self.peek() != ")":
                raise self.error(f"expected ')' to close the group, found {self.found()}")
            self.pos += 1
            return body
        m = self._NAME.match(self.text, self.pos)
        if m:
            self.uses.setdefault(m.group(0), self.pos)
            self.pos = m.end()
            return Ref(m.group(0))
        raise self.error(f"expected a string, a [class], a rule name or '(', found {self.found()}")

    def postfix(self, node: Node) -> Node:
        while True:
            ch = self.peek()
            if ch in ("*", "+", "?"):
                self.pos += 1
                node = rep(node, *{"*": (0, None), "+": (1, None), "?": (0, 1)}[ch])
            elif ch == "{":
                m = re.compile(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}").match(self.text, self.pos)
                if not m:
                    raise self.error("expected a repetition {m}, {m,} or {m,n}")
                low = int(m.group(1))
                high = low if m.group(2) is None else int(m.group(3)) if m.group(3) else None
                if high is not None and high < low:
                    raise self.error(f"repetition {m.group(0)} has its maximum below its minimum")
                self.pos = m.end()
                node = rep(node, low, high)
            else:
                return node

    def escape(self) -> int:
        """Read the escape after a backslash (``self.pos`` is on the backslash)."""
        start = self.pos
        self.pos += 1
        ch = self.peek()
        simple = {"n": 10, "t": 9, "r": 13, "\\": 92, '"': 34, "'": 39, "[": 91, "]": 93}
        simple.update({"-": 45, "^": 94, "/": 47, "f": 12, "v": 11, "0": 0})
        if ch in ("x", "u", "U"):
            width = {"x": 2, "u": 4, "U": 8}[ch]
            digits = self.text[self.pos + 1 : self.pos + 1 + width]
            if len(digits) != width or not re.fullmatch(r"[0-9A-Fa-f]+", digits):
                raise self.error(f"\\{ch} needs {width} hex digits", start)
            self.pos += 1 + width
            value = int(digits, 16)
            if value > MAX_CODEPOINT:
                raise self.error(f"code point {value:#x} is beyond U+10FFFF", start)
            return value
        if ch in simple:
            self.pos += 1
            return simple[ch]
        raise self.error(f"unknown escape \\{ch}" if ch else "unfinished escape", start)

    def string(self) -> Node:
        start = self.pos
        self.pos += 1
        chars: list[str] = []
        while True:
            ch = self.peek()
            if not ch or ch == "\n":
                raise self.error("unterminated string literal", start)
            if ch == '"':
                self.pos += 1
                return seq(Lit(c) for c in chars)
            if ch == "\\":
                chars.append(chr(self.escape()))
            else:
                chars.append(ch)
                self.pos += 1

    def class_char(self) -> int:
        ch = self.peek()
        if not ch or ch == "\n":
            raise self.error("unterminated character class")
        if ch == "\\":
            return self.escape()
        self.pos += 1
        return ord(ch)

    def char_class(self) -> Node:
        start = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            if not self.peek():
                raise self.error("unterminated character class", start)
            lo = self.class_char()
            hi = lo
            if self.peek() == "-" and self.text[self.pos + 1 : self.pos + 2] not in ("]", ""):
                self.pos += 1
                hi = self.class_char()
                if hi < lo:
                    raise self.error("character range is out of order", start)
            ranges.append((lo, hi))
        self.pos += 1
        if not ranges and not negated:
            raise self.error("empty character class [] matches nothing", start)
        return make_class(ranges, negated)


def ebnf_grammar(text: str) -> Grammar:
    if not isinstance(text, str):
        raise TypeError(f"grammar text must be a str, got {type(text).__name__}")
    return _EbnfParser(text).parse()


def validate_ebnf(text: str) -> None:
    """Check EBNF/GBNF syntax and that every used rule is defined and ``root`` exists.

    Raises:
        InvalidConstraintError: naming the line and column of the first problem.
    """
    ebnf_grammar(text)


def ebnf_to_lark(text: str, *, one_char_terminals: bool = False) -> str:
    """Convert GBNF (llama.cpp) or xgrammar EBNF to a Lark grammar with a ``start`` rule.

    Rule names become valid Lark names (``root`` -> ``start``, dashes -> underscores,
    lower case); character classes become one-character regex terminals, so that Lark's
    Earley parser (``lark.Lark(text, start="start")``) accepts exactly the EBNF's language;
    ``{m,n}`` becomes ``~ m..n``.

    Args:
        text: The EBNF or GBNF grammar.
        one_char_terminals: Split literals into characters and classes into disjoint pieces,
            so that no lexer has a choice to make: the text then means the EBNF's language
            under LALR and maximal-munch lexers too, not only under Earley. Without it, a
            lexer may reject strings the EBNF accepts (``"ab" | [a-z]{3}`` and ``abc``).
            The grammar gets larger and slower to compile for lexer-based engines.

    Raises:
        InvalidConstraintError: The EBNF is invalid (the message gives line and column).
        UnsupportedConstraintError: xgrammar lookahead assertions ``(= ...)``.
    """
    return write_grammar(ebnf_grammar(text), "lark", one_char=one_char_terminals)


def gbnf_to_ebnf(text: str) -> str:
    r"""Rewrite GBNF (or any EBNF this module reads) in xgrammar's dialect, for SGLang.

    xgrammar reads most GBNF as is, but not ``.``, ``\x`` escapes followed by a hex digit
    (it reads ``\x`` greedily) or rule names it does not allow; the rewrite spells those out.

    Raises:
        InvalidConstraintError: The grammar is invalid (line and column in the message).
        UnsupportedConstraintError: xgrammar lookahead assertions ``(= ...)``.
    """
    return write_grammar(ebnf_grammar(text), "ebnf")


def ebnf_to_gbnf(text: str) -> str:
    """Rewrite xgrammar EBNF (or GBNF) in llama.cpp's GBNF: names, escapes, no left recursion.

    Raises:
        InvalidConstraintError: The EBNF is invalid.
        UnsupportedConstraintError: The grammar is left-recursive in a way that cannot be
            rewritten as repetition.
    """
    grammar = remove_immediate_left_recursion(ebnf_grammar(text))
    reject_left_recursion(grammar)
    return write_grammar(grammar, "gbnf")
