"""Strings: ``pattern`` translated over the JSON text of a string, formats and lengths."""

from __future__ import annotations

from typing import Any

from outlines_like.errors import InvalidConstraintError
from outlines_like.types import _regex as rx
from outlines_like.types._charset import (
    SURROGATES,
    Ranges,
    complement,
    difference,
    normalize,
    union,
)
from outlines_like.types.json_schema._base import EXTRA_FORMATS, EXTRA_PATTERNS, ConverterBase
from outlines_like.types.json_schema._logic import NOT_STRINGS
from outlines_like.types.json_schema._text import (
    STRING,
    STRING_CHAR,
    STRING_CHAR_COUNTED,
    Rx,
    alt,
    esc,
    repeat,
    seq,
)
from outlines_like.types.predefined import FORMAT_PATTERNS


def class_char(cp: int) -> str:
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02x}"
    c = chr(cp)
    return "\\" + c if c in "\\]^-[" else c


def _class_body(ranges: Ranges) -> str:
    return "".join(
        class_char(lo) if lo == hi else f"{class_char(lo)}-{class_char(hi)}" for lo, hi in ranges
    )


def ranges_to_json_rx(ranges: Ranges) -> Rx:
    r"""Regex for the JSON-string text of one character from ``ranges``.

    Characters JSON must escape (``"``, ``\``, control characters) become their escape as
    ``json.dumps`` writes it; surrogates (never valid alone) are dropped. Wide sets are written
    as a negated class (``[^...]``), which engines and generators handle faster.
    """
    ranges = normalize(ranges)
    unsafe = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), SURROGATES)
    safe = difference(ranges, unsafe)
    alternatives: list[str] = []
    excluded = complement(union(safe, (SURROGATES,)))
    if safe == complement(unsafe):
        alternatives.append(r'[^"\\\x00-\x1f]')
    elif len(safe) == 1 and safe[0][0] == safe[0][1]:
        alternatives.append(esc(chr(safe[0][0])))
    elif safe and len(excluded) < len(safe):
        alternatives.append(f"[^{_class_body(excluded)}]")
    elif safe:
        alternatives.append(f"[{_class_body(safe)}]")
    # escaped characters, as json.dumps writes them: \" \\ \b \t \n \f \r, others \u00XX
    escaped = [cp for lo, hi in ranges for cp in range(lo, min(hi, 0x5C) + 1)]
    short = "".join(
        {0x22: '"', 0x5C: "\\\\", 8: "b", 9: "t", 10: "n", 12: "f", 13: "r"}.get(cp, "")
        for cp in escaped
    )
    if short:
        alternatives.append("\\\\" + (short if len(short) == 1 else f"[{short}]"))
    long = [cp for cp in escaped if cp < 0x20 and cp not in (8, 9, 10, 12, 13)]
    if len(long) == 27:
        alternatives.append(r"\\u00(?:0[0-7bef]|1[0-9a-f])")
    else:
        alternatives.extend(f"\\\\u{cp:04x}" for cp in long)
    return alt(alternatives)


class Untranslatable(Exception):
    """A valid pattern with no regular equivalent (backreference, lookaround, flag...)."""


class PatternTranslator:
    """Translate a JSON Schema ``pattern`` into a regex over the JSON text of the string."""

    def __init__(self, pattern: str, path: str) -> None:
        self.pattern = pattern
        self.path = path

    def fail(self, why: str) -> Untranslatable:
        return Untranslatable(f"{self.pattern!r}: {why}")

    def translate(self) -> str:
        try:
            tree = rx.parse_regex(self.pattern, classes="ecma", possessive=True, where="pattern")
        except rx.RegexFeatureError as exc:
            raise Untranslatable(str(exc)) from exc
        except InvalidConstraintError as exc:
            raise InvalidConstraintError(
                f"pattern {self.pattern!r} at {self.path} is not a valid regex: {exc}"
            ) from exc
        result = self.top(tree)
        if result is None:
            raise InvalidConstraintError(
                f"pattern {self.pattern!r} at {self.path} matches no JSON string"
            )
        return result

    def top(self, node: rx.Node, anchored_start: bool = False) -> Rx:
        """A whole (unanchored unless ``^``/``$``) pattern: JSON Schema patterns search."""
        items = list(node.items) if isinstance(node, rx.Concat) else [node]
        if items and items[0] == rx.Anchor("start"):
            anchored_start, items = True, items[1:]
        if len(items) == 1 and isinstance(items[0], rx.Alt):  # ^a$|^b$
            return alt(self.top(branch, anchored_start) for branch in items[0].items)
        anchored_end = bool(items) and items[-1] == rx.Anchor("end")
        if anchored_end:
            items = items[:-1]
        body = seq(*(self.item(item) for item in items))
        any_text = f"{STRING_CHAR}*"
        return seq("" if anchored_start else any_text, body, "" if anchored_end else any_text)

    def item(self, node: rx.Node) -> Rx:
        if isinstance(node, rx.Chars):
            return ranges_to_json_rx(node.ranges)
        if isinstance(node, rx.Repeat):
            return repeat(self.item(node.item), node.low, node.high)
        if isinstance(node, (rx.Concat, rx.Atomic)):  # a group
            items = node.items if isinstance(node, rx.Concat) else (node.item,)
            inner = seq(*(self.item(item) for item in items))
            return None if inner is None else f"(?:{inner})"
        if isinstance(node, rx.Alt):
            return alt(self.item(branch) for branch in node.items)
        raise self.fail(f"anchor at position {node.pos} is only supported at the very start or end")


