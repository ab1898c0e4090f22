"""Tests for grammar conversions: Lark, EBNF and GBNF agree on what they accept.

References: Lark's Earley parser for Lark text, xgrammar (test-only) for EBNF/GBNF text,
``re.fullmatch`` for regexes.
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Callable
from typing import Any

import lark
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.types import CFG, predefined
from outlines_like.types.grammars import (
    check_grammar,
    ebnf_to_gbnf,
    ebnf_to_lark,
    gbnf_to_ebnf,
    lark_to_ebnf,
    lark_to_gbnf,
    regex_to_ebnf,
    regex_to_gbnf,
    regex_to_lark,
    validate_ebnf,
    validate_lark,
)

Accepts = Callable[[str, str], bool]


@pytest.fixture(scope="module")
def xgrammar_accepts() -> Accepts:
    """``accepts(ebnf_text, string)`` by xgrammar, the reference for EBNF and GBNF."""
    xgrammar = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string

    cache: dict[str, Any] = {}

    def accepts(ebnf: str, text: str) -> bool:
        if ebnf not in cache:
            cache[ebnf] = xgrammar.Grammar.from_ebnf(ebnf)
        return bool(_is_grammar_accept_string(cache[ebnf], text))

    return accepts


_LARK_CACHE: dict[str, lark.Lark] = {}


def lark_accepts(grammar: str, text: str) -> bool:
    """Lark's Earley parser (default lexer) as the reference for Lark text."""
    if grammar not in _LARK_CACHE:
        _LARK_CACHE[grammar] = lark.Lark(grammar, start="start", parser="earley")
    try:
        _LARK_CACHE[grammar].parse(text)
    except lark.exceptions.UnexpectedInput:
        return False
    return True


_BENCH_DATA = json.loads(
    (pathlib.Path(__file__).resolve().parents[1] / "data" / "bench_cases.json").read_text()
)
"""The masking benchmark's cases (tests/data/bench_cases.json, from the shared harness)."""
BENCH: dict[str, str] = dict(_BENCH_DATA["grammars"])
BENCH_REGEXES: list[tuple[str, str, str]] = [
    (f"re_{n}", rx, sample) for n, rx, sample in _BENCH_DATA["regexes"]
]
BENCH_SCHEMAS: list[tuple[str, dict[str, Any], object]] = [
    (n, schema, sample) for n, schema, sample in _BENCH_DATA["schemas"]
]

# --------------------------------------------------------------------------- Lark corpus

ARITH_LEFT_RECURSIVE = r"""
start: expr
?expr: expr "+" term -> add
     | expr "-" term -> sub
     | term
?term: term "*" atom | term "/" atom | atom
?atom: NUMBER | "(" expr ")" | "-" atom
NUMBER: /[0-9]+/
"""

JSON_COMMON = r"""
?start: value
?value: object | array | string | SIGNED_NUMBER -> number | "true" | "false" | "null"
array: "[" [value ("," value)*] "]"
object: "{" [pair ("," pair)*] "}"
pair: string ":" value
string: ESCAPED_STRING
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
"""

CSV = r"""
start: row (NEWLINE row)* NEWLINE?
row: field ("," field)*
field: QUOTED | BARE |
QUOTED: /"([^"]|"")*"/
BARE: /[^,"\n]+/
NEWLINE: "\n"
"""

SQL = r"""
start: "SELECT"i _cols "FROM"i NAME where? ";"?
_cols: "*" | NAME ("," NAME)*
where: "WHERE"i cond (("AND"i | "OR"i) cond)*
cond: NAME OP value
value: NUMBER | STRING
OP: "=" | "<>" | "<=" | ">=" | "<" | ">"
STRING: /'[^']*'/
NAME: CNAME
%import common.CNAME
%import common.NUMBER
%import common.WS
%ignore WS
"""

YES_NO = r"""
start: "yes" | "no"
"""

NESTED_LISTS = r"""
start: list
list: "[" [item ("," item)*] "]"
item: list | INT
%import common.INT
"""

TEMPLATES = r"""
start: pair{"a", "b"} _sep{"x"}
pair{left, right}: left right
_sep{s}: s+
"""

UNICODE_LITERALS = r"""
start: "café " QUOTE " \\ " EMOJI TAB?
QUOTE: "\"q\""
EMOJI: "😀" | /[α-ω]/
TAB: "\t"
"""

PRIORITY_AND_FLAGS = r"""
start: KEYWORD+ WORD
KEYWORD.2: /select|from/i
WORD: /[a-z]+/
%ignore " "
"""

