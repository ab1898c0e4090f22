r"""Code-point sets: one range-set algebra and one table of ``\d \w \s`` and ``.``.

A set is a tuple of inclusive ``(low, high)`` code-point pairs, sorted and disjoint once
:func:`normalize` has run. The regex reader (:mod:`outlines_like.types._regex`), the grammar
converters, the JSON Schema compiler and the masker's UTF-8 automata all use these.

Three readings of the class escapes exist, and each user picks one by name:

- ``"ascii"``: ``\d`` = ``[0-9]``, ``\w`` = ``[A-Za-z0-9_]``, ``\s`` = ``[\t\n\v\f\r ]``. The
  masker's regexes (as xgrammar and interegular read them: a constrained model should not
  emit Arabic digits for ``\d``) and Python's ``re.ASCII``.
- ``"unicode"``: what Python's ``re`` matches on ``str`` by default (grammar conversions, where
  Lark terminals keep Python's meaning).
- ``"ecma"``: ECMA-262, as JSON Schema's ``pattern`` reads them (ASCII ``\d \w``, Unicode
  ``\s``; ``.`` stops at every line terminator).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Final, Literal

__all__ = [
    "MAX_CODEPOINT",
    "SURROGATES",
    "ClassTable",
    "Ranges",
    "case_closure",
    "class_escape",
    "complement",
    "difference",
    "dot",
    "drop_surrogates",
    "intersection",
    "normalize",
    "union",
    "utf8_byte_ranges",
]

Ranges = tuple[tuple[int, int], ...]
ClassTable = Literal["ascii", "unicode", "ecma"]

MAX_CODEPOINT: Final = 0x10FFFF
SURROGATES: Final = (0xD800, 0xDFFF)


# --------------------------------------------------------------------------- the algebra


def normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sort and merge overlapping or adjacent ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def complement(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Every code point (surrogates included) not in ``ranges``."""
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in normalize(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return tuple(out)


def union(*sets: Iterable[tuple[int, int]]) -> Ranges:
    """The code points in any of ``sets``."""
    return normalize(r for s in sets for r in s)


def intersection(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> Ranges:
    """The code points in both ``a`` and ``b``."""
    return complement(union(complement(a), complement(b)))


def difference(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> Ranges:
    """The code points in ``a`` and not in ``b``."""
    return intersection(a, complement(b))


def drop_surrogates(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """``ranges`` without U+D800..U+DFFF, which UTF-8 cannot encode."""
    return difference(ranges, (SURROGATES,))


# --------------------------------------------------------------------------- the escapes

_ASCII: Final[dict[str, Ranges]] = {
    "d": ((0x30, 0x39),),
    "w": ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
    "s": ((0x09, 0x0D), (0x20, 0x20)),
}
# ECMA-262 \s, less U+FEFF, which Python's `re` (JSON Schema validators' engine) does not count.
_ECMA_SPACE: Final[Ranges] = (
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
)
_LINE_TERMINATORS: Final[Ranges] = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))


@functools.cache
def _unicode(letter: str) -> Ranges:
    r"""The code points Python's ``re`` matches with ``\<letter>`` on ``str``."""
    everything = "".join(map(chr, range(MAX_CODEPOINT + 1)))
    return tuple((m.start(), m.end() - 1) for m in re.finditer(f"\\{letter}+", everything))


@functools.cache
def class_escape(letter: str, table: ClassTable) -> Ranges:
    r"""The set of ``\d \w \s \D \W \S`` (``letter`` is ``d``, ``W``...) in ``table``'s reading."""
    base_letter = letter.lower()
    if table == "unicode":
        base = _unicode(base_letter)
    elif table == "ecma" and base_letter == "s":
        base = _ECMA_SPACE
        if letter == "S":  # U+FEFF is space to ECMA-262, not to Python: \S takes neither
            return complement((*base, (0xFEFF, 0xFEFF)))
    else:
        base = _ASCII[base_letter]
    return complement(base) if letter.isupper() else base


@functools.cache
def dot(table: ClassTable, *, dotall: bool = False) -> Ranges:
    r"""The set of ``.``: everything but ``\\n`` (ECMA: but every line terminator)."""
    if dotall:
        return ((0, MAX_CODEPOINT),)
    return complement(_LINE_TERMINATORS if table == "ecma" else ((0x0A, 0x0A),))


_CASE_ENUMERATION_LIMIT: Final = 0x4000


def case_closure(ranges: Ranges) -> Ranges:
    """Add the other-case forms of the characters (Python's ``re.IGNORECASE``, approximately).

    Ranges up to ``_CASE_ENUMERATION_LIMIT`` code points are closed exactly under single-char
    ``lower``/``upper``; larger ranges get only their ASCII letters' counterparts.
    """
    extra: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if hi - lo <= _CASE_ENUMERATION_LIMIT:
            points: Iterable[int] = range(lo, hi + 1)
        else:
            points = range(lo, min(hi, 0x7F) + 1)
        for point in points:
            ch = chr(point)
            for other in (ch.lower(), ch.upper(), ch.casefold()):
                if len(other) == 1 and other != ch:
                    extra.append((ord(other), ord(other)))
    return normalize((*ranges, *extra))


# --------------------------------------------------------------------------- UTF-8


def _utf8_encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8", "surrogatepass")


def utf8_byte_ranges(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Return byte-range sequences whose concatenations are the UTF-8 encodings of ``lo..hi``.

    Each sequence is a list of inclusive ``(low_byte, high_byte)`` pairs, one per byte.
    """
    out: list[list[tuple[int, int]]] = []
    for a, b in ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, MAX_CODEPOINT)):
        la, hb = max(lo, a), min(hi, b)
        if la <= hb:
            _split_same_length(la, hb, out)
    return out


def _split_same_length(lo: int, hi: int, out: list[list[tuple[int, int]]]) -> None:
    n = len(_utf8_encode(lo))
    for i in range(1, n):
        m = (1 << (6 * i)) - 1
        if lo & ~m != hi & ~m:
            if lo & m:
                _split_same_length(lo, lo | m, out)
                _split_same_length((lo | m) + 1, hi, out)
                return
            if hi & m != m:
                _split_same_length(lo, (hi & ~m) - 1, out)
                _split_same_length(hi & ~m, hi, out)
                return
    a, b = _utf8_encode(lo), _utf8_encode(hi)
    out.append(list(zip(a, b, strict=True)))
