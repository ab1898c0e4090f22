"""Writers: the IR as EBNF (xgrammar), GBNF (llama.cpp) or Lark text."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal, TypeAlias

from outlines_like.types._charset import MAX_CODEPOINT
from outlines_like.types.grammars._ir import EMPTY, Alt, Class, Grammar, Lit, Node, Ref, Rep, Seq
from outlines_like.types.grammars._passes import one_char_terminals

Dialect: TypeAlias = Literal["ebnf", "gbnf", "lark"]


def _gbnf_char(point: int, in_class: bool) -> str:
    r"""One code point in GBNF/xgrammar syntax.

    Escapes use ``\\uNNNN``/``\\UNNNNNNNN`` only: both llama.cpp and xgrammar read exactly
    four/eight hex digits there, while xgrammar reads ``\\x`` greedily (``"\\x41B"`` would be
    one character), so ``\\x`` is never written.
    """
    ch = chr(point)
    simple = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    if ch in simple:
        return simple[ch]
    if in_class and ch in "[]":
        return "\\" + ch
    if in_class and ch in "-^":
        return f"\\u{point:04X}"
    if not in_class and ch == '"':
        return '\\"'
    if 0x20 <= point < 0x7F:
        return ch
    return f"\\u{point:04X}" if point <= 0xFFFF else f"\\U{point:08X}"


def _lark_char(point: int, in_regex: bool) -> str:
    """One code point inside a Lark string (``"..."``) or regex (``/.../``)."""
    ch = chr(point)
    simple = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    if ch in simple:
        return simple[ch]
    if in_regex and ch in "[]^-/":
        return "\\" + ch
    if not in_regex and ch == '"':
        return '\\"'
    if 0x20 <= point < 0x7F:
        return ch
    return f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"


def _class_body(klass: Class, char: Callable[[int], str]) -> str:
    parts = []
    for lo, hi in klass.ranges:
        if lo == hi:
            parts.append(char(lo))
        elif hi == lo + 1:
            parts.append(char(lo) + char(hi))
        else:
            parts.append(f"{char(lo)}-{char(hi)}")
    return ("^" if klass.negated else "") + "".join(parts)


class Writer:
    """Writes IR as EBNF (xgrammar), GBNF (llama.cpp) or Lark rule bodies."""

    def __init__(self, dialect: Dialect, names: dict[str, str]) -> None:
        self.dialect = dialect
        self.names = names

    def lit(self, text: str) -> str:
        if self.dialect == "lark":
            return '"' + "".join(_lark_char(ord(c), False) for c in text) + '"'
        return '"' + "".join(_gbnf_char(ord(c), False) for c in text) + '"'

    def klass(self, klass: Class) -> str:
        if self.dialect == "lark":
            if not klass.ranges and klass.negated:
                return "/[\\s\\S]/"
            return "/[" + _class_body(klass, lambda p: _lark_char(p, True)) + "]/"
        if not klass.ranges and klass.negated:
            return f"[{_gbnf_char(0, True)}-{_gbnf_char(MAX_CODEPOINT, True)}]"
        return "[" + _class_body(klass, lambda p: _gbnf_char(p, True)) + "]"

    def write(self, node: Node, prec: int = 0) -> str:
        """``prec``: 0 at top level or in an alternative, 1 in a sequence, 2 under a postfix."""
        if isinstance(node, Lit):
            return self.lit(node.text)
        if isinstance(node, Class):
            return self.klass(node)
        if isinstance(node, Ref):
            return self.names[node.name]
        if isinstance(node, Seq):
            if not node.items:
                # Lark has no empty terminal; an empty sequence there is an empty expansion.
                return "()" if self.dialect == "lark" else '""'
            text = " ".join(self.write(item, 1) for item in node.items)
            return f"({text})" if prec >= 2 else text
        if isinstance(node, Alt):
            text = " | ".join(self.write(item, 0) for item in node.items)
            return f"({text})" if prec >= 1 else text
        return self.repeat(node, prec)

    def repeat(self, node: Rep, prec: int) -> str:
        inner = self.write(node.item, 2)
        low, high = node.low, node.high
        if (low, high) == (0, None):
            text = inner + "*"
        elif (low, high) == (1, None):
            text = inner + "+"
        elif (low, high) == (0, 1):
            text = inner + "?"
        elif self.dialect == "lark":
            if high is None:
                text = f"{inner} ~ {low} {inner}*"
            elif low == high:
                text = f"{inner} ~ {low}"
            else:
                text = f"{inner} ~ {low}..{high}"
            return f"({text})" if prec >= 1 else text
        elif high is None:
            text = f"{inner}{{{low},}}"
        elif low == high:
            text = f"{inner}{{{low}}}"
        else:
            text = f"{inner}{{{low},{high}}}"
        return f"({text})" if prec >= 2 else text


def _rule_names(grammar: Grammar, dialect: Dialect) -> dict[str, str]:
    """Valid, unique names per dialect; the start rule becomes ``root`` (``start`` in Lark)."""
    start_name = "start" if dialect == "lark" else "root"
    taken = {start_name}
    names = {grammar.start: start_name}
    for name in grammar.rules:
        if name == grammar.start:
            continue
        if dialect == "lark":
            base = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
            base = base if base and base[0].isalpha() else "r_" + base
        elif dialect == "gbnf":
            base = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-") or "rule"
        else:
            base = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "rule"
            base = base if not base[0].isdigit() else "r_" + base
        candidate, n = base, 1
        while candidate in taken:
            n += 1
            candidate = f"{base}{'-' if dialect == 'gbnf' else '_'}{n}"
        taken.add(candidate)
        names[name] = candidate
    return names


def write_grammar(grammar: Grammar, dialect: Dialect, *, one_char: bool = False) -> str:
    if one_char:
        grammar = one_char_terminals(grammar)
    names = _rule_names(grammar, dialect)
    writer = Writer(dialect, names)
    order = [grammar.start] + [n for n in grammar.rules if n != grammar.start]
    sep = ": " if dialect == "lark" else " ::= "
    lines = []
    for name in order:
        body = grammar.rules[name]
        text = "" if dialect == "lark" and body == EMPTY else writer.write(body)
        lines.append(f"{names[name]}{sep}{text}".rstrip())
    return "\n".join(lines) + "\n"