LARK_CORPUS: list[tuple[str, str, list[str], list[str]]] = [
    (
        "arith_left_recursive",
        ARITH_LEFT_RECURSIVE,
        ["1", "1+2*3", "(1-2)/-3*4", "((7))"],
        ["", "1+", "+1", "(1", "1 + 2", "1*/2"],
    ),
    (
        "json_common",
        JSON_COMMON,
        [
            "{}",
            '{"a": [1, -2.5e3, true, null], "b\\"": {"c": "d"}}',
            ' [ 1 , "x" ] ',
            '"esc\\\\aped"',
        ],
        ["{", '{"a" 1}', "[1,]", "'x'", '"unterminated', '{"a":1}}', "tru"],
    ),
    (
        "csv",
        CSV,
        ["a,b,c", 'x,"y,z",\n1,2,3\n', '"say ""hi""",', ","],
        ['a"b', '"open', 'a,"b"c'],
    ),
    (
        "sql_select",
        SQL,
        [
            "SELECT * FROM t",
            "select a, b from users where age >= 18 and name = 'bob';",
            "SELECT x FROM y WHERE z <> 2.5",
        ],
        ["SELECT FROM t", "SELECT * FROM", "SELECT * FROM t WHERE", "SELECT a b FROM t"],
    ),
    ("yes_no", YES_NO, ["yes", "no"], ["", "yesno", "Yes", "maybe"]),
    (
        "nested_lists",
        NESTED_LISTS,
        ["[]", "[1,[2,[3,[]]],4]", "[[[[]]]]"],
        ["[", "[1,]", "[[1]", "[1 2]", "1"],
    ),
    ("templates", TEMPLATES, ["abx", "abxxx"], ["ab", "abxy", "bax"]),
    (
        "unicode_literals",
        UNICODE_LITERALS,
        ['café "q" \\ 😀', 'café "q" \\ λ\t'],
        ['cafe "q" \\ 😀', 'café "q" \\ a', 'café "q" \\😀'],
    ),
    (
        "priority_and_flags",
        PRIORITY_AND_FLAGS,
        ["select from x", "SELECT FrOm  select  abc"],
        ["abc", "select", "select 1"],
    ),
]
if BENCH:
    LARK_CORPUS += [
        ("bench_arith_lark", BENCH["arith_lark"], [BENCH["arith_sample"], "1"], ["1 +", "()"]),
        (
            "bench_json_lark",
            BENCH["json_lark"],
            [BENCH["json_sample"], "[]"],
            [BENCH["json_sample"][:-1], "[1,]"],
        ),
    ]


@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [pytest.param(g, good, bad, id=name) for name, g, good, bad in LARK_CORPUS],
)
def test_lark_corpus_is_right_about_lark(grammar: str, good: list[str], bad: list[str]) -> None:
    """The accept/reject table itself agrees with Lark (so the other tests test something)."""
    assert [lark_accepts(grammar, s) for s in good] == [True] * len(good)
    assert [lark_accepts(grammar, s) for s in bad] == [False] * len(bad)


@pytest.mark.parametrize("convert", [lark_to_ebnf, lark_to_gbnf])
@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [pytest.param(g, good, bad, id=name) for name, g, good, bad in LARK_CORPUS],
)
def test_lark_to_ebnf_and_gbnf_keep_the_language(
    xgrammar_accepts: Accepts,
    convert: Callable[[str], str],
    grammar: str,
    good: list[str],
    bad: list[str],
) -> None:
    ebnf = convert(grammar)
    assert ebnf.startswith("root ::= ")
    assert [xgrammar_accepts(ebnf, s) for s in good] == [True] * len(good), ebnf
    assert [xgrammar_accepts(ebnf, s) for s in bad] == [False] * len(bad), ebnf


@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [pytest.param(g, good, bad, id=name) for name, g, good, bad in LARK_CORPUS],
)
def test_lark_round_trip_through_ebnf(grammar: str, good: list[str], bad: list[str]) -> None:
    back = ebnf_to_lark(lark_to_ebnf(grammar))
    assert [lark_accepts(back, s) for s in good] == [True] * len(good), back
    assert [lark_accepts(back, s) for s in bad] == [False] * len(bad), back


def test_gbnf_names_have_no_underscores() -> None:
    gbnf = lark_to_gbnf(JSON_COMMON)
    names = re.findall(r"^(\S+) ::=", gbnf, re.MULTILINE)
    assert names[0] == "root"
    assert all(re.fullmatch(r"[A-Za-z0-9-]+", n) for n in names), names


def test_left_recursion_is_rewritten_as_repetition() -> None:
    gbnf = lark_to_gbnf(ARITH_LEFT_RECURSIVE)
    for line in gbnf.splitlines():
        name, body = line.split(" ::= ")
        assert not body.startswith(name + " "), line


def test_indirect_left_recursion_is_refused_for_gbnf_only(xgrammar_accepts: Accepts) -> None:
    grammar = 'start: a\na: b "x" | "y"\nb: a "z" | "w"\n'
    with pytest.raises(UnsupportedConstraintError, match=r"left recursion.*a -> b -> a"):
        lark_to_gbnf(grammar)
    ebnf = lark_to_ebnf(grammar)  # xgrammar takes left recursion
    assert xgrammar_accepts(ebnf, "yzx")
    assert not xgrammar_accepts(ebnf, "yz")


