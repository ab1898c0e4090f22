"""Every predefined type, with strings it must accept and strings it must reject."""

from __future__ import annotations

import re

import pytest

from outlines_like.types import predefined as p
from outlines_like.types import to_regex

CASES: list[tuple[str, list[str], list[str]]] = [
    ("integer", ["0", "-1", "42", "1234567890"], ["", "01", "+1", "-", "1.0", "1e3", " 1"]),
    ("nonnegative_integer", ["0", "7", "10"], ["-1", "01", ""]),
    ("positive_integer", ["1", "10"], ["0", "-1", "01"]),
    (
        "number",
        ["0", "-0.5", "3.14159", "-3.14159e+10", "1E5", "2e-3"],
        ["", ".5", "1.", "01", "1e", "+1", "--1", "1.2.3"],
    ),
    ("boolean", ["true", "false"], ["True", "False", "1", "yes", "truee"]),
    ("string", ['""', '"a b"', r'"q\"uote"', r'"\u00e9"', '"é"'], ['"', "abc", '"a"b"', r'"\x"']),
    (
        "date",
        ["2024-02-29", "1999-12-31", "0001-01-01"],
        ["2024-13-01", "2024-00-10", "24-01-01", "2023-02-29", "1900-02-29", "2024-04-31"],
    ),
    ("time", ["00:00:00", "23:59:59", "12:30:45.123"], ["24:00:00", "12:60:00", "1:00:00"]),
    (
        "datetime",
        ["2024-01-31T12:00:00", "2024-01-31T12:00:00Z", "2024-01-31T12:00:00.5+02:00"],
        ["2024-01-31 12:00:00", "2024-01-31T25:00:00", "2024-01-31"],
    ),
    (
        "uuid4",
        ["123e4567-e89b-42d3-a456-426614174000", "00000000-0000-4000-8000-000000000000"],
        ["123e4567-e89b-12d3-a456-426614174000", "123e4567e89b42d3a456426614174000"],
    ),
    (
        "email",
        ["a@b.co", "first.last+tag@example.org", "x_y@sub.domain.io"],
        ["@b.co", "a@", "a@b", "a b@c.de", "a@-b.com"],
    ),
    ("ipv4", ["0.0.0.0", "192.168.1.1", "255.255.255.255"], ["256.1.1.1", "1.2.3", "01.2.3.4x"]),
    (
        "ipv6",
        ["::1", "2001:db8::ff00:42:8329", "fe80:0:0:0:200:f8ff:fe21:67cf", "::"],
        ["2001:db8:::1", "12345::", "1:2:3:4:5:6:7:8:9", ":1"],
    ),
    (
        "uri",
        ["https://example.com/a?b=c", "mailto:x@y.z", "urn:isbn:123"],
        ["example.com", "1http://x"],
    ),
    (
        "semver",
        ["1.0.0", "0.12.3", "1.0.0-alpha.1", "1.0.0+build.5", "2.0.0-rc.1+sha.abc"],
        ["1.0", "01.0.0", "1.0.0-", "v1.0.0"],
    ),
    ("hex_str", ["0xdeadBEEF", "ff", "0x0"], ["0x", "xyz", "0xg1"]),
    (
        "credit_card",
        ["4111111111111111", "4111 1111 1111 1111", "4111-1111-1111-1111"],
        ["4111", "4111 1111 1111 111", "a111111111111111"],
    ),
    (
        "phone_us",
        ["(555) 123-4567", "555-123-4567", "(555)123-4567"],
        ["5551234567", "555 123 4567"],
    ),
    ("zip_us", ["12345", "12345-6789"], ["1234", "12345-678", "123456"]),
    ("digit", ["0", "9"], ["a", "10", ""]),
    ("word", ["hello", "ABC"], ["hello world", "a1", ""]),
    ("sentence", ["Hello world.", "Is it 5?"], ["hello world.", "Hello world"]),
    ("whitespace", [" ", "\t\n "], ["", "a"]),
]


@pytest.mark.parametrize(("name", "good", "bad"), CASES, ids=[c[0] for c in CASES])
def test_predefined_accepts_and_rejects(name: str, good: list[str], bad: list[str]) -> None:
    pattern = to_regex(getattr(p, name))
    for text in good:
        assert re.fullmatch(pattern, text), f"{name} should accept {text!r}"
    for text in bad:
        assert not re.fullmatch(pattern, text), f"{name} should reject {text!r}"


def test_every_exported_predefined_type_is_tested() -> None:
    tested = {c[0] for c in CASES}
    exported = {n for n in p.__all__ if n.islower() and not n.isupper()} - {"char", "isbn"}
    assert exported - tested == set()


@pytest.mark.parametrize("fmt", sorted(p.FORMAT_PATTERNS))
def test_format_patterns_never_allow_a_bare_quote_or_backslash(fmt: str) -> None:
    pattern = p.FORMAT_PATTERNS[fmt]
    assert not any('"' in m.group() for m in re.finditer(pattern, '"a"')), fmt
    assert not re.fullmatch(pattern, "a\\b")


PATTERNS = {
    name: getattr(getattr(p, name), "pattern", getattr(p, name))
    for name in p.__all__
    if name != "FORMAT_PATTERNS"
} | {f"format:{k}": v for k, v in p.FORMAT_PATTERNS.items()}


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_predefined_patterns_are_engine_portable(name: str) -> None:
    pattern = PATTERNS[name]
    for forbidden in (r"\d", r"\w", r"\s", "(?=", "(?!", "(?<", "*?", "+?"):
        assert forbidden not in pattern, f"{name} uses {forbidden}"
