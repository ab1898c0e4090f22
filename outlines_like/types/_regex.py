r"""The one regex reader: a pattern (Python ``re`` syntax) -> a small typed tree, in linear time.

The masker builds its automata from this tree, the grammar converters write it as rules and
the JSON Schema compiler rewrites ``pattern`` keywords through it. Character classes come out
as code-point sets (:mod:`outlines_like.types._charset`), read in one of its class tables
(``\d`` ASCII for the masker, Unicode for grammars, ECMA-262 for JSON Schema), with
``re.IGNORECASE``, ``re.DOTALL`` and ``re.ASCII`` (given as ``flags`` or inline, where the
caller allows inline flags) already applied. Anchors stay in the tree as :class:`Anchor`
(or, on request, the reader drops those at the pattern's ends); lazy and possessive quantifiers
and atomic groups are marked, for the caller to accept or refuse.

Errors are :class:`~outlines_like.errors.InvalidConstraintError` naming the position: for
invalid syntax, and (as :class:`RegexFeatureError`) for valid constructs with no regular
meaning (lookarounds, backreferences, word boundaries, conditionals) or refused flags.

The reader only moves forward through the string (no slicing of the rest of the pattern), so
its time is linear in the pattern's length. Generated patterns (JSON Schemas') repeat the same
small groups thousands of times (``(?:[ ]?)``, the JSON string): a group read once is reused,
the same node, when its exact text comes again under the same flags and reader settings (its
reading depends on nothing else), in this pattern or a later one (a bounded memo shared by the
readers: JSON Schemas' patterns repeat each other's strings, numbers and formats), and runs of
plain characters are read without the per-atom dispatch. One
cohesive recursive-descent reader with its two small passes over the tree, hence one module of
some 800 lines.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import re
import unicodedata
from collections.abc import Callable
from typing import Final, Literal, TypeAlias

from outlines_like.errors import ConstraintTooLargeError, InvalidConstraintError
from outlines_like.types._charset import (
    MAX_CODEPOINT,
    ClassTable,
    Ranges,
    case_closure,
    class_escape,
    complement,
    dot,
    normalize,
)

__all__ = [
    "EMPTY",
    "Alt",
    "Anchor",
    "Atomic",
    "Chars",
    "Concat",
    "Node",
    "RegexFeatureError",
    "Repeat",
    "parse_regex",
    "width",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Chars:
    """One character from ``ranges`` (a normalised code-point set).

    ``negated`` records that the source wrote the set negated (``[^...]``, ``.``), so writers
    can keep that form; the set itself is always ``ranges``.
    """

    ranges: Ranges
    negated: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Concat:
    """The items one after another; ``Concat(())`` is the empty string."""

    items: tuple[Node, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Alt:
    """Any one of the items (at least two)."""

    items: tuple[Node, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Repeat:
    """``item`` between ``low`` and ``high`` times (``None``: unbounded)."""

    item: Node
    low: int
    high: int | None
    mode: Literal["greedy", "lazy", "possessive"] = "greedy"


@dataclasses.dataclass(frozen=True, slots=True)
class Atomic:
    """An atomic group ``(?>...)``."""

    item: Node


@dataclasses.dataclass(frozen=True, slots=True)
class Anchor:
    r"""``^``/``\A`` (``start``) or ``$``/``\Z`` (``end``), at ``pos`` in the pattern."""

    kind: Literal["start", "end"]
    pos: int = dataclasses.field(default=-1, compare=False)


Node: TypeAlias = Chars | Concat | Alt | Repeat | Atomic | Anchor
EMPTY: Final = Concat(())


class RegexFeatureError(InvalidConstraintError):
    """A valid regex construct the caller cannot use (lookaround, backreference, flag...)."""


MAX_GROUP_DEPTH: Final = 100
"""Deepest nesting of groups the reader takes (its passes and the NFA build recurse per level)."""

_CHAR_ESCAPES: Final = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "a": 7}
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_OCT: Final = frozenset("01234567")
# plain ints: ``re.RegexFlag`` arithmetic costs a microsecond per operation
_IGNORECASE: Final = int(re.IGNORECASE)
_DOTALL: Final = int(re.DOTALL)
_ASCII: Final = int(re.ASCII)
_MULTILINE: Final = int(re.MULTILINE)
_VERBOSE: Final = int(re.VERBOSE)
_FLAG_BITS: Final = {
    "i": _IGNORECASE,
    "s": _DOTALL,
    "a": _ASCII,
    "u": int(re.UNICODE),
    "m": _MULTILINE,
    "x": _VERBOSE,
}


def parse_regex(
    pattern: str,
    *,
    classes: ClassTable = "ascii",
    flags: int = 0,
    inline_flags: bool = False,
    possessive: bool = False,
    strip_anchors: bool = False,
    where: str = "regex",
) -> Node:
    r"""Read ``pattern`` into a tree.

    Args:
        pattern: The regex (Python ``re`` syntax).
        classes: How ``\d \w \s`` and ``.`` read (see :mod:`outlines_like.types._charset`);
            ``re.ASCII`` in the flags turns ``"unicode"`` into ``"ascii"``.
        flags: ``re.IGNORECASE``, ``re.DOTALL``, ``re.ASCII``, ``re.VERBOSE`` apply.
        inline_flags: Whether ``(?i)`` and ``(?i:...)`` are accepted (else refused).
        possessive: Whether possessive quantifiers and atomic groups are accepted (else
            refused).
        strip_anchors: Drop the anchors at the pattern's ends (``re.fullmatch`` implies them)
            and refuse the others, instead of leaving :class:`Anchor` nodes in the tree.
        where: What the pattern is, for messages (``"regex"``, ``"Lark terminal A"``).

    Raises:
        InvalidConstraintError: Invalid syntax, or (:class:`RegexFeatureError`) a construct
            with no regular meaning; the message names the position.
    """
    if not isinstance(pattern, str):
        raise TypeError(f"a regex pattern must be a str, got {type(pattern).__name__}")
    reader = _Reader(pattern, classes, flags, inline_flags, possessive, where)
    # the tree is acyclic and nothing becomes garbage while it grows: the collector's passes
    # over the new nodes would only slow the reading (3x on a 1 MB pattern)
    collecting = gc.isenabled()
    gc.disable()
    try:
        tree = reader.parse()
    finally:
        if collecting:
            gc.enable()
    if strip_anchors and reader.anchored:
        tree = _strip(tree, True, True, pattern, where)
    return tree


class _Reader:
    """Recursive descent over the pattern, one index moving forward."""

    def __init__(
        self,
        pattern: str,
        classes: ClassTable,
        flags: int,
        inline_flags: bool,
        possessive: bool,
        where: str,
    ) -> None:
        self.p = pattern
        self.n = len(pattern)
        self.i = 0
        self.classes = classes
        self.flags = int(flags)
        self.inline_flags = inline_flags
        self.possessive = possessive
        self.where = where
        self.anchored = False  # an Anchor is in the tree
        self.depth = 0  # groups open at the reading position
        self.peak = 0  # the deepest self.depth since the group being read opened
        # group text and flags -> (node, levels of groups it nests); no anchors in them
        self.groups = _group_memo(classes, inline_flags, possessive)
        self.closes: _Closes | None = None  # '(' -> a likely matching ')' (else -1)

    # ------------------------------------------------------------------ errors

    def error(self, msg: str, pos: int | None = None) -> InvalidConstraintError:
        at = self.i if pos is None else pos
        return InvalidConstraintError(f"invalid {self.where} {self.p!r} at position {at}: {msg}")

    def refuse(self, what: str, pos: int) -> RegexFeatureError:
        return RegexFeatureError(f"{self.where} {self.p!r} at position {pos}: {what}")

    # ------------------------------------------------------------------ structure

    def parse(self) -> Node:
        self.global_flags()
        node = self.alternation(self.flags)
        if self.i < self.n:
            raise self.error("unbalanced parenthesis ')'")
        return node

    def global_flags(self) -> None:
        """``(?aisx)`` at the very start sets flags for the whole pattern."""
        p = self.p
        if not p.startswith("(?", 0):
            return
        j = 2
        while j < self.n and p[j] in _FLAG_BITS:
            j += 1
        if j > 2 and j < self.n and p[j] == ")":
            if not self.inline_flags:
                raise self.refuse("inline flags such as (?i) are not supported", 0)
            for c in p[2:j]:
                self.flags |= _FLAG_BITS[c]
            self.i = j + 1

    def skip_verbose(self, flags: int) -> None:
        if not flags & _VERBOSE:
            return
        p = self.p
        while self.i < self.n:
            c = p[self.i]
            if c in " \t\n\r\f\v":
                self.i += 1
            elif c == "#":
                j = p.find("\n", self.i)
                self.i = self.n if j < 0 else j + 1
            else:
                return

    def alternation(self, flags: int) -> Node:
        branches = [self.sequence(flags)]
        while self.i < self.n and self.p[self.i] == "|":
            self.i += 1
            branches.append(self.sequence(flags))
        return branches[0] if len(branches) == 1 else Alt(tuple(branches))

    def sequence(self, flags: int) -> Node:
        items: list[Node] = []
        p, n = self.p, self.n
        verbose = flags & _VERBOSE
        plain = not flags & (_VERBOSE | _IGNORECASE)
        run_at = _PLAIN_RUN.match
        literals = _LITERALS
        while True:
            if verbose:
                self.skip_verbose(flags)
            start = self.i
            if start >= n:
                break
            c = p[start]
            if c in "|)":
                break
            if plain and c not in _SYNTAX:  # a syntax character starts no run: no match call
                run = run_at(p, start)
                if run is not None:
                    end = run.end()
                    if end < n and p[end] in "*+?{":  # the last one's, maybe: left to atom()
                        end -= 1
                    if end > start:
                        items.extend(map(literals.__getitem__, p[start:end]))
                        self.i = end
                        continue
            atom = self.group(flags) if c == "(" else self.atom(flags)
            if self.i < n and (verbose or p[self.i] in "*+?{"):
                atom = self.quantified(atom, start, flags)
            items.append(atom)
        return items[0] if len(items) == 1 else Concat(tuple(items))

    def quantified(self, atom: Node, start: int, flags: int) -> Node:
        p = self.p
        verbose = flags & _VERBOSE
        if verbose:
            self.skip_verbose(flags)
        if self.i >= self.n:
            return atom
        c = p[self.i]
        qpos = self.i
        lo: int
        hi: int | None
        if c == "*":
            lo, hi = 0, None
            self.i += 1
        elif c == "+":
            lo, hi = 1, None
            self.i += 1
        elif c == "?":
            lo, hi = 0, 1
            self.i += 1
        elif c == "{":
            bounds = self.braces()
            if bounds is None:
                return atom
            lo, hi = bounds
        else:
            return atom
        if isinstance(atom, Anchor):
            raise self.error("nothing to repeat", qpos)
        mode: Literal["greedy", "lazy", "possessive"] = "greedy"
        if self.i < self.n and p[self.i] == "?":
            self.i += 1
            mode = "lazy"
        elif self.i < self.n and p[self.i] == "+":
            if not self.possessive:
                raise self.refuse("possessive quantifiers are not supported", self.i)
            self.i += 1
            mode = "possessive"
        if verbose:
            self.skip_verbose(flags)
        if self.i < self.n and (p[self.i] in "*+?" or (p[self.i] == "{" and self.is_braces())):
            raise self.error("multiple repeat", self.i)
        if start == qpos and atom == EMPTY:
            raise self.error("nothing to repeat", qpos)
        return Repeat(atom, lo, hi, mode)

    def braces(self) -> tuple[int, int | None] | None:
        """Read ``{n}``, ``{n,}``, ``{,m}``, ``{n,m}``; ``None`` (a literal '{') otherwise."""
        p, n = self.p, self.n
        j = self.i + 1
        while j < n and p[j].isdigit():
            j += 1
        lo_s = p[self.i + 1 : j]
        sep = j < n and p[j] == ","
        hi_s = ""
        if sep:
            k = j + 1
            while k < n and p[k].isdigit():
                k += 1
            hi_s = p[j + 1 : k]
            j = k
        if j >= n or p[j] != "}" or not (lo_s or hi_s):
            return None
        if not all(ch in "0123456789" for ch in lo_s + hi_s):  # isdigit() admits other digits
            return None
        lo = int(lo_s) if lo_s else 0
        hi = (int(hi_s) if hi_s else None) if sep else lo
        if hi is not None and hi < lo:
            raise self.error(f"min repeat greater than max repeat in {p[self.i : j + 1]}")
        self.i = j + 1
        return lo, hi

    def is_braces(self) -> bool:
        save = self.i
        try:
            return self.braces() is not None
        finally:
            self.i = save

    # ------------------------------------------------------------------ atoms

    def atom(self, flags: int) -> Node:
        p = self.p
        c = p[self.i]
        if c == "(":
            return self.group(flags)
        if c == "[":
            m = _CLASS_EXTENT.match(p, self.i)
            if m is not None:
                cached = _class_of(m.group(), flags & (_IGNORECASE | _ASCII), self.classes)
                if cached is not None:
                    self.i = m.end()
                    return cached
            return self.char_class(flags)
        if c == ".":
            self.i += 1
            dotall = bool(flags & _DOTALL)
            return Chars(dot(self.table(flags), dotall=dotall), negated=not dotall)
        if c == "^":
            self.i += 1
            return self.anchor("start", flags, self.i - 1)
        if c == "$":
            self.i += 1
            return self.anchor("end", flags, self.i - 1)
        if c == "\\":
            nxt = p[self.i + 1 : self.i + 2]
            if nxt in ("A", "Z"):
                self.i += 2
                self.anchored = True
                return Anchor("start" if nxt == "A" else "end", self.i - 2)
            ranges, single = self.escape(in_class=False, flags=flags)
            if single:
                return self.literal(ranges[0][0], flags)
            return Chars(ranges)
        if c in "*+?":
            raise self.error("nothing to repeat")
        if c == "{" and self.is_braces():
            raise self.error("nothing to repeat")
        self.i += 1
        if flags & _IGNORECASE:
            return self.literal(ord(c), flags)
        return _literal(ord(c))

    def table(self, flags: int) -> ClassTable:
        return "ascii" if flags & _ASCII and self.classes == "unicode" else self.classes

    def anchor(self, kind: Literal["start", "end"], flags: int, pos: int) -> Anchor:
        if flags & _MULTILINE:
            raise self.refuse("line anchors (^, $ under re.MULTILINE) are not supported", pos)
        self.anchored = True
        return Anchor(kind, pos)

    @staticmethod
    def literal(cp: int, flags: int) -> Chars:
        if flags & _IGNORECASE:
            return Chars(case_closure(((cp, cp),)))
        return _literal(cp)

    def group(self, flags: int) -> Node:
        """A group, read again only when its text and flags were not read before."""
        start = self.i
        if self.closes is None:
            self.closes = _closing_parens(self.p)
        end = self.closes[start] + 1
        key = (self.p[start:end], flags) if 0 < end - start <= _GROUP_MEMO_SPAN else None
        if key is not None:
            seen = self.groups.get(key)
            if seen is not None and self.depth + seen[1] <= MAX_GROUP_DEPTH:
                # the group's nesting counts for the enclosing groups as if it were read
                self.peak = max(self.peak, self.depth + seen[1])
                self.i = end
                return seen[0]
        anchored, peak = self.anchored, self.peak
        self.anchored, self.peak = False, self.depth
        node = self.read_group(flags)
        nested = self.peak - self.depth
        if not self.anchored and 0 < self.i - start <= _GROUP_MEMO_SPAN:
            self.groups.remember(self.p[start : self.i], flags, node, nested)
        self.anchored, self.peak = self.anchored or anchored, max(peak, self.peak)
        return node

    def read_group(self, flags: int) -> Node:
        p = self.p
        start = self.i
        self.i += 1
        atomic = False
        if p.startswith("?", self.i):
            if p.startswith("?:", self.i):
                self.i += 2
            elif p.startswith("?P<", self.i) or (
                p.startswith("?<", self.i) and not p.startswith(("?<=", "?<!"), self.i)
            ):
                self.i += 3 if p[self.i + 1] == "P" else 2
                j = self.i
                while j < self.n and (p[j].isalnum() or p[j] == "_"):
                    j += 1
                if j == self.i or j >= self.n or p[j] != ">":
                    raise self.error("missing '>' or bad character in group name", start)
                self.i = j + 1
            elif p.startswith("?#", self.i):
                j = p.find(")", self.i)
                if j < 0:
                    raise self.error("missing ')', unterminated comment", start)
                self.i = j + 1
                return EMPTY
            elif p.startswith(("?=", "?!", "?<=", "?<!"), self.i):
                raise self.refuse(
                    "lookaround assertions (lookahead or lookbehind) are not supported", start
                )
            elif p.startswith("?P=", self.i):
                raise self.refuse("backreferences are not supported", start)
            elif p.startswith("?(", self.i):
                raise self.refuse("conditional backreference groups are not supported", start)
            elif p.startswith("?>", self.i):
                if not self.possessive:
                    raise self.refuse("atomic groups are not supported", start)
                self.i += 2
                atomic = True
            else:
                flags = self.scoped_flags(flags, start)
        if self.depth >= MAX_GROUP_DEPTH:
            raise ConstraintTooLargeError(
                f"{self.where} {_clip(self.p)} at position {start}: groups nested more than "
                f"{MAX_GROUP_DEPTH} deep",
                limit="depth",
                where=f"{self.where} position {start}",
            )
        self.depth += 1
        self.peak = max(self.peak, self.depth)
        node = self.alternation(flags)
        self.depth -= 1
        if self.i >= self.n or p[self.i] != ")":
            raise self.error("missing ')', unterminated subpattern", start)
        self.i += 1
        return Atomic(node) if atomic else node

    def scoped_flags(self, flags: int, start: int) -> int:
        """Read ``(?i:``, ``(?-i:``, ``(?a-s:``; return the flags inside the group."""
        p = self.p
        j = self.i + 1
        add = remove = 0
        while j < self.n and p[j] in _FLAG_BITS:
            add |= _FLAG_BITS[p[j]]
            j += 1
        if j < self.n and p[j] == "-":
            j += 1
            while j < self.n and p[j] in _FLAG_BITS:
                remove |= _FLAG_BITS[p[j]]
                j += 1
        if j >= self.n or p[j] != ":" or not (add or remove):
            if j < self.n and p[j] == ")" and add and not remove:
                raise self.error("global flags not at the start of the expression", start)
            raise self.error("unknown extension or bad inline flag", start)
        if not self.inline_flags:
            raise self.refuse("inline flags such as (?i:...) are not supported", start)
        self.i = j + 1
        return (flags | add) & ~remove

    def char_class(self, flags: int) -> Chars:
        p = self.p
        start = self.i
        self.i += 1
        negate = False
        if self.i < self.n and p[self.i] == "^":
            negate = True
            self.i += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.i >= self.n:
                raise self.error("unterminated character set", start)
            c = p[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            lo_pos = self.i
            if c != "\\" and p[self.i + 1 : self.i + 2] != "-":  # a plain character
                self.i += 1
                ranges.append((ord(c), ord(c)))
                continue
            lo_set, lo_single = self.class_item(flags)
            if self.i + 1 < self.n and p[self.i] == "-" and p[self.i + 1] != "]":
                self.i += 1
                hi_set, hi_single = self.class_item(flags)
                if not (lo_single and hi_single):
                    raise self.error(f"bad character range {p[lo_pos : self.i]}", lo_pos)
                lo, hi = lo_set[0][0], hi_set[0][0]
                if hi < lo:
                    raise self.error(f"bad character range {p[lo_pos : self.i]}", lo_pos)
                ranges.append((lo, hi))
            else:
                ranges.extend(lo_set)
        norm = normalize(ranges)
        if flags & _IGNORECASE:
            norm = case_closure(norm)
        return Chars(complement(norm), negated=True) if negate else Chars(norm)

    def class_item(self, flags: int) -> tuple[Ranges, bool]:
        c = self.p[self.i]
        if c == "\\":
            return self.escape(in_class=True, flags=flags)
        self.i += 1
        return ((ord(c), ord(c)),), True

    def escape(self, *, in_class: bool, flags: int) -> tuple[Ranges, bool]:
        """Read one escape; return its set and whether it is one character."""
        p = self.p
        start = self.i
        if self.i + 1 >= self.n:
            raise self.error("bad escape (end of pattern)", start)
        c = p[self.i + 1]
        self.i += 2
        if c in "dwsDWS":
            return class_escape(c, self.table(flags)), False
        if c in _CHAR_ESCAPES:
            cp = _CHAR_ESCAPES[c]
        elif c == "b" and in_class:
            cp = 8
        elif c in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[c]
            digits = p[self.i : self.i + width]
            if len(digits) != width or any(d not in _HEX for d in digits):
                raise self.error(f"incomplete escape \\{c}{digits}", start)
            self.i += width
            cp = int(digits, 16)
            if cp > MAX_CODEPOINT:
                raise self.error(f"bad escape \\{c}{digits}", start)
        elif c == "N":
            cp = self.named_escape(start)
        elif c in _OCT and (in_class or c == "0" or self.octal_follows()):
            j = self.i
            while j < self.n and j < self.i + 2 and p[j] in _OCT:
                j += 1
            cp = int(p[self.i - 1 : j], 8)
            if cp > 0o377:
                raise self.error(
                    f"octal escape value \\{p[self.i - 1 : j]} outside of range", start
                )
            self.i = j
        elif c.isdigit():
            if in_class:
                raise self.error(f"bad escape \\{c}", start)
            raise self.refuse("backreferences are not supported", start)
        elif c in "bB" and not in_class:
            raise self.refuse(f"word boundary \\{c} is not supported", start)
        elif c.isascii() and c.isalnum():
            raise self.error(f"bad escape \\{c}", start)
        else:
            cp = ord(c)
        return ((cp, cp),), True

    def octal_follows(self) -> bool:
        r"""Outside a class, ``\\1``-``\\7`` is octal only with three octal digits (``\\101``)."""
        p, i = self.p, self.i
        return i + 1 < self.n and p[i] in _OCT and p[i + 1] in _OCT

    def named_escape(self, start: int) -> int:
        p = self.p
        if not p.startswith("{", self.i):
            raise self.error("missing {", start)
        j = p.find("}", self.i)
        if j < 0:
            raise self.error("missing }, unterminated name", start)
        name = p[self.i + 1 : j]
        try:
            cp = ord(unicodedata.lookup(name))
        except KeyError:
            raise self.error(f"undefined character name {name!r}", start) from None
        self.i = j + 1
        return cp


def _clip(pattern: str) -> str:
    return repr(pattern) if len(pattern) <= 80 else repr(pattern[:77] + "...")


# Where a character set ends, in Python's syntax: a ']' right after '[' or '[^' is literal.
_CLASS_EXTENT: Final = re.compile(r"\[\^?\]?(?:[^\\\]]|\\.)*\]", re.DOTALL)
# Characters that are themselves outside a set (with no flags that change their reading)
_PLAIN_RUN: Final = re.compile(r"[^\\\[\]().^$*+?{}|]+")
_SYNTAX: Final = frozenset("\\[]().^$*+?{}|")
"""The characters :data:`_PLAIN_RUN` stops at."""
_PARENS: Final = re.compile(r"(?<!\\)[()]")
_GROUP_MEMO_SPAN: Final = 1 << 14
"""Longest group text the reader remembers (a bound on the slicing per group).

As long as the longest JSON Schema regex the masker compiles (``JSON_REGEX_BUDGET``): a
schema's regex repeats whole objects (an array's first item and the others, a definition
used twice) and schemas repeat each other's (Kubernetes' ``ObjectMeta``); remembered, the
second is one lookup, and the same node (the NFA program and build share it too). Measured on
the real-world corpus's 142 regex-path patterns in order: reading 51 -> 36 ms, with the
memo at ~650k characters (400: 48k).
"""
_GROUP_MEMO_CHARS: Final = 1 << 21
"""Most characters of group texts the readers remember under one set of settings (a bound on
the texts kept, and on the nodes they keep alive, mostly shared with each other: the corpus's
~650k characters keep ~1 MB)."""
_NUMPY_PARENS: Final = 1024
"""Shortest pattern whose parentheses are paired in numpy (fewer: numpy's calls cost more)."""


_Closes: TypeAlias = "list[int] | memoryview"
"""Where each ``(`` of a pattern likely closes, by position (``-1``: not an open or unpaired)."""


class _GroupMemo(dict[tuple[str, int], tuple[Node, int]]):
    """A group's text and flags -> its node and the levels of groups it nests (no anchors)."""

    chars = 0  # the texts' characters

    def remember(self, text: str, flags: int, node: Node, nested: int) -> None:
        if self.chars + len(text) > _GROUP_MEMO_CHARS:
            self.clear()  # only a cache
            self.chars = 0
        self[(text, flags)] = (node, nested)
        self.chars += len(text)


_GROUP_MEMOS: dict[tuple[ClassTable, bool, bool], _GroupMemo] = {}


def clear_group_memos() -> None:
    """Empty the readers' memos of groups (their texts and trees)."""
    _GROUP_MEMOS.clear()


def _group_memo(classes: ClassTable, inline_flags: bool, possessive: bool) -> _GroupMemo:
    """The readers' memo of groups read under these settings (shared: nodes are immutable).

    Threads share it too: a lookup racing a store or a clear only misses.
    """
    memo = _GROUP_MEMOS.get((classes, inline_flags, possessive))
    if memo is None:
        memo = _GROUP_MEMOS.setdefault((classes, inline_flags, possessive), _GroupMemo())
    return memo


@functools.lru_cache(maxsize=1024)
def _literal(cp: int) -> Chars:
    """The node of one character (shared: the automata's builders see it once per tree)."""
    return Chars(((cp, cp),))


class _Literals(dict[str, Chars]):
    """A character -> :func:`_literal` of its code point (a plain run's items, in one lookup)."""

    def __missing__(self, c: str) -> Chars:
        node = _literal(ord(c))
        if len(self) < 1024:  # as many as _literal keeps
            self[c] = node
        return node


_LITERALS: Final = _Literals()


def _closing_parens(pattern: str) -> _Closes:
    """Where each ``(`` likely closes (``-1``: nowhere), by position, skipping escaped ones.

    A hint only: the memo of :meth:`_Reader.group` holds texts read in full, so a wrong guess
    (a parenthesis in a set, or after an escaped backslash, or in a comment under
    ``re.VERBOSE``) only misses it. Parentheses only are looked at (a set or an escape per
    match cost ~3x more); a long pattern's are paired in numpy.
    """
    if len(pattern) >= _NUMPY_PARENS:
        return (_pairing or _closing_parens_numpy)(pattern)
    closes = [-1] * len(pattern)
    opened: list[int] = []
    push, pop = opened.append, opened.pop
    for at in [m.start() for m in _PARENS.finditer(pattern)]:
        if pattern[at] == "(":
            push(at)
        elif opened:
            closes[pop()] = at
    return closes


_pairing: Callable[[str], _Closes] | None = None
"""A compiled :func:`_closing_parens_numpy` (the same pairs), set with the ``accel`` extra."""


def set_paren_pairing(pairing: Callable[[str], _Closes] | None) -> None:
    """Pair a long pattern's parentheses with ``pairing`` (the same pairs; ``None``: numpy).

    :mod:`outlines_like.fsm._accel_program` sets its kernel (~10 us for a 5k-character
    pattern, numpy's some 25 calls ~70 us): the pairing is only a hint for the group memo,
    so the trees are the same either way.
    """
    global _pairing
    _pairing = pairing


def _closing_parens_numpy(pattern: str) -> _Closes:
    """:func:`_closing_parens` in numpy: each ``(`` with the next ``)`` of its nesting level.

    The answer is the int32 array's memoryview (its items read as ints, as fast as a list's,
    without building a list or a dict of the pairs).
    """
    import numpy as np  # here only: the constraint language itself does not need numpy

    code = np.frombuffer(pattern.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    at = np.flatnonzero((code == 0x28) | (code == 0x29))
    at = at[(at == 0) | (code[at - 1] != 0x5C)]  # not escaped
    closes = np.full(len(pattern), -1, dtype=np.int32)
    if at.shape[0] == 0:
        return closes.data
    opens = code[at] == 0x28
    depth = np.cumsum(np.where(opens, 1, -1))
    level = depth + ~opens  # an open's level once open, a close's before it closes
    order = np.argsort(level, kind="stable")
    level, opens, at = level[order], opens[order], at[order]
    pair = np.flatnonzero(opens[:-1] & ~opens[1:] & (level[:-1] == level[1:]))
    closes[at[pair]] = at[pair + 1]
    return closes.data


@functools.lru_cache(maxsize=4096)
def _class_of(text: str, flags: int, classes: ClassTable) -> Chars | None:
    """The set a whole ``[...]`` reads as (generated regexes repeat their sets), or ``None``."""
    reader = _Reader(text, classes, flags, False, False, "regex")
    try:
        node = reader.char_class(flags)
    except InvalidConstraintError:  # read again in place, for the message's position
        return None
    return node if reader.i == len(text) else None


# --------------------------------------------------------------------------- passes


def _strip(node: Node, first: bool, last: bool, pattern: str, where: str) -> Node:
    if isinstance(node, Anchor):
        if (node.kind == "start" and first) or (node.kind == "end" and last):
            return EMPTY
        symbol = pattern[node.pos : node.pos + (1 if pattern[node.pos] in "^$" else 2)]
        end = "start" if node.kind == "start" else "end"
        raise RegexFeatureError(
            f"{where} {pattern!r} at position {node.pos}: the anchor {symbol!r} is only "
            f"supported at the {end} of the pattern"
        )
    if isinstance(node, Concat):
        solid = [k for k, item in enumerate(node.items) if not isinstance(item, Anchor)]
        head = solid[0] if solid else len(node.items)
        tail = solid[-1] if solid else -1
        items = tuple(
            _strip(item, first and k <= head, last and k >= tail, pattern, where)
            for k, item in enumerate(node.items)
        )
        kept = tuple(item for item in items if item != EMPTY)
        return kept[0] if len(kept) == 1 else Concat(kept)
    if isinstance(node, Alt):
        return Alt(tuple(_strip(item, first, last, pattern, where) for item in node.items))
    if isinstance(node, (Repeat, Atomic)):
        inner = _strip(node.item, False, False, pattern, where)
        return dataclasses.replace(node, item=inner)
    return node


def width(node: Node) -> tuple[int, int | None]:
    """Fewest and most characters ``node`` spans (``None``: unbounded)."""
    if isinstance(node, Chars):
        return 1, 1
    if isinstance(node, Anchor):
        return 0, 0
    if isinstance(node, Concat):
        lo, hi_sum = 0, 0
        bounded = True
        for item in node.items:
            a, b = width(item)
            lo += a
            if b is None:
                bounded = False
            else:
                hi_sum += b
        return lo, (hi_sum if bounded else None)
    if isinstance(node, Alt):
        spans = [width(item) for item in node.items]
        highs = [b for _, b in spans]
        return min(a for a, _ in spans), (None if None in highs else max(b or 0 for b in highs))
    if isinstance(node, Atomic):
        return width(node.item)
    a, b = width(node.item)
    high = None if node.high is None or b is None else b * node.high
    return a * node.low, high