def test_ignore_is_an_optional_rule_between_symbols() -> None:
    ebnf = lark_to_ebnf(JSON_COMMON)
    assert ebnf.splitlines()[0] == "root ::= ignored start ignored"
    assert "ignored ::= [\\t\\n\\u000C\\r ]*" in ebnf


def test_common_escaped_string_is_resolved_without_lookbehind() -> None:
    ebnf = lark_to_ebnf("start: ESCAPED_STRING\n%import common.ESCAPED_STRING\n")
    assert 'ESCAPED_STRING ::= "\\"" ([^\\n"\\\\] | "\\\\" [^\\n])* "\\""' in ebnf


# --------------------------------------------------------------------------- EBNF corpus

GBNF_STYLE = r"""
# llama.cpp style: dashes in names, comments, bounded repetition
root ::= greeting-line ("," ws greeting-line){0,2}   # up to three
greeting-line ::= ("hi" | "hello") " " name
name ::= [A-Z] [a-z]{1,5}
ws ::= [ \t]?
"""

XGRAMMAR_STYLE = r"""
root ::= "[" (item ("," item)*)? "]"
item ::= num | "\"" chars "\"" | root
num ::= [0-9]{1,3}
chars ::= [^"\\\n\u00e9]* ("\\" ["\\n])? [^"\\\n\u00e9]*
"""

EMPTY_AND_DOT = r"""
root ::= a b "end"
a ::= "x" | ""
b ::= . .?
"""

# xgrammar has no `.`: its twin with [^\n] is the reference there.
XGRAMMAR_TWIN = {EMPTY_AND_DOT: EMPTY_AND_DOT.replace(". .?", "[^\\n] [^\\n]?")}

EBNF_CORPUS: list[tuple[str, str, list[str], list[str]]] = [
    (
        "gbnf_style",
        GBNF_STYLE,
        ["hi Bob", "hello Al, hi Zed,\tho Amy".replace("ho", "hi")],
        ["hi bob", "hi B", "hi Bob, hi Al, hi Cy, hi Di", "hi Bobbbby"],
    ),
    (
        "xgrammar_style",
        XGRAMMAR_STYLE,
        ['[1,"a\\"b",[22,[]]]', "[]", '["\\n"]'],
        ["[1234]", '["é"]', '["\\x"]', "[", "[1,]"],
    ),
    ("empty_and_dot", EMPTY_AND_DOT, ["xabend", "?end", "x!end"], ["end", "x\nend", "xabcend"]),
]
if BENCH:
    EBNF_CORPUS += [
        (
            name,
            BENCH[name],
            ([BENCH["json_sample"], "[]"] if "json" in name else [BENCH["arith_sample"], "1"]),
            (["[1,]", "{"] if "json" in name else ["1 +", "()"]),
        )
        for name in ("arith_ebnf", "json_ebnf", "json_ebnf_star")
    ]


@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [pytest.param(g, good, bad, id=name) for name, g, good, bad in EBNF_CORPUS],
)
def test_ebnf_corpus_is_right_about_xgrammar(
    xgrammar_accepts: Accepts, grammar: str, good: list[str], bad: list[str]
) -> None:
    twin = XGRAMMAR_TWIN.get(grammar, grammar)
    assert [xgrammar_accepts(twin, s) for s in good] == [True] * len(good)
    assert [xgrammar_accepts(twin, s) for s in bad] == [False] * len(bad)


@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [pytest.param(g, good, bad, id=name) for name, g, good, bad in EBNF_CORPUS],
)
def test_ebnf_to_lark_keeps_the_language(grammar: str, good: list[str], bad: list[str]) -> None:
    text = ebnf_to_lark(grammar)
    assert text.startswith("start: ")
    assert [lark_accepts(text, s) for s in good] == [True] * len(good), text
    assert [lark_accepts(text, s) for s in bad] == [False] * len(bad), text


@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [pytest.param(g, good, bad, id=name) for name, g, good, bad in EBNF_CORPUS],
)
def test_gbnf_to_ebnf_keeps_the_language(
    xgrammar_accepts: Accepts, grammar: str, good: list[str], bad: list[str]
) -> None:
    ebnf = gbnf_to_ebnf(grammar)
    assert [xgrammar_accepts(ebnf, s) for s in good] == [True] * len(good), ebnf
    assert [xgrammar_accepts(ebnf, s) for s in bad] == [False] * len(bad), ebnf