def pattern_width(pattern: str) -> tuple[int, int | None]:
    """Fewest and most characters a (fully matching) regex can span; ``None``: unbounded."""
    try:
        tree = rx.parse_regex(pattern, classes="unicode", possessive=True, inline_flags=True)
    except InvalidConstraintError:  # translating it fails with the reason
        return 0, None
    return rx.width(tree)


class StringsMixin(ConverterBase):
    """``string`` schemas: lengths, ``pattern`` and ``format``."""

    def convert_string(self, s: dict[str, Any], path: str) -> Rx:
        min_len = self.natural(s, "minLength", path) or 0
        max_len = self.natural(s, "maxLength", path)
        if max_len is not None and max_len < min_len:
            raise self.invalid(path, f"minLength {min_len} is greater than maxLength {max_len}")
        patterns = [p for p in [s.get("pattern"), *s.get(EXTRA_PATTERNS, [])] if p is not None]
        formats = [f for f in [s.get("format"), *s.get(EXTRA_FORMATS, [])] if f is not None]
        for extra in patterns[1:]:
            self.unenforced("pattern", path, f"a second pattern {extra!r} (from allOf)")
        for extra in formats[1:]:
            self.unenforced("format", path, f"a second format {extra!r} (from allOf)")
        pattern = patterns[0] if patterns else None
        fmt = formats[0] if formats else None
        if pattern is not None and not isinstance(pattern, str):
            raise self.invalid(path + "/pattern", "pattern must be a string")
        if fmt is not None and fmt not in FORMAT_PATTERNS:
            self.unenforced(
                "format", path, f"unknown format {fmt!r} (known: {', '.join(FORMAT_PATTERNS)})"
            )
            fmt = None
        if pattern is not None and fmt is not None:
            self.unenforced("format", path, "format and pattern together cannot be combined")
            fmt = None
        if pattern is not None or fmt is not None:
            source = pattern if pattern is not None else FORMAT_PATTERNS[str(fmt)]
            if min_len or max_len is not None:
                low, high = pattern_width(source if fmt is not None else f"(?:{source})")
                # No regex intersection: the limits must already follow from the pattern.
                anchored = pattern is None or self.pattern_is_anchored(source)
                if low < min_len:
                    self.unenforced(
                        "minLength", path, f"the pattern/format can be shorter ({low} characters)"
                    )
                if max_len is not None and not (anchored and high is not None and high <= max_len):
                    self.unenforced(
                        "maxLength",
                        path,
                        "the pattern/format can be longer, and a length limit "
                        "cannot be combined with it",
                    )
            if pattern is None:
                return f'"(?:{source})"'
            try:
                return f'"{PatternTranslator(pattern, path + "/pattern").translate()}"'
            except Untranslatable as exc:
                self.unenforced("pattern", path, str(exc))
        excluded = s.get(NOT_STRINGS)
        if excluded is not None:
            if min_len or max_len is not None:
                self.unenforced("not", path, "strings other than some, with a length limit")
            return f'"{text_excluding(list(excluded))}"'
        if not min_len and max_len is None:
            return STRING
        return seq('"', repeat(STRING_CHAR_COUNTED, min_len, max_len), '"')

    @staticmethod
    def pattern_is_anchored(pattern: str) -> bool:
        return pattern.startswith("^") and pattern.endswith("$") and "|" not in pattern


def text_excluding(names: list[str]) -> str:
    r"""Regex for a string's text (inside the quotes) that decodes to none of ``names``.

    Built on the trie of ``names``: at each node, either stop (if the prefix is not a
    name), or write a character no name continues with and then anything, or follow a
    child. Up to the first difference, characters are written raw (a ``\u`` escape could
    spell a name's character); two-character escapes count as different characters when
    no name contains what they decode to.
    """
    escapes_differ = not any(c in name for name in names for c in '"\\\b\f\n\r\t')
    escape = r'\\["\\bfnrt]' if escapes_differ else ""
    anything = f"{STRING_CHAR}*"
    if not names:
        return anything
    trie: dict[str, Any] = {}
    for name in names:
        node = trie
        for c in name:
            node = node.setdefault(c, {})
        node[""] = {}

    def walk(node: dict[str, Any]) -> str:
        options = [] if "" in node else [""]
        children = [c for c in node if c]
        if children:
            others = "".join(class_char(ord(c)) for c in children)
            differ = f'[^"\\\\\\x00-\\x1f{others}]'
            if escape:
                differ = f"(?:{differ}|{escape})"
            options.append(differ + anything)
        else:
            options.append(f"{STRING_CHAR}+")
        options.extend(
            esc(c) + walk(node[c]) for c in children if c not in '"\\' and ord(c) >= 0x20
        )
        return "(?:" + "|".join(options) + ")"

    return walk(trie)
