r"""Ready-made regex terms for values people ask for, and the JSON Schema ``format`` regexes.

Every pattern uses only what every engine reads: character classes written out (``[0-9]``,
never ``\d``), groups, alternation and bounded or unbounded repetition. No lookarounds.
"""

from __future__ import annotations

from outlines_like.types._terms import Regex

__all__ = [
    "FORMAT_PATTERNS",
    "JSON_STRING_PATTERN",
    "boolean",
    "char",
    "credit_card",
    "date",
    "datetime",
    "digit",
    "email",
    "hex_str",
    "integer",
    "ipv4",
    "ipv6",
    "isbn",
    "nonnegative_integer",
    "number",
    "phone_us",
    "positive_integer",
    "semver",
    "sentence",
    "string",
    "time",
    "uri",
    "uuid4",
    "whitespace",
    "word",
    "zip_us",
]

INTEGER_PATTERN = r"-?(0|[1-9][0-9]*)"
NUMBER_PATTERN = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
DATE_PATTERN = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
TIME_PATTERN = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?"
TZ_PATTERN = r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
DATETIME_PATTERN = DATE_PATTERN + "T" + TIME_PATTERN + TZ_PATTERN + "?"
UUID_PATTERN = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
UUID4_PATTERN = (
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}"
)
EMAIL_PATTERN = (
    r"[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+(\.[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?"
)
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4_PATTERN = rf"{_OCTET}(\.{_OCTET}){{3}}"
_H16 = r"[0-9a-fA-F]{1,4}"
IPV6_PATTERN = (
    "("
    + "|".join(
        [
            rf"({_H16}:){{7}}{_H16}",
            rf"({_H16}:){{1,7}}:",
            rf"({_H16}:){{1,6}}:{_H16}",
            rf"({_H16}:){{1,5}}(:{_H16}){{1,2}}",
            rf"({_H16}:){{1,4}}(:{_H16}){{1,3}}",
            rf"({_H16}:){{1,3}}(:{_H16}){{1,4}}",
            rf"({_H16}:){{1,2}}(:{_H16}){{1,5}}",
            rf"{_H16}:(:{_H16}){{1,6}}",
            rf":((:{_H16}){{1,7}}|:)",
        ]
    )
    + ")"
)
URI_PATTERN = r"[a-zA-Z][a-zA-Z0-9+.-]*:[^\x00-\x20\"<>\\^`{|}]*"
SEMVER_PATTERN = (
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(-(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?"
)
# A JSON string: any character but '"', '\\' and control characters, or an escape.
JSON_STRING_PATTERN = r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'

integer = Regex(INTEGER_PATTERN)
"""A JSON integer: ``0``, ``-12``, ``345``; no leading zeros, no ``+``."""
nonnegative_integer = Regex(r"(0|[1-9][0-9]*)")
positive_integer = Regex(r"[1-9][0-9]*")
number = Regex(NUMBER_PATTERN)
"""A JSON number: ``-3.14159e+10``."""
boolean = Regex(r"(true|false)")
"""A JSON boolean: ``true`` or ``false``."""
string = Regex(JSON_STRING_PATTERN)
"""A JSON string literal, quotes and escapes included."""
date = Regex(DATE_PATTERN)
"""An ISO 8601 date: ``2024-02-29``."""
time = Regex(TIME_PATTERN)
"""An ISO 8601 time: ``23:59:59`` or ``23:59:59.5``."""
datetime = Regex(DATETIME_PATTERN)
"""An ISO 8601 date and time, ``T``-separated, with an optional ``Z`` or offset."""
uuid4 = Regex(UUID4_PATTERN)
email = Regex(EMAIL_PATTERN)
ipv4 = Regex(IPV4_PATTERN)
ipv6 = Regex(IPV6_PATTERN)
uri = Regex(URI_PATTERN)
semver = Regex(SEMVER_PATTERN)
hex_str = Regex(r"(0x)?[0-9a-fA-F]+")
credit_card = Regex(r"[0-9]{4}([ -]?[0-9]{4}){3}")
"""16 digits in four groups, optionally separated by spaces or dashes (not Luhn-checked)."""
phone_us = Regex(r"(\([0-9]{3}\) ?|[0-9]{3}-)[0-9]{3}-[0-9]{4}")
zip_us = Regex(r"[0-9]{5}(-[0-9]{4})?")
isbn = Regex(r"(97[89]-?)?[0-9]{1,5}-?[0-9]{1,7}-?[0-9]{1,7}-?[0-9X]")
digit = Regex(r"[0-9]")
char = Regex(r"[^\x00-\x1f]")
whitespace = Regex(r"[ \t\n]+")
word = Regex(r"[a-zA-Z]+")
sentence = Regex(r"[A-Z][a-zA-Z0-9 ,;:'\-]*[.!?]")

# JSON Schema string formats -> the regex of the string's content (without quotes).
FORMAT_PATTERNS: dict[str, str] = {
    "date-time": DATETIME_PATTERN,
    "date": DATE_PATTERN,
    "time": TIME_PATTERN + TZ_PATTERN + "?",
    "uuid": UUID_PATTERN,
    "email": EMAIL_PATTERN,
    "uri": URI_PATTERN,
    "ipv4": IPV4_PATTERN,
    "ipv6": IPV6_PATTERN,
}