@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [pytest.param(g, good, bad, id=name) for name, g, good, bad in EBNF_CORPUS],
)
def test_ebnf_to_gbnf_and_back_through_lark(
    xgrammar_accepts: Accepts, grammar: str, good: list[str], bad: list[str]
) -> None:
    gbnf = ebnf_to_gbnf(grammar)
    assert [xgrammar_accepts(gbnf, s) for s in good] == [True] * len(good), gbnf
    assert [xgrammar_accepts(gbnf, s) for s in bad] == [False] * len(bad), gbnf
    again = lark_to_ebnf(ebnf_to_lark(grammar))
    assert [xgrammar_accepts(again, s) for s in good] == [True] * len(good), again
    assert [xgrammar_accepts(again, s) for s in bad] == [False] * len(bad), again


LEXER_SENSITIVE: list[tuple[str, str, list[str], list[str]]] = [
    ("literal_vs_class", 'root ::= "ab" | [a-z] [a-z] [a-z]', ["ab", "abc", "xyz"], ["abcd", "a"]),
    ("overlapping_classes", 'root ::= [a-z]+ "a"', ["ba", "aaa"], ["b", "ab"]),
    ("keyword_prefix", 'root ::= "true" | [a-z]+', ["true", "tru", "truex"], ["TRUE", ""]),
]


_BASIC_CACHE: dict[str, lark.Lark] = {}


def basic_lexer_accepts(grammar: str, text: str) -> bool:
    """Earley over Lark's basic lexer: longest match, no backtracking, no parser context."""
    if grammar not in _BASIC_CACHE:
        _BASIC_CACHE[grammar] = lark.Lark(grammar, start="start", parser="earley", lexer="basic")
    try:
        _BASIC_CACHE[grammar].parse(text)
    except lark.exceptions.UnexpectedInput:
        return False
    return True


@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [
        pytest.param(g, good, bad, id=name)
        for name, g, good, bad in EBNF_CORPUS + LEXER_SENSITIVE
        # Lark's basic lexer checks terminal collisions with interegular: minutes on JSON.
        if not name.startswith("json")
    ],
)
def test_one_char_terminals_mean_the_same_under_a_lexer(
    grammar: str, good: list[str], bad: list[str]
) -> None:
    text = ebnf_to_lark(grammar, one_char_terminals=True)
    assert [basic_lexer_accepts(text, s) for s in good] == [True] * len(good), text
    assert [basic_lexer_accepts(text, s) for s in bad] == [False] * len(bad), text
    assert [lark_accepts(text, s) for s in good] == [True] * len(good), text


def test_compact_terminals_depend_on_the_lexer() -> None:
    """Why ``one_char_terminals`` exists: a lexer takes ``ab`` whole and cannot read ``abc``."""
    grammar = 'root ::= "ab" | [a-z] [a-z] [a-z]'
    assert lark_accepts(ebnf_to_lark(grammar), "abc")
    assert not basic_lexer_accepts(ebnf_to_lark(grammar), "abc")
    assert basic_lexer_accepts(ebnf_to_lark(grammar, one_char_terminals=True), "abc")


@pytest.mark.parametrize(
    ("grammar", "expected"),
    [
        ('root ::= "ab" | [a-z]', 'start: "a" "b" | "a" | "b" | /[c-z]/\n'),
        ('root ::= [^"] "\\""', 'start: /[^"]/ "\\""\n'),
        ("root ::= [0-5] [3-9]", "start: (/[0-2]/ | /[3-5]/) (/[3-5]/ | /[6-9]/)\n"),
    ],
)
def test_one_char_terminals_text(grammar: str, expected: str) -> None:
    assert ebnf_to_lark(grammar, one_char_terminals=True) == expected


@pytest.mark.parametrize(
    ("ebnf", "lark_text"),
    [
        ('root ::= "a"', 'start: "a"\n'),
        ("root ::= my-rule\nmy-rule ::= [a-c]{2}", "start: my_rule\nmy_rule: /[a-c]/ ~ 2\n"),
        ('root ::= Start\nStart ::= "s"{1,}', 'start: start_2\nstart_2: "s"+\n'),
        ('root ::= "x"{2,}', 'start: "x" ~ 2 "x"*\n'),
        ('root ::= "q\\"\\\\\\n"', 'start: "q\\"\\\\\\n"\n'),
        (
            'root ::= "é\\u00e8😀"',
            'start: "é\\u00e8\\U0001f600"\n'.replace("é\\u00e8", "\\u00e9\\u00e8"),
        ),
        ('root ::= [^\\x00-\\x1f"]', 'start: /[^\\u0000-\\u001f"]/\n'),
        ('root ::= "a" | ""', 'start: "a"?\n'),
        ('root ::= ""', "start:\n"),
        ('root ::= "\\x41B"', 'start: "AB"\n'),
    ],
)
def test_ebnf_to_lark_text(ebnf: str, lark_text: str) -> None:
    assert ebnf_to_lark(ebnf) == lark_text
    lark.Lark(lark_text, start="start")


