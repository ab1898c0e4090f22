"""Regex text helpers, the JSON lexeme regexes every pass writes with, and their Lark spelling."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Final

# A regex, or None for the empty language (no document fits).
Rx = str | None


INTEGER: Final = r"-?(?:0|[1-9][0-9]*)"


NUMBER: Final = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"


STRING_CHAR: Final = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'


# A character of a length-bounded string: raw, or a two-character escape. No \u escapes: a
# counted \uXXXX costs the DFA six states per position (a 200-character limit would need
# 1,200), and surrogate pairs would count as two characters. Control characters other than
# \b \f \n \r \t (which JSON must write as \u00XX) therefore cannot appear in them.
STRING_CHAR_COUNTED: Final = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])'


STRING: Final = f'"{STRING_CHAR}*"'


REGEX_SPECIALS: Final = frozenset(".^$*+?{}[]\\|()")


def esc(text: str) -> str:
    """Escape ``text`` as a regex literal (metacharacters only; everything else stays raw)."""
    return "".join("\\" + c if c in REGEX_SPECIALS else c for c in text)


def seq(*parts: Rx) -> Rx:
    """Concatenate; the empty language absorbs everything."""
    if any(p is None for p in parts):
        return None
    return "".join(p for p in parts if p is not None)


def alt(parts: Iterable[Rx]) -> Rx:
    """Alternation of the parts that are not empty languages (duplicates removed)."""
    kept: list[str] = []
    for p in parts:
        if p is not None and p not in kept:
            kept.append(p)
    if not kept:
        return None
    if len(kept) == 1:
        return kept[0]
    return "(?:" + "|".join(kept) + ")"


def opt(part: Rx) -> str:
    """``part`` or nothing."""
    if not part:
        return ""
    return f"(?:{part})?"


def is_atom(regex: str) -> bool:
    """Whether a quantifier after ``regex`` applies to all of it (a char, class or group)."""
    if len(regex) == 1 or (len(regex) == 2 and regex[0] == "\\"):
        return regex not in REGEX_SPECIALS
    if regex[0] not in "([":
        return False
    depth, i, in_class = 0, 0, False
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            if not in_class and regex[0] == "[":
                return i == len(regex) - 1
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i == len(regex) - 1
        i += 1
    return False


def repeat(part: Rx, low: int, high: int | None) -> Rx:
    """``part`` repeated ``low`` to ``high`` times (``None``: unbounded)."""
    if high is not None and high < low:
        return None
    if high == 0:
        return ""
    if part is None:
        return "" if low == 0 else None
    if part == "":
        return ""
    body = part if is_atom(part) else f"(?:{part})"
    if high is None:
        return body + ("*" if low == 0 else "+" if low == 1 else f"{{{low},}}")
    if low == high:
        return part if low == 1 else f"{body}{{{low}}}"
    if (low, high) == (0, 1):
        return body + "?"
    return f"{body}{{{low},{high}}}"


# ------------------------------------------------------------------ as Lark terminals


def lark_regex(regex: str) -> str:
    r"""Write ``regex`` as a Lark ``/.../`` literal that Lark reads back as the same regex.

    Lark evaluates ``\xNN``, ``\uNNNN``, ``\n``... escapes into raw characters (harmless: the
    regex builders escape only control characters that way) and keeps every other escape;
    a raw ``/`` must be escaped and raw control characters written as escapes.
    """
    out: list[str] = []
    i = 0
    while i < len(regex):
        c = regex[i]
        if c == "\\" and i + 1 < len(regex):
            out.append(regex[i : i + 2])
            i += 2
            continue
        if c == "/":
            out.append("\\/")
        elif ord(c) < 0x20 or c == "\x7f":
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
        i += 1
    return "/" + "".join(out) + "/"


def literal_text(regex: str) -> str | None:
    """The text ``regex`` matches when it is a plain literal (only escaped metacharacters)."""
    out: list[str] = []
    i = 0
    while i < len(regex):
        c = regex[i]
        if c == "\\" and i + 1 < len(regex) and regex[i + 1] in REGEX_SPECIALS:
            out.append(regex[i + 1])
            i += 2
        elif c in REGEX_SPECIALS:
            return None
        else:
            out.append(c)
            i += 1
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def lark_terminal(regex: str) -> str:
    """A Lark terminal definition: a string literal when ``regex`` is one, else ``/.../``.

    A literal's DFA is a chain of states, built without the regex compiler.
    """
    text = literal_text(regex)
    if text is None or any(ord(c) < 0x20 for c in text):
        return lark_regex(regex)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
