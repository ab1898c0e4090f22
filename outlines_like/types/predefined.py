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
_YEAR = r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"  # 0001-9999, as Python's date
_MONTH_DAY = (
    r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    r"|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
# divisible by 4 and not by 100, or by 400 (0000 is not a year here)
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
RFC3339_DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
DATE_PATTERN = RFC3339_DATE  # real month lengths and leap years
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

# JSON Schema string formats -> the regex of the string's content (without quotes). Exact where
# a regex can be (RFC 3339 dates with month lengths and leap years, RFC 3986 URIs), narrower
# where it cannot (see docs/json_schema.md): never wider than the format.
_SECFRAC = r"(?:\.[0-9]+)?"
# A leap second only at 23:59:60 UTC, written with Z or a zero offset (other offsets shift it).
RFC3339_TIME = (
    rf"(?:(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]{_SECFRAC}"
    r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
    rf"|23:59:60{_SECFRAC}(?:[Zz]|[+-]00:00))"
)
RFC3339_DATETIME = rf"{RFC3339_DATE}[Tt]{RFC3339_TIME}"
_DEC_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_IPV4_EXACT = rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}"


def _ipv6_rfc3986() -> str:
    """RFC 3986's ``IPv6address``: eight 16-bit pieces, one ``::``, an IPv4 tail allowed."""
    h16 = "[0-9a-fA-F]{1,4}"
    ls32 = f"(?:{h16}:{h16}|{_IPV4_EXACT})"

    def head(most: int) -> str:  # [ *most( h16 ":" ) h16 ]
        if most < 0:
            return ""
        return f"(?:(?:{h16}:){{0,{most}}}{h16})?" if most else f"(?:{h16})?"

    forms = [f"(?:{h16}:){{6}}{ls32}", f"::(?:{h16}:){{5}}{ls32}"]
    for before, after in ((0, 4), (1, 3), (2, 2), (3, 1)):
        forms.append(f"{head(before)}::(?:{h16}:){{{after}}}{ls32}")
    forms += [f"{head(4)}::{ls32}", f"{head(5)}::{h16}", f"{head(6)}::"]
    return "(?:" + "|".join(forms) + ")"


RFC3986_IPV6 = _ipv6_rfc3986()
_PCT = "%[0-9A-Fa-f]{2}"
_UNRESERVED_SUB = "a-zA-Z0-9._~!$&'()*+,;=\\-"  # unreserved and sub-delims
_PCHAR = f"(?:[{_UNRESERVED_SUB}:@]|{_PCT})"
_QUERY = f"(?:[{_UNRESERVED_SUB}:@/?]|{_PCT})*"
_AUTHORITY = (
    f"(?:(?:[{_UNRESERVED_SUB}:]|{_PCT})*@)?"  # userinfo
    f"(?:\\[(?:{RFC3986_IPV6}|v[0-9A-Fa-f]+\\.[{_UNRESERVED_SUB}:]+)\\]"  # IP-literal
    f"|(?:[{_UNRESERVED_SUB}]|{_PCT})*)"  # IPv4address is a reg-name too
    "(?::[0-9]*)?"  # port
)
_PATH_ABEMPTY = f"(?:/{_PCHAR}*)*"
_AFTER_PATH = f"(?:\\?{_QUERY})?(?:#{_QUERY})?"
RFC3986_URI = (
    f"[a-zA-Z][a-zA-Z0-9+.-]*:(?://{_AUTHORITY}{_PATH_ABEMPTY}"
    f"|/(?:{_PCHAR}+{_PATH_ABEMPTY})?|{_PCHAR}+{_PATH_ABEMPTY})?{_AFTER_PATH}"
)
_RELATIVE_REF = (
    f"(?://{_AUTHORITY}{_PATH_ABEMPTY}|/(?:{_PCHAR}+{_PATH_ABEMPTY})?"
    f"|(?:[{_UNRESERVED_SUB}@]|{_PCT})+{_PATH_ABEMPTY})?{_AFTER_PATH}"
)
RFC3986_URI_REFERENCE = f"(?:{RFC3986_URI}|{_RELATIVE_REF})"
_ALNUM = "[a-zA-Z0-9]"
_LDH = "[a-zA-Z0-9-]"


def _label(most: int) -> str:
    """A host-name label of 1 to ``most`` characters, never ``--`` in 3rd and 4th place.

    Such labels are reserved for A-labels (``xn--``: punycode, not checked by a regex).
    """
    return (
        f"{_ALNUM}(?:{_LDH}?{_ALNUM}|{_LDH}{_LDH}{_ALNUM}"
        f"|{_LDH}(?:{_ALNUM}{_LDH}|-{_ALNUM}){_LDH}{{0,{most - 5}}}{_ALNUM})?"
    )


# RFC 1123 host names: labels of 1-63 letters, digits and inner hyphens, 253 characters at most.
# The total is kept by shape: up to four labels (the fourth up to 61 characters), or five to ten
# labels of up to 20 characters.
HOSTNAME_PATTERN = (
    f"(?:{_label(63)}(?:\\.{_label(63)}){{0,2}}(?:\\.{_label(61)})?"
    f"|{_label(20)}(?:\\.{_label(20)}){{4,9}})"
)
_DIGITS = "[0-9]+"
_DUR_TIME = f"T(?:{_DIGITS}H(?:{_DIGITS}M(?:{_DIGITS}S)?)?|{_DIGITS}M(?:{_DIGITS}S)?|{_DIGITS}S)"
_DUR_DATE = f"(?:{_DIGITS}D|{_DIGITS}M(?:{_DIGITS}D)?|{_DIGITS}Y(?:{_DIGITS}M(?:{_DIGITS}D)?)?)"
DURATION_PATTERN = f"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|{_DIGITS}W)"  # RFC 3339 app. A
_ATEXT = "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+"
_DOMAIN_LABEL = "[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
# RFC 5321 mailboxes with a dot-atom local part (quoted local parts are not written).
EMAIL_EXACT = (
    f"{_ATEXT}(?:\\.{_ATEXT})*@(?:(?:{_DOMAIN_LABEL}\\.)+{_DOMAIN_LABEL}"
    f"|\\[(?:{_IPV4_EXACT}|IPv6:{RFC3986_IPV6})\\])"
)
# OpenAPI's ``byte``: base64-encoded data (RFC 4648 section 4: the standard alphabet, padded to
# whole 4-character groups, no line breaks), as Kubernetes' schemas use it (Secret data,
# certificate bundles).
BASE64_PATTERN = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
FORMAT_PATTERNS: dict[str, str] = {
    "date-time": RFC3339_DATETIME,
    "date": RFC3339_DATE,
    "time": RFC3339_TIME,
    "duration": DURATION_PATTERN,
    "uuid": UUID_PATTERN,
    "email": EMAIL_EXACT,
    "hostname": HOSTNAME_PATTERN,
    "uri": RFC3986_URI,
    "uri-reference": RFC3986_URI_REFERENCE,
    "ipv4": _IPV4_EXACT,
    "ipv6": RFC3986_IPV6,
    "byte": BASE64_PATTERN,
}