def test_cfg_lark_property_uses_ebnf_to_lark() -> None:
    cfg = CFG('root ::= "a" b\nb ::= [0-9]+\n')
    assert cfg.syntax == "ebnf"
    assert lark_accepts(cfg.lark, "a123")
    assert not lark_accepts(cfg.lark, "a")


# --------------------------------------------------------------------------- regex -> grammar

REGEX_TABLE: list[tuple[str, list[str], list[str]]] = [
    ("abc", ["abc"], ["ab", "abcd", ""]),
    (r"a\.b\\c\"d", ['a.b\\c"d'], ['axb\\c"d']),
    (r"\n\t\r\x01\u00e9\U0001F600", ["\n\t\r\x01é😀"], ["\n\t\r\x01e😀"]),
    ("[a-z]+[0-9]?", ["abc", "x7"], ["", "7", "ab77"]),
    ("[^a-c]", ["d", "-", "é"], ["a", "b", "", "dd"]),
    (r"[\]\[\\^-]", ["]", "[", "\\", "^", "-"], ["a"]),
    ("[-a]", ["-", "a"], ["b"]),
    (".", ["a", " ", "😀"], ["\n", "", "ab"]),
    ("(?s).", ["\n", "a"], ["", "ab"]),
    (r"\d\w\s", ["1a ", "٣_\t"], ["a1 ", "11x"]),
    (r"(?a)\d\w\s", ["1a ", "9_\n"], ["٣a ", "1é "]),
    (r"\D\W\S", ["a!x", "é-."], ["1!x", "aax", "a! "]),
    ("(ab|cd)+", ["ab", "abcd", "cdcdab"], ["", "abc", "ac"]),
    ("(?:x|y)(?P<n>z)", ["xz", "yz"], ["z", "xyz"]),
    ("a*b+c?d{2}e{1,}f{2,3}", ["bddeff", "aabcddeefff"], ["ddeff", "bdeff", "bddeffff"]),
    ("(a{0,2}b){2}", ["bb", "aabab"], ["b", "aaabb"]),
    ("a+?b*?", ["a", "aab"], ["b", ""]),
    ("^start$", ["start"], ["start\n", " start"]),
    (r"\Aa|b\Z", ["a", "b"], ["ab", ""]),
    ("(?i)hello", ["hello", "HeLLo"], ["hell0", "helo"]),
    ("(?i:[a-c])x", ["Ax", "cx"], ["aX", "dx"]),
    ('"([^"\\\\]|\\\\.)*"', ['""', '"a\\"b"'], ['"a"b"', '"']),
    ("", [""], ["a"]),
    ("a|", ["a", ""], ["b"]),
    ("x{0}", [""], ["x"]),
]


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [pytest.param(p, g, b, id=f"re{i}") for i, (p, g, b) in enumerate(REGEX_TABLE)],
)
def test_regex_table_is_right_about_re(pattern: str, good: list[str], bad: list[str]) -> None:
    assert all(re.fullmatch(pattern, s) for s in good)
    assert not any(re.fullmatch(pattern, s) for s in bad)


@pytest.mark.parametrize("convert", [regex_to_gbnf, regex_to_ebnf])
@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [pytest.param(p, g, b, id=f"re{i}") for i, (p, g, b) in enumerate(REGEX_TABLE)],
)
def test_regex_to_gbnf_keeps_the_language(
    xgrammar_accepts: Accepts,
    convert: Callable[[str], str],
    pattern: str,
    good: list[str],
    bad: list[str],
) -> None:
    gbnf = convert(pattern)
    assert [xgrammar_accepts(gbnf, s) for s in good] == [True] * len(good), gbnf
    assert [xgrammar_accepts(gbnf, s) for s in bad] == [False] * len(bad), gbnf


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [pytest.param(p, g, b, id=f"re{i}") for i, (p, g, b) in enumerate(REGEX_TABLE)],
)
def test_regex_to_lark_keeps_the_language(pattern: str, good: list[str], bad: list[str]) -> None:
    text = regex_to_lark(pattern)
    assert [lark_accepts(text, s) for s in good] == [True] * len(good), text
    assert [lark_accepts(text, s) for s in bad] == [False] * len(bad), text


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        pytest.param(p, g, b, id=f"re{i}")
        for i, (p, g, b) in enumerate(REGEX_TABLE)
        # Unicode \d \w \s: hundreds of ranges, too slow for the basic lexer's collision check.
        if "(?a)" in p or not re.search(r"\\[dwsDWS]", p)
    ],
)
def test_regex_to_lark_one_char_terminals(pattern: str, good: list[str], bad: list[str]) -> None:
    text = regex_to_lark(pattern, one_char_terminals=True)
    assert [basic_lexer_accepts(text, s) for s in good] == [True] * len(good), text
    assert [basic_lexer_accepts(text, s) for s in bad] == [False] * len(bad), text


