"""The one regex reader and the code-point set algebra: agreement with ``re``, linear time."""

from __future__ import annotations

import itertools
import re
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlines_like.errors import InvalidConstraintError
from outlines_like.fsm.regex_dfa import compile_regex
from outlines_like.types import _charset as cs
from outlines_like.types import _regex as rx

# --------------------------------------------------------------------------- the algebra

_SMALL = 40  # sets over 0..39, compared with Python sets
ranges_st = st.lists(
    st.tuples(st.integers(0, _SMALL - 1), st.integers(0, 5)).map(
        lambda t: (t[0], min(t[0] + t[1], _SMALL - 1))
    ),
    max_size=5,
)


def _points(ranges: cs.Ranges) -> set[int]:
    return {p for lo, hi in ranges for p in range(lo, hi + 1)}


def _within(ranges: cs.Ranges) -> set[int]:
    return {p for p in _points(cs.intersection(ranges, ((0, _SMALL - 1),)))}


@given(ranges_st, ranges_st)
def test_set_algebra_matches_python_sets(
    a: list[tuple[int, int]], b: list[tuple[int, int]]
) -> None:
    pa, pb = _points(tuple(a)), _points(tuple(b))
    norm = cs.normalize(a)
    assert _points(norm) == pa
    assert all(x[1] + 1 < y[0] for x, y in itertools.pairwise(norm))  # disjoint, merged
    assert _points(cs.union(a, b)) == pa | pb
    assert _points(cs.intersection(a, b)) == pa & pb
    assert _points(cs.difference(a, b)) == pa - pb
    assert _within(cs.complement(a)) == set(range(_SMALL)) - pa
    assert cs.complement(cs.complement(a)) == norm


def test_class_tables() -> None:
    assert cs.class_escape("d", "ascii") == ((0x30, 0x39),)
    assert cs.class_escape("D", "ascii") == cs.complement(((0x30, 0x39),))
    assert (0x0660, 0x0669) in cs.class_escape("d", "unicode")  # Arabic-Indic digits
    assert (0xA0, 0xA0) in cs.class_escape("s", "ecma")
    assert (0xA0, 0xA0) not in cs.class_escape("s", "ascii")
    assert 0x2028 not in _points(cs.dot("ecma"))
    assert 0x2028 in _points(cs.dot("ascii"))
    assert cs.drop_surrogates(((0xD000, 0xE000),)) == ((0xD000, 0xD7FF), (0xE000, 0xE000))


# --------------------------------------------------------------------------- agreement with re

_ATOMS = [
    "a",
    "b",
    "1",
    " ",
    "é",
    ".",
    r"\d",
    r"\w",
    r"\s",
    r"\D",
    r"\W",
    "[ab]",
    "[^a]",
    "[a-c1]",
    r"[\d_]",
    r"[^\s]",
    r"\x61",
    r"\t",
    r"\.",
    "[]a]",
    "[a-]",
]
_QUANTIFIERS = ["", "", "*", "+", "?", "{2}", "{1,2}", "{,2}", "{2,}", "*?", "??", "{0,1}?"]


def _pattern() -> st.SearchStrategy[str]:
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        group = st.sampled_from(["(", "(?:", "(?P<g>"]).flatmap(
            lambda opening: inner.map(lambda body: f"{opening}{body})")
        )
        quantified = st.tuples(group, st.sampled_from(_QUANTIFIERS)).map("".join)
        return st.one_of(
            st.lists(inner, min_size=2, max_size=4).map("".join),
            st.lists(inner, min_size=2, max_size=3).map("|".join),
            quantified,
        )

    atom = st.tuples(st.sampled_from(_ATOMS), st.sampled_from(_QUANTIFIERS)).map("".join)
    body = st.recursive(atom, extend, max_leaves=8)
    # named groups may appear once: number the later ones
    return st.tuples(
        st.sampled_from(["", "^", r"\A"]), body, st.sampled_from(["", "$", r"\Z"])
    ).map(lambda t: _unique_names(t[0] + t[1] + t[2]))


