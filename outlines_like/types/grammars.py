"""Grammar conversions between Lark, EBNF (xgrammar/SGLang), GBNF (llama.cpp) and regex.

Every function is pure: text in, text out. Conversions go through one small intermediate
form (literals, character classes, rule references, sequences, alternatives, bounded or
unbounded repetition), so each dialect has one reader and one writer:

- Lark is read by Lark itself (``lark.Lark(...)``): it resolves ``%import`` (the common
  terminals come from Lark's own ``grammars/common.lark``), templates, ``?rule``, aliases and
  priorities, and compiles every terminal to one regex; the rules come out as plain BNF.
- EBNF/GBNF is read by the hand-written parser below (errors name the line and column).
- Regexes are read by Python's own regex parser (``re._parser``, wrapped in ``_parse_regex``).

What cannot be carried over faithfully raises: ``InvalidConstraintError`` for invalid input
and for regex features no grammar can express (lookarounds, backreferences, word
boundaries), ``UnsupportedConstraintError`` for valid features a target dialect lacks
(``%declare``, lazy quantifiers inside Lark terminals, left recursion in GBNF).

The conversion is scannerless: a grammar accepts every way of splitting the text into the
source's terminals, as Lark's ``lexer="dynamic_complete"`` does. Lark's default lexers
split greedily, so for grammars where greedy splitting rejects a string the converted
grammar may accept it (see ``docs/grammars.md``).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import importlib
import itertools
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, Literal, TypeAlias, cast

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.types._terms import CFG

__all__ = [
    "check_grammar",
    "ebnf_to_gbnf",
    "ebnf_to_lark",
    "gbnf_to_ebnf",
    "lark_to_ebnf",
    "lark_to_gbnf",
    "regex_to_ebnf",
    "regex_to_gbnf",
    "regex_to_lark",
    "validate_ebnf",
    "validate_lark",
]

_MAX_CODEPOINT: Final = 0x10FFFF

# --------------------------------------------------------------------------- the IR


@dataclasses.dataclass(frozen=True, slots=True)
class _Lit:
    """A literal string (never empty: the empty sequence stands for the empty string)."""

    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Class:
    """One character from ``ranges`` (inclusive code point pairs, sorted, disjoint)."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class _Ref:
    """A reference to a rule by its source name."""

    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Seq:
    """The items one after another; ``_Seq(())`` is the empty string."""

    items: tuple[_Node, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class _Alt:
    """Any one of the items."""

    items: tuple[_Node, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class _Rep:
    """The item between ``low`` and ``high`` times (``high=None``: unbounded)."""

    item: _Node
    low: int
    high: int | None


_Node: TypeAlias = _Lit | _Class | _Ref | _Seq | _Alt | _Rep
_EMPTY: Final = _Seq(())


@dataclasses.dataclass(slots=True)
class _Grammar:
    """Rules by source name, in order; ``start`` names the start rule."""

    rules: dict[str, _Node]
    start: str


def _seq(items: Iterable[_Node]) -> _Node:
    """A sequence, flattened, with adjacent literals merged."""
    flat: list[_Node] = []
    for item in items:
        parts = item.items if isinstance(item, _Seq) else (item,)
        for part in parts:
            if isinstance(part, _Lit) and flat and isinstance(flat[-1], _Lit):
                flat[-1] = _Lit(flat[-1].text + part.text)
            else:
                flat.append(part)
    return flat[0] if len(flat) == 1 else _Seq(tuple(flat))


def _alt(items: Iterable[_Node]) -> _Node:
    """An alternation, flattened and deduplicated; an empty branch makes the rest optional."""
    flat: list[_Node] = []
    has_empty = False
    for item in items:
        for part in item.items if isinstance(item, _Alt) else (item,):
            if part == _EMPTY:
                has_empty = True
            elif part not in flat:
                flat.append(part)
    if not flat:
        return _EMPTY
    body = flat[0] if len(flat) == 1 else _Alt(tuple(flat))
    return _rep(body, 0, 1) if has_empty else body


def _rep(item: _Node, low: int, high: int | None) -> _Node:
    """A repetition, simplified where that keeps the language."""
    if high == 0 or item == _EMPTY:
        return _EMPTY
    if low == 1 and high == 1:
        return item
    if isinstance(item, _Rep) and item.low == 0 and item.high == 1 and low == 0:
        # (x?)? == x?, (x?)* == x*, (x?){0,n} == x{0,n}
        return _Rep(item.item, 0, high)
    if isinstance(item, _Rep) and item.high is None and item.low <= 1 and low == 0:
        # (x*)? == (x+)? == (x*)* == x*
        return _Rep(item.item, 0, None)
    return _Rep(item, low, high)


# --------------------------------------------------------------------------- character sets


def _normalize(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def _complement(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= _MAX_CODEPOINT:
        out.append((nxt, _MAX_CODEPOINT))
    return tuple(out)


def _make_class(ranges: Iterable[tuple[int, int]], negated: bool = False) -> _Class:
    """A class in its shorter form: positive, or negated when that needs fewer ranges."""
    base = _normalize(ranges)
    other = _complement(base)
    if negated:  # keep the writer's negation unless the positive form is shorter
        return _Class(other) if len(other) < len(base) else _Class(base, negated=True)
    return _Class(other, negated=True) if base and len(other) < len(base) else _Class(base)


@functools.cache
def _unicode_category(escape: str) -> tuple[tuple[int, int], ...]:
    r"""The code points Python's ``re`` matches with ``escape`` (``\\d``, ``\\w``, ``\\s``)."""
    everything = "".join(map(chr, range(_MAX_CODEPOINT + 1)))
    return tuple((m.start(), m.end() - 1) for m in re.finditer(escape + "+", everything))


_ASCII_CATEGORIES: Final[dict[str, tuple[tuple[int, int], ...]]] = {
    r"\d": ((0x30, 0x39),),
    r"\w": ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
    r"\s": ((0x09, 0x0D), (0x20, 0x20)),
}

_CASE_ENUMERATION_LIMIT: Final = 0x4000


def _case_closure(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Add the other-case forms of the characters (Python's ``re.IGNORECASE``, approximately).

    Ranges up to ``_CASE_ENUMERATION_LIMIT`` code points are closed exactly under single-char
    ``lower``/``upper``; larger ranges get only their ASCII letters' counterparts.
    """
    extra: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if hi - lo <= _CASE_ENUMERATION_LIMIT:
            points: Iterable[int] = range(lo, hi + 1)
        else:
            points = [p for p in range(lo, min(hi, 0x7F) + 1)]
        for point in points:
            ch = chr(point)
            for other in (ch.lower(), ch.upper(), ch.casefold()):
                if len(other) == 1 and other != ch:
                    extra.append((ord(other), ord(other)))
    return _normalize((*ranges, *extra))


# --------------------------------------------------------------------------- regex -> IR

if sys.version_info >= (3, 11):
    import re._constants as _sre_c
    import re._parser as _sre_p
else:  # pragma: no cover - the project requires 3.11, kept for the standard-library move
    import sre_constants as _sre_c
    import sre_parse as _sre_p

_CATEGORY_ESCAPES: Final[dict[Any, tuple[str, bool]]] = {
    _sre_c.CATEGORY_DIGIT: (r"\d", False),
    _sre_c.CATEGORY_NOT_DIGIT: (r"\d", True),
    _sre_c.CATEGORY_SPACE: (r"\s", False),
    _sre_c.CATEGORY_NOT_SPACE: (r"\s", True),
    _sre_c.CATEGORY_WORD: (r"\w", False),
    _sre_c.CATEGORY_NOT_WORD: (r"\w", True),
}


def _parse_regex(pattern: str, flags: int) -> Any:
    """Parse with Python's own regex parser: the one place that touches ``re._parser``."""
    try:
        return _sre_p.parse(pattern, flags)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise InvalidConstraintError(f"invalid regex {pattern!r}{where}: {exc.msg}") from exc


class _RegexConverter:
    """Turns one parsed regex into the IR; ``where`` names it in error messages."""

    def __init__(self, pattern: str, where: str, *, allow_lazy: bool) -> None:
        self.pattern = pattern
        self.where = where
        self.allow_lazy = allow_lazy

    def fail(self, what: str, exc: type[Exception] = InvalidConstraintError) -> Exception:
        return exc(f"{self.where} {self.pattern!r}: {what} cannot be expressed in a grammar")

    def category(self, code: Any, flags: int) -> tuple[tuple[int, int], ...]:
        escape, negated = _CATEGORY_ESCAPES.get(code, ("", False))
        if not escape:
            raise self.fail(f"character category {code}")
        base = _ASCII_CATEGORIES[escape] if flags & re.ASCII else _unicode_category(escape)
        return _complement(base) if negated else base

    def char_set(self, items: list[tuple[Any, Any]], flags: int) -> _Class:
        ranges: list[tuple[int, int]] = []
        negated = False
        for op, av in items:
            if op is _sre_c.NEGATE:
                negated = True
            elif op is _sre_c.LITERAL:
                ranges.append((av, av))
            elif op is _sre_c.RANGE:
                ranges.append((av[0], av[1]))
            elif op is _sre_c.CATEGORY:
                ranges.extend(self.category(av, flags))
            else:
                raise self.fail(f"the class item {op}")
        closed = _normalize(ranges)
        if flags & re.IGNORECASE:
            closed = _case_closure(closed)
        klass = _make_class(closed, negated)
        if not klass.ranges and not klass.negated:
            raise self.fail("a character class that matches no character")
        return klass

    def literal(self, code: int, flags: int) -> _Node:
        if flags & re.IGNORECASE:
            klass = _case_closure(((code, code),))
            if len(klass) > 1 or klass[0][0] != klass[0][1]:
                return _Class(klass)
        return _Lit(chr(code))

    def convert(self, sub: Any, flags: int, at_start: bool, at_end: bool) -> _Node:
        items = list(sub)
        # Items before the first / after the last non-anchor still sit at the pattern's ends.
        solid = [i for i, (op, _) in enumerate(items) if op is not _sre_c.AT]
        head = solid[0] if solid else len(items)
        tail = solid[-1] if solid else -1
        out: list[_Node] = []
        for i, (op, av) in enumerate(items):
            first = at_start and i <= head
            last = at_end and i >= tail
            out.append(self.item(op, av, flags, first, last))
        return _seq(out)

    def item(self, op: Any, av: Any, flags: int, first: bool, last: bool) -> _Node:
        c = _sre_c
        if op is c.LITERAL:
            return self.literal(av, flags)
        if op is c.NOT_LITERAL:
            return self.char_set([(c.NEGATE, None), (c.LITERAL, av)], flags)
        if op is c.ANY:
            if flags & re.DOTALL:
                return _Class(((0, _MAX_CODEPOINT),))
            return _Class(((0x0A, 0x0A),), negated=True)
        if op is c.IN:
            return self.char_set(list(av), flags)
        if op is c.CATEGORY:
            return _make_class(self.category(av, flags))
        if op is c.BRANCH:
            return _alt(self.convert(branch, flags, first, last) for branch in av[1])
        if op is c.SUBPATTERN:
            _group, add_flags, del_flags, body = av
            return self.convert(body, (flags | add_flags) & ~del_flags, first, last)
        if op is c.MAX_REPEAT or op is c.MIN_REPEAT:
            if op is c.MIN_REPEAT and not self.allow_lazy:
                raise self.fail(
                    "a lazy quantifier (its shortest-match meaning for a lexer)",
                    UnsupportedConstraintError,
                )
            low, high, body = av
            inner = self.convert(body, flags, False, False)
            return _rep(inner, low, None if high == c.MAXREPEAT else high)
        if op is c.AT:
            if first and av in (c.AT_BEGINNING, c.AT_BEGINNING_STRING):
                return _EMPTY
            if last and av in (c.AT_END, c.AT_END_STRING):
                return _EMPTY
            if av in (c.AT_BOUNDARY, c.AT_NON_BOUNDARY):
                raise self.fail("a word boundary (\\b, \\B)")
            raise self.fail("an anchor (^, $, \\A, \\Z) inside the pattern")
        if op in (c.ASSERT, c.ASSERT_NOT):
            raise self.fail("a lookahead or lookbehind assertion")
        if op in (c.GROUPREF, c.GROUPREF_EXISTS):
            raise self.fail("a backreference")
        names = {
            getattr(c, "POSSESSIVE_REPEAT", None): "a possessive quantifier",
            getattr(c, "ATOMIC_GROUP", None): "an atomic group",
        }
        raise self.fail(names.get(op, f"the regex construct {op}"))


def _regex_node(
    pattern: str, *, flags: int = 0, where: str = "regex", allow_lazy: bool = True
) -> _Node:
    if not isinstance(pattern, str):
        raise TypeError(f"a regex pattern must be a str, got {type(pattern).__name__}")
    parsed = _parse_regex(pattern, flags)
    converter = _RegexConverter(pattern, where, allow_lazy=allow_lazy)
    return converter.convert(parsed, parsed.state.flags | flags, True, True)


# --------------------------------------------------------------------------- writers


_Dialect: TypeAlias = Literal["ebnf", "gbnf", "lark"]


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


def _class_body(klass: _Class, char: Callable[[int], str]) -> str:
    parts = []
    for lo, hi in klass.ranges:
        if lo == hi:
            parts.append(char(lo))
        elif hi == lo + 1:
            parts.append(char(lo) + char(hi))
        else:
            parts.append(f"{char(lo)}-{char(hi)}")
    return ("^" if klass.negated else "") + "".join(parts)


class _Writer:
    """Writes IR as EBNF (xgrammar), GBNF (llama.cpp) or Lark rule bodies."""

    def __init__(self, dialect: _Dialect, names: dict[str, str]) -> None:
        self.dialect = dialect
        self.names = names

    def lit(self, text: str) -> str:
        if self.dialect == "lark":
            return '"' + "".join(_lark_char(ord(c), False) for c in text) + '"'
        return '"' + "".join(_gbnf_char(ord(c), False) for c in text) + '"'

    def klass(self, klass: _Class) -> str:
        if self.dialect == "lark":
            if not klass.ranges and klass.negated:
                return "/[\\s\\S]/"
            return "/[" + _class_body(klass, lambda p: _lark_char(p, True)) + "]/"
        if not klass.ranges and klass.negated:
            return f"[{_gbnf_char(0, True)}-{_gbnf_char(_MAX_CODEPOINT, True)}]"
        return "[" + _class_body(klass, lambda p: _gbnf_char(p, True)) + "]"

    def write(self, node: _Node, prec: int = 0) -> str:
        """``prec``: 0 at top level or in an alternative, 1 in a sequence, 2 under a postfix."""
        if isinstance(node, _Lit):
            return self.lit(node.text)
        if isinstance(node, _Class):
            return self.klass(node)
        if isinstance(node, _Ref):
            return self.names[node.name]
        if isinstance(node, _Seq):
            if not node.items:
                # Lark has no empty terminal; an empty sequence there is an empty expansion.
                return "()" if self.dialect == "lark" else '""'
            text = " ".join(self.write(item, 1) for item in node.items)
            return f"({text})" if prec >= 2 else text
        if isinstance(node, _Alt):
            text = " | ".join(self.write(item, 0) for item in node.items)
            return f"({text})" if prec >= 1 else text
        return self.repeat(node, prec)

    def repeat(self, node: _Rep, prec: int) -> str:
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


def _rule_names(grammar: _Grammar, dialect: _Dialect) -> dict[str, str]:
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


def _write_grammar(grammar: _Grammar, dialect: _Dialect, *, one_char: bool = False) -> str:
    if one_char:
        grammar = _one_char_terminals(grammar)
    names = _rule_names(grammar, dialect)
    writer = _Writer(dialect, names)
    order = [grammar.start] + [n for n in grammar.rules if n != grammar.start]
    sep = ": " if dialect == "lark" else " ::= "
    lines = []
    for name in order:
        body = grammar.rules[name]
        text = "" if dialect == "lark" and body == _EMPTY else writer.write(body)
        lines.append(f"{names[name]}{sep}{text}".rstrip())
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- grammar passes


def _char_sets(node: _Node, out: set[tuple[tuple[int, int], ...]]) -> None:
    """Collect every character set the grammar reads (each literal character is one)."""
    if isinstance(node, _Lit):
        out.update(((ord(c), ord(c)),) for c in node.text)
    elif isinstance(node, _Class):
        out.add(_complement(node.ranges) if node.negated else node.ranges)
    elif isinstance(node, (_Seq, _Alt)):
        for item in node.items:
            _char_sets(item, out)
    elif isinstance(node, _Rep):
        _char_sets(node.item, out)


def _atoms(
    sets: Iterable[tuple[tuple[int, int], ...]],
) -> dict[tuple[tuple[int, int], ...], list[tuple[tuple[int, int], ...]]]:
    """Split the sets into disjoint atoms: each set -> the atoms whose union it is.

    Two characters share an atom when exactly the same sets contain them (partition
    refinement over the sets' range boundaries).
    """
    unique = sorted(set(sets))
    bounds = sorted({b for ranges in unique for lo, hi in ranges for b in (lo, hi + 1)})
    starts = [[lo for lo, _ in ranges] for ranges in unique]
    by_signature: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for lo, nxt in itertools.pairwise(bounds):
        signature = tuple(
            k
            for k, ranges in enumerate(unique)
            if (i := bisect.bisect_right(starts[k], lo) - 1) >= 0 and ranges[i][1] >= lo
        )
        if signature:
            by_signature.setdefault(signature, []).append((lo, nxt - 1))
    result: dict[tuple[tuple[int, int], ...], list[tuple[tuple[int, int], ...]]] = {
        ranges: [] for ranges in unique
    }
    for signature, pieces in by_signature.items():
        atom = _normalize(pieces)
        for k in signature:
            result[unique[k]].append(atom)
    return result


def _one_char_terminals(grammar: _Grammar) -> _Grammar:
    """Rewrite the grammar so that every terminal is one character and no two overlap.

    A lexer then has nothing to choose: every lexeme is one character and exactly one
    terminal matches it. So the Lark text means the same under Earley, under LALR with
    Lark's contextual lexer, and under any maximal-munch lexer (the local masker's): EBNF is
    scannerless, and ``"ab" | [a-z]{3}`` must accept ``abc`` whatever a lexer would prefer.
    """
    sets: set[tuple[tuple[int, int], ...]] = set()
    for body in grammar.rules.values():
        _char_sets(body, sets)
    atoms = _atoms(sets)

    def atom_node(atom: tuple[tuple[int, int], ...]) -> _Node:
        if len(atom) == 1 and atom[0][0] == atom[0][1]:
            return _Lit(chr(atom[0][0]))
        return _make_class(atom)

    def rewrite(node: _Node) -> _Node:
        if isinstance(node, _Lit):
            chars = tuple(_Lit(c) for c in node.text)
            return chars[0] if len(chars) == 1 else _Seq(chars)
        if isinstance(node, _Class):
            ranges = _complement(node.ranges) if node.negated else node.ranges
            pieces = [atom_node(a) for a in atoms[ranges]]
            return pieces[0] if len(pieces) == 1 else _Alt(tuple(pieces))
        if isinstance(node, _Seq):
            return _Seq(tuple(rewrite(i) for i in node.items))
        if isinstance(node, _Alt):
            return _Alt(tuple(rewrite(i) for i in node.items))
        if isinstance(node, _Rep):
            return _Rep(rewrite(node.item), node.low, node.high)
        return node

    return _Grammar({n: rewrite(b) for n, b in grammar.rules.items()}, grammar.start)


def _refs(node: _Node) -> Iterator[str]:
    if isinstance(node, _Ref):
        yield node.name
    elif isinstance(node, (_Seq, _Alt)):
        for item in node.items:
            yield from _refs(item)
    elif isinstance(node, _Rep):
        yield from _refs(node.item)


def _substitute(node: _Node, table: Mapping[str, _Node]) -> _Node:
    if isinstance(node, _Ref):
        return table.get(node.name, node)
    if isinstance(node, _Seq):
        return _seq(_substitute(i, table) for i in node.items)
    if isinstance(node, _Alt):
        return _alt(_substitute(i, table) for i in node.items)
    if isinstance(node, _Rep):
        return _rep(_substitute(node.item, table), node.low, node.high)
    return node


def _prune(grammar: _Grammar) -> _Grammar:
    """Drop the rules the start rule cannot reach."""
    seen = {grammar.start}
    todo = [grammar.start]
    while todo:
        for ref in _refs(grammar.rules[todo.pop()]):
            if ref not in seen:
                seen.add(ref)
                todo.append(ref)
    return _Grammar({k: v for k, v in grammar.rules.items() if k in seen}, grammar.start)


def _remove_immediate_left_recursion(grammar: _Grammar) -> _Grammar:
    """Rewrite ``a: a x | a y | b | c`` as ``a: (b | c) (x | y)*``: same language."""
    rules = dict(grammar.rules)
    for name, body in rules.items():
        branches = body.items if isinstance(body, _Alt) else (body,)
        tails: list[_Node] = []
        heads: list[_Node] = []
        for branch in branches:
            parts = branch.items if isinstance(branch, _Seq) else (branch,)
            if parts and parts[0] == _Ref(name):
                if len(parts) > 1:
                    tails.append(_seq(parts[1:]))
            else:
                heads.append(branch)
        if tails and heads:
            rules[name] = _seq([_alt(heads), _rep(_alt(tails), 0, None)])
    return _Grammar(rules, grammar.start)


def _nullable(grammar: _Grammar) -> set[str]:
    nullable: set[str] = set()

    def can_be_empty(node: _Node) -> bool:
        if isinstance(node, _Ref):
            return node.name in nullable
        if isinstance(node, _Seq):
            return all(can_be_empty(i) for i in node.items)
        if isinstance(node, _Alt):
            return any(can_be_empty(i) for i in node.items)
        if isinstance(node, _Rep):
            return node.low == 0 or can_be_empty(node.item)
        return False

    changed = True
    while changed:
        changed = False
        for name, body in grammar.rules.items():
            if name not in nullable and can_be_empty(body):
                nullable.add(name)
                changed = True
    return nullable


def _left_refs(node: _Node, nullable: set[str]) -> tuple[set[str], bool]:
    """Rules that can start ``node``, and whether ``node`` can match the empty string."""
    if isinstance(node, _Ref):
        return {node.name}, node.name in nullable
    if isinstance(node, _Seq):
        out: set[str] = set()
        for item in node.items:
            refs, empty = _left_refs(item, nullable)
            out |= refs
            if not empty:
                return out, False
        return out, True
    if isinstance(node, _Alt):
        out, any_empty = set(), False
        for item in node.items:
            refs, empty = _left_refs(item, nullable)
            out |= refs
            any_empty = any_empty or empty
        return out, any_empty
    if isinstance(node, _Rep):
        refs, empty = _left_refs(node.item, nullable)
        return refs, empty or node.low == 0
    return set(), False


def _find_left_recursion(grammar: _Grammar) -> list[str] | None:
    """A left-recursive cycle of rule names, or None."""
    nullable = _nullable(grammar)
    edges = {n: _left_refs(body, nullable)[0] for n, body in grammar.rules.items()}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for nxt in sorted(edges.get(name, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[name] = 2
        return None

    for name in grammar.rules:
        if name not in state:
            found = visit(name)
            if found:
                return found
    return None


# --------------------------------------------------------------------------- Lark -> IR

# Terminals of Lark's common.lark that rely on lazy matching or lookbehind: their lexer
# meaning (shortest match) written as plain regexes with the same tokens.
_LARK_REGEX_REWRITES: Final[dict[str, str]] = {
    # ESCAPED_STRING: a quote, then escapes or non-quote characters, no newline, a quote.
    r'".*?(?<!\\)(\\\\)*?"': r'"(?:[^"\\\n]|\\[^\n])*"',
    # C_COMMENT: /* ... */ ending at the first */.
    r"/\*(.|\n)*?\*/": r"/\*(?:[^*]|\*+[^*/])*\*+/",
}

_LARK_FLAGS: Final[dict[str, int]] = {
    "i": re.IGNORECASE,
    "s": re.DOTALL,
    "m": re.MULTILINE,
    "x": re.VERBOSE,
    "u": re.UNICODE,
    "l": re.LOCALE,
}

_IGNORE_RULE: Final = "__ignored"


_LARK_LITERALS: Final = re.compile(r'"(?:[^"\\\n]|\\.)*"|/(?:[^/\\\n]|\\.)+/|//[^\n]*')


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _find_use(text: str, word: str) -> int | None:
    """Offset of the first use of ``word`` outside strings, regexes and comments."""
    masked = _LARK_LITERALS.sub(lambda m: " " * len(m.group(0)), text)
    use = re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", masked)
    return use.start() if use else None


def _lark_error(text: str, exc: Exception) -> InvalidConstraintError:
    """Translate a Lark error about grammar text, adding the line, column and offending text."""
    message = str(exc).strip()
    line = getattr(exc, "line", None)
    column = getattr(exc, "column", None)
    offset: int | None = None
    if isinstance(exc, _regex_errors()):
        pattern = getattr(exc, "pattern", None)
        message = f"invalid regex /{pattern}/: {getattr(exc, 'msg', exc)}"
        found_at = text.find(f"/{pattern}/") if isinstance(pattern, str) else -1
        pos = getattr(exc, "pos", None)
        offset = found_at + 1 + (pos or 0) if found_at >= 0 else None
    elif isinstance(exc, OSError):
        missing = getattr(exc, "filename", None) or "?"
        module = str(missing).rsplit("/", 1)[-1].removesuffix(".lark")
        message = (
            f"%import of a grammar that does not exist: {module!r} (Lark's bundled grammars, "
            "such as common, can be imported)"
        )
        found_at = text.find(f"%import {module}")
        offset = found_at if found_at >= 0 else None
    elif not isinstance(line, int) or line < 1:
        found = re.search(r"at line (\d+),? column (\d+)", message)
        if found:
            line, column = int(found.group(1)), int(found.group(2))
            message = "unexpected input"
        else:
            # "Rule 'a' used but not defined", "Terminals {'B'} ...": point at the first use.
            quoted = re.search(r"'([^']+)'", message)
            offset = _find_use(text, quoted.group(1)) if quoted else None
    if offset is not None:
        line, column = _position(text, offset)
    first = message.splitlines()[0] if message else type(exc).__name__
    if isinstance(line, int) and line >= 1:
        lines = text.splitlines()
        source = lines[line - 1] if line <= len(lines) else ""
        col = column if isinstance(column, int) and column >= 1 else 1
        caret = " " * (col - 1) + "^"
        return InvalidConstraintError(
            f"invalid Lark grammar at line {line} column {col}: {first}\n  {source}\n  {caret}"
        )
    return InvalidConstraintError(f"invalid Lark grammar: {first}")


@functools.cache
def _regex_errors() -> tuple[type[Exception], ...]:
    """``re.error``, and ``regex.error`` when Lark uses the ``regex`` module (installed)."""
    try:
        regex = importlib.import_module("regex")
    except ImportError:
        return (re.error,)
    return (re.error, cast("type[Exception]", regex.error))


def _load_lark(text: str, start: str) -> Any:
    if not isinstance(text, str):
        raise TypeError(f"grammar text must be a str, got {type(text).__name__}")
    import lark

    errors: tuple[type[Exception], ...] = (lark.exceptions.LarkError, OSError, *_regex_errors())
    try:
        return lark.Lark(text, start=start, parser="earley", lexer="dynamic")
    except errors as exc:
        # OSError: an %import of a grammar file that is not there.
        raise _lark_error(text, exc) from exc


def validate_lark(text: str, *, start: str = "start") -> None:
    """Check that ``text`` is a valid Lark grammar (loaded with Lark's Earley parser).

    Raises:
        InvalidConstraintError: The grammar is invalid; the message gives the line, the
            column and the offending text where Lark knows them.
    """
    _load_lark(text, start)


def _terminal_node(definition: Any) -> _Node:
    pattern = definition.pattern
    flags = 0
    for flag in pattern.flags:
        flags |= _LARK_FLAGS.get(flag, 0)
    where = f"Lark terminal {definition.name}"
    if type(pattern).__name__ == "PatternStr":
        value: str = pattern.value
        if flags & re.IGNORECASE:
            converter = _RegexConverter(value, where, allow_lazy=False)
            return _seq(converter.literal(ord(ch), flags) for ch in value)
        return _seq(_Lit(ch) for ch in value)
    regex: str = pattern.value
    for bad, good in _LARK_REGEX_REWRITES.items():
        regex = regex.replace(bad, f"(?:{good})")
    return _regex_node(regex, flags=flags, where=where, allow_lazy=False)


def _lark_grammar(text: str, start: str) -> _Grammar:
    parser = _load_lark(text, start)
    terminals = {t.name: t for t in parser.terminals}
    by_origin: dict[str, list[_Seq]] = {}
    used_terminals: set[str] = set()
    for rule in parser.rules:
        symbols = []
        for sym in rule.expansion:
            if sym.is_term:
                if sym.name not in terminals:
                    raise UnsupportedConstraintError(
                        f"Lark terminal {sym.name} has no definition (%declare is for custom "
                        "lexers and cannot be converted); define it with a string or a regex"
                    )
                used_terminals.add(sym.name)
            symbols.append(_Ref(sym.name))
        by_origin.setdefault(str(rule.origin.name), []).append(_Seq(tuple(symbols)))
    ignore = [name for name in parser.ignore_tokens if name in terminals]
    used_terminals.update(ignore)

    rules: dict[str, _Node] = {}
    ign = _Ref(_IGNORE_RULE) if ignore else None
    for origin, branches in by_origin.items():
        if ign is not None:
            spaced = []
            for branch in branches:
                items: list[_Node] = []
                for k, item in enumerate(branch.items):
                    if k:
                        items.append(ign)
                    items.append(item)
                spaced.append(_Seq(tuple(items)))
            branches = spaced
        rules[origin] = _alt(branches)
    for name in sorted(used_terminals, key=list(terminals).index):
        rules[name] = _terminal_node(terminals[name])
    start_name = start
    if ign is not None:
        # (x+ | y)* is (x | y)*: unwrapping the "+" keeps the language and spares engines
        # that track every parse (llama.cpp) the ambiguity of (x+)*.
        pieces = []
        for n in ignore:
            node = rules[n]
            pieces.append(node.item if isinstance(node, _Rep) and node.low <= 1 else _Ref(n))
        rules[_IGNORE_RULE] = _rep(_alt(pieces), 0, None)
        start_name = "__start_with_ignored"
        while start_name in rules:
            start_name += "_"
        rules = {start_name: _seq([ign, _Ref(start), ign]), **rules}
    grammar = _remove_immediate_left_recursion(_Grammar(rules, start_name))
    # Inline terminals that are a literal or one character class (Lark's LPAR, PLUS, ...):
    # the output reads like hand-written EBNF.
    inline = {
        n: body
        for n, body in grammar.rules.items()
        if n in terminals and isinstance(body, (_Lit, _Class))
    }
    rules = {n: _substitute(b, inline) for n, b in grammar.rules.items() if n not in inline}
    return _prune(_Grammar(rules, grammar.start))


def lark_to_ebnf(text: str, *, start: str = "start") -> str:
    """Convert a Lark grammar to EBNF in xgrammar's dialect (what SGLang's ``ebnf`` takes).

    ``%import`` of Lark's common terminals, templates, ``?rule``, aliases and priorities are
    handled (the last three do not change the language); ``%ignore`` becomes an optional
    ``(ignored)*`` rule between every two symbols and around the start rule; immediate
    left recursion is rewritten as repetition.

    Raises:
        InvalidConstraintError: The Lark grammar is invalid, or a terminal uses a regex
            feature no grammar can express (lookaround, backreference).
        UnsupportedConstraintError: ``%declare``d terminals, lazy quantifiers in terminals.
    """
    return _write_grammar(_lark_grammar(text, start), "ebnf")


def lark_to_gbnf(text: str, *, start: str = "start") -> str:
    """Convert a Lark grammar to llama.cpp's GBNF (rule names with dashes, ``root`` start).

    Same handling as ``lark_to_ebnf``. llama.cpp refuses left-recursive grammars: immediate
    left recursion is rewritten as repetition, and any other left-recursive cycle raises
    ``UnsupportedConstraintError`` naming the rules.
    """
    grammar = _lark_grammar(text, start)
    _reject_left_recursion(grammar)
    return _write_grammar(grammar, "gbnf")


def _reject_left_recursion(grammar: _Grammar) -> None:
    cycle = _find_left_recursion(grammar)
    if cycle:
        raise UnsupportedConstraintError(
            "GBNF (llama.cpp) cannot take left recursion, found through the rules "
            + " -> ".join(cycle)
            + '; rewrite it with repetition, e.g. `expr: term ("+" term)*`'
        )


# --------------------------------------------------------------------------- regex -> grammar


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


def _regex_grammar(pattern: str, rule_name: str, dialect: _Dialect) -> str:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", rule_name):
        raise ValueError(f"invalid rule name {rule_name!r}: use letters, digits, '-' or '_'")
    body = _Writer(dialect, {}).write(_regex_node(pattern))
    return f"{rule_name} ::= {body}\n"


def regex_to_lark(pattern: str, *, one_char_terminals: bool = False) -> str:
    """A Lark grammar whose ``start`` rule is the regex, written as Lark rules.

    The regex is converted structurally (not kept as one terminal) so that Lark's Earley
    parser accepts exactly the strings ``re.fullmatch`` accepts, whatever the greedy lexer
    would do. ``one_char_terminals``: as in ``ebnf_to_lark``.
    """
    grammar = _Grammar({"root": _regex_node(pattern)}, "root")
    return _write_grammar(grammar, "lark", one_char=one_char_terminals)


# --------------------------------------------------------------------------- EBNF/GBNF -> IR


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

    def parse(self) -> _Grammar:
        rules: dict[str, _Node] = {}
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
        return _Grammar(rules, "root")

    def found(self) -> str:
        if self.pos >= len(self.text):
            return "the end of the text"
        return repr(self.text[self.pos : self.pos + 10].split("\n")[0] or "\n")

    def alternatives(self) -> _Node:
        branches = [self.sequence()]
        self.skip()
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.sequence())
            self.skip()
        return _alt(branches)

    def sequence(self) -> _Node:
        items: list[_Node] = []
        while True:
            self.skip()
            ch = self.peek()
            if not ch or ch in "|)" or self.at_rule_start():
                return _seq(items)
            items.append(self.postfix(self.atom()))

    def atom(self) -> _Node:
        ch = self.peek()
        if ch == '"':
            return self.string()
        if ch == "[":
            return self.char_class()
        if ch == ".":
            self.pos += 1
            return _Class(((0x0A, 0x0A),), negated=True)
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
            return _Ref(m.group(0))
        raise self.error(f"expected a string, a [class], a rule name or '(', found {self.found()}")

    def postfix(self, node: _Node) -> _Node:
        while True:
            ch = self.peek()
            if ch in ("*", "+", "?"):
                self.pos += 1
                node = _rep(node, *{"*": (0, None), "+": (1, None), "?": (0, 1)}[ch])
            elif ch == "{":
                m = re.compile(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}").match(self.text, self.pos)
                if not m:
                    raise self.error("expected a repetition {m}, {m,} or {m,n}")
                low = int(m.group(1))
                high = low if m.group(2) is None else int(m.group(3)) if m.group(3) else None
                if high is not None and high < low:
                    raise self.error(f"repetition {m.group(0)} has its maximum below its minimum")
                self.pos = m.end()
                node = _rep(node, low, high)
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
            if value > _MAX_CODEPOINT:
                raise self.error(f"code point {value:#x} is beyond U+10FFFF", start)
            return value
        if ch in simple:
            self.pos += 1
            return simple[ch]
        raise self.error(f"unknown escape \\{ch}" if ch else "unfinished escape", start)

    def string(self) -> _Node:
        start = self.pos
        self.pos += 1
        chars: list[str] = []
        while True:
            ch = self.peek()
            if not ch or ch == "\n":
                raise self.error("unterminated string literal", start)
            if ch == '"':
                self.pos += 1
                return _seq(_Lit(c) for c in chars)
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

    def char_class(self) -> _Node:
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
        return _make_class(ranges, negated)


def _ebnf_grammar(text: str) -> _Grammar:
    if not isinstance(text, str):
        raise TypeError(f"grammar text must be a str, got {type(text).__name__}")
    return _EbnfParser(text).parse()


def validate_ebnf(text: str) -> None:
    """Check EBNF/GBNF syntax and that every used rule is defined and ``root`` exists.

    Raises:
        InvalidConstraintError: naming the line and column of the first problem.
    """
    _ebnf_grammar(text)


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
    return _write_grammar(_ebnf_grammar(text), "lark", one_char=one_char_terminals)


def gbnf_to_ebnf(text: str) -> str:
    r"""Rewrite GBNF (or any EBNF this module reads) in xgrammar's dialect, for SGLang.

    xgrammar reads most GBNF as is, but not ``.``, ``\x`` escapes followed by a hex digit
    (it reads ``\x`` greedily) or rule names it does not allow; the rewrite spells those out.

    Raises:
        InvalidConstraintError: The grammar is invalid (line and column in the message).
        UnsupportedConstraintError: xgrammar lookahead assertions ``(= ...)``.
    """
    return _write_grammar(_ebnf_grammar(text), "ebnf")


def ebnf_to_gbnf(text: str) -> str:
    """Rewrite xgrammar EBNF (or GBNF) in llama.cpp's GBNF: names, escapes, no left recursion.

    Raises:
        InvalidConstraintError: The EBNF is invalid.
        UnsupportedConstraintError: The grammar is left-recursive in a way that cannot be
            rewritten as repetition.
    """
    grammar = _remove_immediate_left_recursion(_ebnf_grammar(text))
    _reject_left_recursion(grammar)
    return _write_grammar(grammar, "gbnf")


def check_grammar(cfg: CFG) -> None:
    """Check a ``CFG`` term: Lark text loads in Lark; EBNF parses and converts to Lark.

    Raises:
        InvalidConstraintError: The grammar is invalid, with the line, column and offending
            text where known.
        UnsupportedConstraintError: The EBNF uses a feature that cannot be converted.
    """
    if not isinstance(cfg, CFG):
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