@pytest.mark.parametrize(
    ("pattern", "gbnf"),
    [
        ("abc", 'root ::= "abc"\n'),
        ('a"b\\\\', 'root ::= "a\\"b\\\\"\n'),
        ("\n\u00e9\U0001f600\x7f", 'root ::= "\\n\\u00E9\\U0001F600\\u007F"\n'),
        ("[a-z0-9_]", "root ::= [0-9_a-z]\n"),
        ("[^\\]\\-^]", "root ::= [^\\u002D\\]\\u005E]\n"),
        ("(ab|c)*d?", 'root ::= ("ab" | "c")* "d"?\n'),
        ("x{3}y{2,}z{1,4}", 'root ::= "x"{3} "y"{2,} "z"{1,4}\n'),
        ("(a+)?", 'root ::= "a"*\n'),
        ("(?a)\\d", "root ::= [0-9]\n"),
        ("a.", 'root ::= "a" [^\\n]\n'),
    ],
)
def test_regex_to_gbnf_text(pattern: str, gbnf: str) -> None:
    assert regex_to_gbnf(pattern) == gbnf


def test_regex_to_gbnf_rule_name() -> None:
    assert regex_to_gbnf("a", rule_name="value-1") == 'value-1 ::= "a"\n'
    with pytest.raises(ValueError, match="invalid rule name"):
        regex_to_gbnf("a", rule_name="1 bad")


def _probes(sample: str) -> list[str]:
    """Strings near ``sample``: itself, cut, extended, with one character changed."""
    out = [sample, sample[:-1], sample + sample[-1:], sample + "!", "", " " + sample]
    for i in range(0, len(sample), max(1, len(sample) // 5)):
        out.append(sample[:i] + "Z" + sample[i + 1 :])
        out.append(sample[:i] + "5" + sample[i + 1 :])
    return out


PREDEFINED_SAMPLES: dict[str, str] = {
    "integer": "-120",
    "nonnegative_integer": "0",
    "positive_integer": "42",
    "number": "-3.25e+10",
    "boolean": "false",
    "string": '"a\\"b\\u00e9"',
    "date": "2024-02-29",
    "time": "23:59:59.5",
    "datetime": "2024-02-29T23:59:59+01:00",
    "uuid4": "123e4567-e89b-42d3-a456-426614174000",
    "email": "first.last@example.co.uk",
    "ipv4": "192.168.0.255",
    "ipv6": "2001:db8::ff00:42:8329",
    "uri": "https://example.com/a?b=c",
    "semver": "1.2.3-rc.1+build.5",
    "hex_str": "0xdeadBEEF",
    "credit_card": "1234 5678-9012 3456",
    "phone_us": "(555) 123-4567",
    "zip_us": "12345-6789",
    "isbn": "978-3-16-148410-0",
    "digit": "7",
    "char": "é",
    "whitespace": " \t\n",
    "word": "Hello",
    "sentence": "Hello, world.",
}


def _predefined_patterns() -> list[tuple[str, str, str]]:
    out = []
    for name, sample in PREDEFINED_SAMPLES.items():
        out.append((name, getattr(predefined, name).pattern, sample))
    for fmt, pattern in predefined.FORMAT_PATTERNS.items():
        sample = {
            "date-time": "2024-02-29T23:59:59Z",
            "date": "2024-02-29",
            "time": "12:00:00-05:00",
            "uuid": "123E4567-e89b-12d3-a456-426614174000",
            "email": "a@b.c",
            "uri": "urn:isbn:0451450523",
            "ipv4": "0.0.0.0",
            "ipv6": "::1",
            "duration": "P1DT2H",
            "hostname": "api.example.com",
            "uri-reference": "../a?b#c",
            "byte": "aGk/+w==",
        }[fmt]
        out.append((f"format_{fmt}", pattern, sample))
    out.append(("json_string", predefined.JSON_STRING_PATTERN, '"tab\\t"'))
    return out


@pytest.mark.parametrize(
    ("pattern", "sample"), [pytest.param(p, s, id=n) for n, p, s in BENCH_REGEXES]
)
def test_bench_regexes_convert(xgrammar_accepts: Accepts, pattern: str, sample: str) -> None:
    gbnf = regex_to_gbnf(pattern)
    probes = _probes(sample)
    expected = [re.fullmatch(pattern, s) is not None for s in probes]
    assert expected[0]
    assert not all(expected)
    assert [xgrammar_accepts(gbnf, s) for s in probes] == expected, gbnf


@pytest.mark.parametrize(
    ("schema", "sample"), [pytest.param(sc, sa, id=n) for n, sc, sa in BENCH_SCHEMAS]
)
def test_json_schema_regexes_convert(
    xgrammar_accepts: Accepts, schema: dict[str, Any], sample: object
) -> None:
    """The llama.cpp path for JSON Schema: schema -> regex -> GBNF keeps the documents."""
    from outlines_like.types.json_schema import json_schema_to_regex

    pattern = json_schema_to_regex(schema)
    gbnf = regex_to_gbnf(pattern)
    text = json.dumps(sample, separators=(",", ":"))
    assert re.fullmatch(pattern, text)
    assert xgrammar_accepts(gbnf, text)
    for broken in (text[:-1], text + "}", text.replace(":", "=", 1)):
        assert re.fullmatch(pattern, broken) is None
        assert not xgrammar_accepts(gbnf, broken)


def test_every_predefined_pattern_has_a_sample() -> None:
    terms = [n for n in predefined.__all__ if not n.isupper()]
    assert sorted(terms) == sorted(PREDEFINED_SAMPLES)


@pytest.mark.parametrize(
    ("pattern", "sample"), [pytest.param(p, s, id=n) for n, p, s in _predefined_patterns()]
)
def test_predefined_patterns_convert(xgrammar_accepts: Accepts, pattern: str, sample: str) -> None:
    gbnf = regex_to_gbnf(pattern)
    probes = _probes(sample)
    expected = [re.fullmatch(pattern, s) is not None for s in probes]
    assert expected[0]
    assert not all(expected)
    assert [xgrammar_accepts(gbnf, s) for s in probes] == expected, gbnf


PROPERTY_PATTERNS = [p for _, p, _ in _predefined_patterns()] + [
    r"\d\w\s",
    r"[^a-c]+(ab|cd){1,3}",
    "(?i)[a-f]x.",
    r'"([^"\\]|\\.)*"',
]


@pytest.mark.parametrize("pattern", PROPERTY_PATTERNS)
def test_regex_to_gbnf_agrees_with_re_on_generated_strings(
    xgrammar_accepts: Accepts, pattern: str
) -> None:
    """Strings drawn from the regex are accepted; arbitrary strings agree with re."""
    gbnf = regex_to_gbnf(pattern)

    @settings(max_examples=20, derandomize=True, deadline=None, database=None)
    @given(st.from_regex(pattern, fullmatch=True))
    def drawn_from_the_regex(text: str) -> None:
        assert xgrammar_accepts(gbnf, text), (text, gbnf)

    @settings(max_examples=20, derandomize=True, deadline=None, database=None)
    @given(st.text(alphabet=st.characters(codec="utf-8"), max_size=12))
    def arbitrary(text: str) -> None:
        expected = re.fullmatch(pattern, text) is not None
        assert xgrammar_accepts(gbnf, text) == expected, (text, gbnf)

    drawn_from_the_regex()
    arbitrary()


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("a(?=b)", "lookahead or lookbehind"),
        ("(?<!a)b", "lookahead or lookbehind"),
        (r"(a)\1", "backreference"),
        (r"(a)?(?(1)b|c)", "backreference"),
        (r"\bword", "word boundary"),
        ("a^b", "anchor"),
        ("a$b", "anchor"),
        ("(?>ab)c", "atomic group"),
        ("a++", "possessive"),
        ("a(b", "invalid regex 'a(b' at position 1"),
        ("[z-a]", "invalid regex"),
        (r"[^\s\S]", "matches no character"),
    ],
)
def test_regex_rejections(pattern: str, message: str) -> None:
    for convert in (regex_to_gbnf, regex_to_lark):
        with pytest.raises(InvalidConstraintError, match=re.escape(message)):
            convert(pattern)