def _unique_names(pattern: str) -> str:
    count = iter(range(1000))
    return re.sub(r"\(\?P<g>", lambda _: f"(?P<g{next(count)}>", pattern)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=_pattern(), texts=st.lists(st.text("ab1 é_.\t\n-]", max_size=6), max_size=8))
def test_masker_agrees_with_re(pattern: str, texts: list[str]) -> None:
    """The reader + the masker's automaton accept what ``re.fullmatch`` (ASCII classes) does."""
    compiled = re.compile(pattern, re.ASCII)
    dfa = compile_regex(pattern)  # the atoms never make an empty set
    for text in texts:
        expected = compiled.fullmatch(text) is not None
        assert dfa.fullmatch(text.encode()) is expected, (pattern, text)
    # a string from the regex itself is accepted too
    for text in texts[:1]:
        match = compiled.search(text)
        if match and compiled.fullmatch(match.group()):
            assert dfa.fullmatch(match.group().encode())


@settings(max_examples=100, deadline=None)
@given(data=st.data(), pattern=_pattern())
def test_strings_of_the_regex_are_accepted(data: st.DataObject, pattern: str) -> None:
    try:
        dfa = compile_regex(pattern)
    except InvalidConstraintError:
        return
    text = data.draw(st.from_regex(re.compile(pattern, re.ASCII), fullmatch=True))
    assert dfa.fullmatch(text.encode()), (pattern, text)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("a(b", "position 1"),
        ("[z-a]", "position 1"),
        ("a{3,1}", "position 1"),
        ("(?=a)", "lookaround"),
        (r"(a)\1", "backreferences"),
        ("(?i)a", "inline flags"),
        ("a^b", "position 1"),
    ],
)
def test_errors_name_the_position(pattern: str, message: str) -> None:
    with pytest.raises(InvalidConstraintError, match=re.escape(message)):
        rx.parse_regex(pattern, strip_anchors=True)


def test_flags_and_classes() -> None:
    tree = rx.parse_regex("(?i)k", classes="unicode", inline_flags=True)
    assert tree == rx.Chars(((ord("K"), ord("K")), (ord("k"), ord("k"))))
    assert rx.parse_regex("(?s:.)", classes="unicode", inline_flags=True) == rx.Chars(
        ((0, cs.MAX_CODEPOINT),)
    )
    assert rx.parse_regex(r"(?a)\d", classes="unicode", inline_flags=True) == rx.Chars(
        ((0x30, 0x39),)
    )
    assert rx.parse_regex(r"\N{LATIN SMALL LETTER A}") == rx.Chars(((0x61, 0x61),))
    assert rx.parse_regex(r"\101") == rx.Chars(((0x41, 0x41),))  # three octal digits
    assert rx.width(rx.parse_regex("a{2,3}(b|cd)?")) == (2, 5)
    assert rx.width(rx.parse_regex("a+")) == (1, None)


# --------------------------------------------------------------------------- linear time