@pytest.mark.parametrize(
    ("grammar", "error", "message"),
    [
        ('start: "a" b\nb: "x" ) \n', InvalidConstraintError, "line 2 column 8"),
        ('start: "a"\n  | undefined_rule\n', InvalidConstraintError, "line 2 column 5"),
        ('start: "a"\nstart: "b"\n', InvalidConstraintError, "defined more than once"),
        ('start: ""\n', InvalidConstraintError, "Empty terminals"),
        ("start: A\n%declare A\n", UnsupportedConstraintError, "%declare"),
        ("start: A\nA: /a.*?b/\n", UnsupportedConstraintError, "lazy quantifier"),
        ("start: A\nA: /a(?=b)/\n", InvalidConstraintError, "Lark terminal A"),
        ("start: B\nB: /a\\b/\n", InvalidConstraintError, "word boundary"),
    ],
)
def test_lark_rejections(grammar: str, error: type[Exception], message: str) -> None:
    for convert in (lark_to_ebnf, lark_to_gbnf):
        with pytest.raises(error, match=re.escape(message)):
            convert(grammar)


@pytest.mark.parametrize(
    ("grammar", "message"),
    [
        ('start: "a"\n  | "a" a\n', "line 2 column 9: Rule 'a' used but not defined"),
        ('start: "a"\n%ignore B\n', "line 2 column 9: Terminals {'B'}"),
        ('start: "a"\n%import nonexist.FOO\n', "line 2 column 1: %import of a grammar that"),
        ('start: "a\n', "line 1 column 8: unexpected input"),
        ("start: A\nA: /a(/\n", "line 2 column 7: invalid regex /a(/: missing )"),
        ('start: "a"\nB: C\nC: B\n', "line 2 column 1: Recursion in terminal 'B'"),
        ('start: t{"a"}\n', "line 1 column 8: Template 't' used but not defined"),
    ],
)
def test_validate_lark_says_where(grammar: str, message: str) -> None:
    with pytest.raises(InvalidConstraintError, match=re.escape(message)):
        validate_lark(grammar)