def _parse_seconds(pattern: str, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        rx.parse_regex(pattern)
        best = min(best, time.process_time() - start)
    return best


def test_reading_is_linear() -> None:
    """1 MB of ``(?:a|b)`` groups reads in about ten times the time of 100 kB, not 100 times.

    CPU time of this process, best of a few runs: other processes' load does not count.
    """
    group = "(?:a|b)"
    small = group * (100_000 // len(group))
    large = group * (1_000_000 // len(group))
    ratio = _parse_seconds(large, 2) / _parse_seconds(small, 3)
    assert ratio < 20, ratio


# --------------------------------------------------------------------------- the group memo


def _outcome(pattern: str, memo: bool, **kwargs: Any) -> object:
    """The tree (or the error message) of ``pattern``, with or without the reader's shortcuts."""
    with pytest.MonkeyPatch.context() as mp:
        if not memo:
            mp.setattr(rx, "_GROUP_MEMO_SPAN", 0)
            mp.setattr(rx, "_PLAIN_RUN", re.compile(r"(?!)"))
        try:
            return rx.parse_regex(pattern, **kwargs)
        except InvalidConstraintError as exc:
            return f"{type(exc).__name__}: {exc}"


@settings(max_examples=200, deadline=None)
@given(
    pattern=_pattern(),
    flags=st.sampled_from([0, re.IGNORECASE, re.VERBOSE, re.DOTALL | re.ASCII]),
    strip=st.booleans(),
)
def test_repeated_groups_read_as_if_read_again(pattern: str, flags: int, strip: bool) -> None:
    """Reused groups and plain runs give the tree (and errors) of a reading from scratch."""
    for text in (f"(?:{pattern})x(?:{pattern})", f"{pattern}|({pattern})*", f"ab{pattern}cd"):
        text = _unique_names(text)
        kwargs = {"flags": flags, "strip_anchors": strip}
        assert _outcome(text, True, **kwargs) == _outcome(text, False, **kwargs), text


@pytest.mark.parametrize(
    ("pattern", "kwargs"),
    [
        ("(?:^a)(?:^a)", {"strip_anchors": True}),  # the second anchor's position is named
        ("(?:a$)b(?:a$)", {"strip_anchors": True}),
        ("(?i:ab)(?:(?i:ab))", {"inline_flags": True}),
        ("(?:a # (\n)b(?:a # (\n)", {"flags": re.VERBOSE}),
        ("(?:[(]a)(?:[(]a)(?:\\(a)", {}),
        ("(?:ab)" + "(" * 100 + "(?:ab)" + ")" * 100, {}),  # the reuse would pass the depth limit
        ("(?:ab)" + "(" * 99 + "(?:ab)" + ")" * 99, {}),
        ("(?:ab{2)(?:ab{2)", {}),
        # long patterns: their parentheses are paired in numpy
        ("(?:[(]a)" * 150 + "(?:\\(a|b)" * 150 + "(?:c\\))" * 100, {}),
        ("(?:(?:ab)|c(?:d|e))" * 120 + "(?:ab)?", {}),
        ("(?:a # (\n)b" * 120, {"flags": re.VERBOSE}),
    ],
)
def test_group_memo_edge_cases(pattern: str, kwargs: dict[str, Any]) -> None:
    assert _outcome(pattern, True, **kwargs) == _outcome(pattern, False, **kwargs)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="()\\[]ab", max_size=60))
def test_long_patterns_pair_parentheses_as_short_ones(text: str) -> None:
    """The numpy pairing of a long pattern's parentheses is the match loop's."""
    loop = {}
    opened: list[int] = []
    for m in rx._PARENS.finditer(text):
        if text[m.start()] == "(":
            opened.append(m.start())
        elif opened:
            loop[opened.pop()] = m.start()
    expected = [loop.get(at, -1) for at in range(len(text))]
    assert list(rx._closing_parens_numpy(text)) == expected
    assert list(rx._closing_parens(text)) == expected


def test_remembered_groups_count_their_nesting_for_the_groups_around_them() -> None:
    # a group taken from the memo must raise its enclosing group's nesting as if read again:
    # otherwise the enclosing text is remembered as shallow and a later, deeper use of it
    # passes the depth limit (the build would then recurse past Python's stack)
    inner = "(" * 60 + "a" + ")" * 60
    outer = "(" + inner + ")"
    deep = "(" * 90 + outer + ")" * 90  # 151 levels
    rx.clear_group_memos()
    try:
        with pytest.raises(InvalidConstraintError, match="nested more than"):
            rx.parse_regex(deep)  # refused with a fresh memo...
        rx.parse_regex(inner)
        rx.parse_regex(outer)
        with pytest.raises(InvalidConstraintError, match="nested more than"):
            rx.parse_regex(deep)  # ...and after its parts were remembered
    finally:
        rx.clear_group_memos()