def test_lark_error_shows_the_offending_text() -> None:
    with pytest.raises(InvalidConstraintError) as info:
        validate_lark('start: "a"\n  | undefined_rule\n')
    assert "  | undefined_rule\n      ^" in str(info.value)


@pytest.mark.parametrize(
    ("grammar", "error", "message"),
    [
        ('root = "a"', InvalidConstraintError, "line 1 column 6: expected '::='"),
        ('root ::= "a\n', InvalidConstraintError, "line 1 column 10: unterminated string"),
        ('root ::= "a"\n  b-c', InvalidConstraintError, "line 2 column 3: rule 'b-c' is used"),
        ('main ::= "a"', InvalidConstraintError, "no `root` rule"),
        ("", InvalidConstraintError, "no rules"),
        ('root ::= "a"\nroot ::= "b"', InvalidConstraintError, "line 2 column 1: rule 'root' is"),
        ('root ::= "\\q"', InvalidConstraintError, "line 1 column 11: unknown escape \\q"),
        ('root ::= "\\x4"', InvalidConstraintError, "\\x needs 2 hex digits"),
        ("root ::= [b-a]", InvalidConstraintError, "out of order"),
        ("root ::= [a-z", InvalidConstraintError, "unterminated character class"),
        ('root ::= ("a"', InvalidConstraintError, "expected ')'"),
        ('root ::= "a"{3,1}', InvalidConstraintError, "maximum below its minimum"),
        ('root ::= "a" | )', InvalidConstraintError, "line 1 column 16: expected a rule name"),
        ('root ::= "a" (= "b")', UnsupportedConstraintError, "lookahead"),
    ],
)
def test_ebnf_rejections(grammar: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        ebnf_to_lark(grammar)
    with pytest.raises(error, match=re.escape(message)):
        validate_ebnf(grammar)


@pytest.mark.parametrize(
    ("ebnf", "gbnf"),
    [
        # llama.cpp names are letters, digits and dashes; a rule ends at a newline
        (
            'root ::= my_rule\nmy_rule ::= "a"\n  "b"\n  | "c"',
            'root ::= my-rule\nmy-rule ::= "ab" | "c"\n',
        ),
        ("root ::= x.y\nx.y ::= .", "root ::= x-y\nx-y ::= [^\\n]\n"),
        ('root ::= root "a" | "b"', 'root ::= "b" "a"*\n'),
        ('root ::= "\\x41\\x2d" [\\x2d]', 'root ::= "A-" [\\u002D]\n'),
    ],
)
def test_ebnf_to_gbnf_text(ebnf: str, gbnf: str) -> None:
    assert ebnf_to_gbnf(ebnf) == gbnf


def test_ebnf_to_gbnf_refuses_indirect_left_recursion() -> None:
    grammar = 'root ::= a\na ::= b "x" | "y"\nb ::= a "z"\n'
    with pytest.raises(UnsupportedConstraintError, match="a -> b -> a"):
        ebnf_to_gbnf(grammar)


@pytest.mark.parametrize(
    ("cfg", "error", "message"),
    [
        (CFG('start: "a" | b\nb: "b"\n'), None, ""),
        (CFG('root ::= "a" | b\nb ::= "b"\n'), None, ""),
        (CFG("start: a\n"), InvalidConstraintError, "line 1 column 8"),
        (CFG('root ::= "a" c\n'), InvalidConstraintError, "line 1 column 14"),
        (CFG("start: A\n%declare A\n", syntax="lark"), None, ""),
    ],
)
def test_check_grammar(cfg: CFG, error: type[Exception] | None, message: str) -> None:
    if error is None:
        check_grammar(cfg)
    else:
        with pytest.raises(error, match=re.escape(message)):
            check_grammar(cfg)


@pytest.mark.parametrize(
    "call",
    [
        lambda: check_grammar("start: a"),  # type: ignore[arg-type]
        lambda: lark_to_ebnf(b"start: a"),  # type: ignore[arg-type]
        lambda: ebnf_to_lark(None),  # type: ignore[arg-type]
        lambda: regex_to_gbnf(1),  # type: ignore[arg-type]
    ],
)
def test_wrong_argument_types(call: Callable[[], object]) -> None:
    with pytest.raises(TypeError):
        call()
