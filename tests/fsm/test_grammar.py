"""The grammar path of the token masker: accept/reject tables over tiny vocabularies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.fsm._grammar_parser import LALRParser
from outlines_like.fsm._protocols import Compiled, Matcher, RejectedTokenError
from outlines_like.fsm.grammar import (
    JSON_OBJECT_GRAMMAR,
    CompiledGrammar,
    GrammarMatcher,
    compile_grammar,
    compile_json_object,
)
from outlines_like.fsm.vocabulary import Vocabulary
from outlines_like.types import CFG

JSON_LARK = r"""
start: value
value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
array: "[" [value ("," value)*] "]"
STRING: /"([^"\\\x00-\x1f]|\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/
NUMBER: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/
%ignore /[ \t\n\r]+/
"""

ARITH_LARK = r"""
start: expr
expr: term | expr ADDOP term
term: factor | term MULOP factor
factor: NUMBER | "(" expr ")" | "-" factor
ADDOP: "+" | "-"
MULOP: "*" | "/"
NUMBER: /[0-9]+(\.[0-9]+)?/
%ignore " "
"""

# Keywords vs names: Lark retypes a NAME equal to a keyword (its UnlessCallback).
KEYWORDS = r"""
start: stmt+
stmt: "let" NAME "=" NAME ";" | NAME ";"
NAME: /[a-z]+/
%ignore " "
"""

# Terminal priority: Lark's scanner tries IF before NAME, so "ifx" is IF then NAME.
PRIORITY = r"""
start: stmt+
stmt: IF NAME ";" | NAME "=" NAME ";"
IF.2: "if"
NAME: /[a-z]+/
%ignore " "
"""

# Lark's own tutorial grammar: common.lark terminals (ESCAPED_STRING uses a lookbehind).
LARK_TUTORIAL_JSON = r"""
start: value
?value: dict | list | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
list : "[" [value ("," value)*] "]"
dict : "{" [pair ("," pair)*] "}"
pair : ESCAPED_STRING ":" value
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
"""

# Not LALR(1): the optional spaces make a shift/reduce conflict (Lark's LALR would reject
# "1 + 2"); the matcher runs it with its GLR parser.
ARITH_WS = r"""
start: expr
expr: term (ws ADD ws term)*
term: factor (ws MUL ws factor)*
factor: NUM | "(" ws expr ws ")"
ws: SP*
ADD: "+"
MUL: "*"
SP: " "
NUM: /[0-9]+/
"""

# Reduce/reduce conflict: Lark refuses LALR; the GLR parser takes it.
REDUCE_REDUCE = r"""
start: a "!" | b "!" | b "?"
a: X
b: X
X: "x"
"""

EOS = b"<eos>"
SPECIAL = b"<|special|>"
MULTI = [b'{"', b'":', b'": ', b"true", b", ", b'", "', b"  ", b"12", b'"}', b"1.", b".5", b"e+"]
MULTI += [b"null,", b"\xc3", b"\xa9", b"\xc3\xa9", b" + ", b"(-", b"let", b" let", b"xy;", b"\\u00"]


def make_vocab() -> Vocabulary:
    """Every single byte, some multi-byte tokens, a special token and EOS."""
    tokens = [bytes([b]) for b in range(256)] + MULTI + [SPECIAL, EOS]
    return Vocabulary(tokens, eos_token_ids=len(tokens) - 1, special_token_ids=[len(tokens) - 2])


VOCAB = make_vocab()
EOS_ID = VOCAB.eos_token_ids[0]
SPECIAL_ID = EOS_ID - 1
TOKEN_ID = {t: i for i, t in enumerate(VOCAB.tokens) if i not in VOCAB.special_token_ids}


def greedy(text: bytes) -> list[int]:
    """Greedy longest-match tokenization over VOCAB."""
    out, i = [], 0
    while i < len(text):
        best = max((t for t in TOKEN_ID if text.startswith(t, i)), key=len)
        out.append(TOKEN_ID[best])
        i += len(best)
    return out


def run(compiled: CompiledGrammar, text: bytes, tokens: list[int] | None = None) -> str:
    """Feed text through a matcher: "complete", "prefix" or "rejected"."""
    m = compiled.matcher()
    for t in greedy(text) if tokens is None else tokens:
        if t not in m.allowed_token_ids():
            with pytest.raises(RejectedTokenError):
                m.advance(t)
            return "rejected"
        m.advance(t)
    return "complete" if EOS_ID in m.allowed_token_ids() else "prefix"


@pytest.fixture(scope="module")
def json_grammar() -> CompiledGrammar:
    return compile_grammar(CFG(JSON_LARK), VOCAB)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b'{"a": 1}', "complete"),
        (b'{"a": [1, 2.5, -3e+10, true, false, null]}', "complete"),
        (b'  {"a" :\n{"b":"\\u00e9\\n"}}  ', "complete"),
        (b'"caf\xc3\xa9"', "complete"),  # UTF-8 split over tokens
        (b"[]", "complete"),
        (b"12", "complete"),
        (b"1.", "prefix"),
        (b'{"a": 1', "prefix"),
        (b'{"a"', "prefix"),
        (b'"abc', "prefix"),
        (b"tru", "prefix"),
        (b'{"a" 1}', "rejected"),
        (b'{"a": 1,}', "rejected"),
        (b"[1 2]", "rejected"),
        (b"truex", "rejected"),
        (b"true false", "rejected"),
        (b"01", "rejected"),
        (b'"a\nb"', "rejected"),  # raw control character in a string
        (b'"\\x"', "rejected"),
        (b"1.x", "rejected"),
        (b"\xc3\xa9", "rejected"),
    ],
)
def test_json_accept_reject(json_grammar: CompiledGrammar, text: bytes, expected: str) -> None:
    assert run(json_grammar, text) == expected
    assert run(json_grammar, text, [TOKEN_ID[bytes([b])] for b in text]) == expected
    assert json_grammar.accepts_text(text) == (expected == "complete")


@pytest.mark.parametrize(
    ("grammar", "text", "expected"),
    [
        (ARITH_LARK, b"(12 + 4.5) * 3 - 7 / (2 + 8) * -1.25", "complete"),
        (ARITH_LARK, b"1+2", "complete"),
        (ARITH_LARK, b"--1", "complete"),
        (ARITH_LARK, b"(1", "prefix"),
        (ARITH_LARK, b"1 +", "prefix"),
        (ARITH_LARK, b"1 + * 2", "rejected"),
        (ARITH_LARK, b"()", "rejected"),
        (ARITH_LARK, b"1 2", "rejected"),
        (KEYWORDS, b"let x = y;", "complete"),
        (KEYWORDS, b"letter;", "complete"),  # a NAME that starts like the keyword
        (KEYWORDS, b"let;", "rejected"),  # "let" is the keyword, never a NAME
        (KEYWORDS, b"x; let a = b; xy;", "complete"),
        # after "let" only a NAME can come, so Lark's contextual lexer reads "let" as a NAME
        (KEYWORDS, b"let let = x;", "complete"),
        (PRIORITY, b"if x;", "complete"),
        (PRIORITY, b"ifx;", "complete"),  # IF "if", NAME "x"
        (PRIORITY, b"i = y;", "complete"),
        (PRIORITY, b"iffy = a;", "rejected"),  # IF "if", NAME "fy", then "=" is an error
        (PRIORITY, b"if = a;", "rejected"),
        (LARK_TUTORIAL_JSON, b'{"a": [1, -2.5e3, "x\\"y\\\\"]}', "complete"),
        (LARK_TUTORIAL_JSON, b'["a\\"]', "prefix"),  # the quote is escaped
        (LARK_TUTORIAL_JSON, b'["a"b"]', "rejected"),
        (ARITH_WS, b"1 + 2", "complete"),
        (ARITH_WS, b"( 1  +  2 ) * 3", "complete"),
        (ARITH_WS, b"1 + ", "prefix"),
        (ARITH_WS, b"1 2", "rejected"),
        (REDUCE_REDUCE, b"x!", "complete"),
        (REDUCE_REDUCE, b"x?", "complete"),
        (REDUCE_REDUCE, b"x", "prefix"),
        (REDUCE_REDUCE, b"x.", "rejected"),
    ],
)
def test_grammar_accept_reject(grammar: str, text: bytes, expected: str) -> None:
    compiled = compile_grammar(CFG(grammar), VOCAB)
    assert run(compiled, text) == expected
    assert run(compiled, text, [TOKEN_ID[bytes([b])] for b in text]) == expected


@pytest.mark.parametrize(
    ("grammar", "is_lalr"), [(JSON_LARK, True), (ARITH_WS, False), (REDUCE_REDUCE, False)]
)
def test_parser_kind(grammar: str, is_lalr: bool) -> None:
    assert compile_grammar(CFG(grammar), VOCAB).is_lalr is is_lalr


def test_token_spanning_several_terminals(json_grammar: CompiledGrammar) -> None:
    m = json_grammar.matcher()
    for t in [b"[", b"1", b", ", b"null,"]:
        m.advance(TOKEN_ID[t])  # ", " ends NUMBER, COMMA and the ignored space; "null," two
    allowed = {VOCAB.tokens[i] for i in m.allowed_token_ids()}
    assert b" " in allowed  # whitespace before the next value
    assert b'{"' in allowed
    assert b"]" not in allowed  # no trailing comma
    assert b'"}' in allowed  # a string starting with a closing brace
    assert EOS not in allowed


def test_eos_exactly_when_complete(json_grammar: CompiledGrammar) -> None:
    m = json_grammar.matcher()
    assert EOS_ID not in m.allowed_token_ids()  # the empty text is no JSON value
    m.advance(TOKEN_ID[b"12"])
    assert EOS_ID in m.allowed_token_ids()  # "12" is complete ...
    assert TOKEN_ID[b"1."] in m.allowed_token_ids()  # ... and "121." a prefix
    assert TOKEN_ID[b"-"] not in m.allowed_token_ids()
    m.advance(TOKEN_ID[b".5"])
    assert EOS_ID in m.allowed_token_ids()
    m.advance(TOKEN_ID[b"e+"])
    assert EOS_ID not in m.allowed_token_ids()


def test_special_tokens_never_allowed() -> None:
    # the special token's bytes would fit a string; they are never text
    compiled = compile_grammar(CFG(r'start: /"[^"]*"/'), VOCAB)
    m = compiled.matcher()
    m.advance(TOKEN_ID[b'"'])
    assert SPECIAL_ID not in m.allowed_token_ids()
    with pytest.raises(RejectedTokenError):
        m.advance(SPECIAL_ID)


def test_rejection_contract(json_grammar: CompiledGrammar) -> None:
    m = json_grammar.matcher()
    m.advance(TOKEN_ID[b"["])
    before = m.allowed_token_ids()
    for bad in (TOKEN_ID[b"]"] + 10**6, -1, TOKEN_ID[b":"], EOS_ID):
        with pytest.raises(RejectedTokenError) as info:
            m.advance(bad)
        assert info.value.token_id == bad
    np.testing.assert_array_equal(m.allowed_token_ids(), before)  # state unchanged
    m.advance(TOKEN_ID[b"]"])
    m.advance(EOS_ID)
    assert m.is_finished()
    np.testing.assert_array_equal(m.allowed_token_ids(), [EOS_ID])
    m.advance(EOS_ID)  # no-op
    with pytest.raises(RejectedTokenError):
        m.advance(TOKEN_ID[b" "])


def test_copy_and_reset(json_grammar: CompiledGrammar) -> None:
    m = json_grammar.matcher()
    m.advance(TOKEN_ID[b"["])
    fork = m.copy()
    fork.advance(TOKEN_ID[b"]"])
    assert EOS_ID in fork.allowed_token_ids()
    assert EOS_ID not in m.allowed_token_ids()
    m.advance(TOKEN_ID[b"1"])
    m.reset()
    np.testing.assert_array_equal(m.allowed_token_ids(), json_grammar.matcher().allowed_token_ids())
    assert isinstance(m, Matcher)
    assert isinstance(json_grammar, Compiled)
    assert json_grammar.vocabulary is VOCAB


@pytest.mark.parametrize("shape", ["flat", "row", "batch_row"])
def test_fill_bitmask_layout(json_grammar: CompiledGrammar, shape: str) -> None:
    m = json_grammar.matcher()
    m.advance(TOKEN_ID[b"{"])
    words = VOCAB.mask_words
    batch = np.full((3, words), -1, dtype=np.int32)
    out = {"flat": batch[0], "row": batch[:1], "batch_row": batch[1]}[shape]
    m.fill_bitmask(out)
    filled = out.reshape(-1)
    bits = np.unpackbits(filled.view(np.uint8), bitorder="little")[: len(VOCAB)]
    np.testing.assert_array_equal(np.flatnonzero(bits), m.allowed_token_ids())
    assert set(np.flatnonzero(bits)) == {
        TOKEN_ID[b" "],
        TOKEN_ID[b"\t"],
        TOKEN_ID[b"\n"],
        TOKEN_ID[b"\r"],
        TOKEN_ID[b"  "],
        TOKEN_ID[b'"'],
        TOKEN_ID[b'"}'],
        TOKEN_ID[b"}"],
        TOKEN_ID[b'", "'],
        TOKEN_ID[b'":'],
        TOKEN_ID[b'": '],
    }
    assert batch[2].tolist() == [-1] * words  # nothing else written


def test_fill_bitmask_wrong_size(json_grammar: CompiledGrammar) -> None:
    with pytest.raises(ValueError, match="words"):
        json_grammar.matcher().fill_bitmask(np.zeros(VOCAB.mask_words + 1, dtype=np.int32))


@pytest.mark.parametrize(
    ("grammar", "error", "match"),
    [
        ("start: (", InvalidConstraintError, "line 1 column 9"),
        ('start: "a" undefined_rule', InvalidConstraintError, "undefined_rule"),
        ("start: A\nA: /[a-/", InvalidConstraintError, "A"),
        ("start: B\nB: /x*/", InvalidConstraintError, "zero-width"),
        ('start: "a"\n%ignore /x*/', InvalidConstraintError, "zero-width"),
        ("start: A\nA: /ab/i", UnsupportedConstraintError, "flags"),
        ("start: A\nA: /a(?=b)b/", UnsupportedConstraintError, "lookaround"),
        ('start: a\na: b a "x" | "y"\nb:', UnsupportedConstraintError, "rule 'a' is left-rec"),
        ('start: s\ns: s s | "a" |', UnsupportedConstraintError, "rule 's' is left-recursive"),
        ('other: "a"', InvalidConstraintError, "start"),
    ],
)
def test_bad_grammars(grammar: str, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        compile_grammar(CFG(grammar, "lark"), VOCAB)


@pytest.mark.parametrize(
    "regexp",
    [
        "[0-9]+",
        "(a|bc)?d{2,5}",
        "x*y",
        r"\\p{L}",
        "(?<=a+)b",
        "[",
        "a{2,1}",
        "(?#c)",
        r"\d{0,70000}",
    ],
)
def test_terminal_validation_matches_res_and_larks(regexp: str) -> None:
    """One parse checks a terminal as ``re.compile`` does and gives Lark's own width."""
    import re

    from lark.lexer import PatternRE, TerminalDef

    from outlines_like.fsm import grammar

    reference = PatternRE(regexp, ())
    try:
        re.compile(regexp)
        expected: Any = ("width", reference.min_width, reference.max_width)
    except re.error as exc:
        expected = ("error", str(exc))
    for fresh in (True, False):  # the regexp's first check, then a known one
        if fresh:
            grammar._compiled_regexps.clear()
        pattern = PatternRE(regexp, ())
        try:
            grammar._validate_terminals([TerminalDef("T", pattern)])
            found: Any = ("width", pattern.min_width, pattern.max_width)
        except InvalidConstraintError as exc:
            found = ("error", str(exc).rsplit("): ", 1)[-1])
            if "zero-width" in str(exc):
                found = ("width", pattern.min_width, pattern.max_width)
        assert found == expected


@pytest.mark.parametrize("grammar", [JSON_LARK, ARITH_LARK, KEYWORDS, PRIORITY, LARK_TUTORIAL_JSON])
def test_lexer_contexts_match_larks_contextual_lexer(grammar: str) -> None:
    """The contexts, built without Lark's lexer validation, are Lark's own, state by state."""
    import lark

    reference = lark.Lark(grammar, parser="lalr", lexer="contextual", start="start")
    compiled = CompiledGrammar(grammar, VOCAB)
    parser = compiled._parser
    assert isinstance(parser, LALRParser)

    def scanner(terminals: list[Any], callbacks: dict[str, Any]) -> tuple[Any, Any]:
        order = [t.name for t in terminals]
        unless = {
            name: [t.name for t in callback.scanner.terminals]
            for name, callback in callbacks.items()
            if hasattr(callback, "scanner")
        }
        return order, unless

    # the two tables may number the LALR states differently: key a state by its actions
    ours = {frozenset(parser.actions[state]): compiled._scanner(state) for state in parser.actions}
    table = reference.parser.parser._parse_table
    theirs = {
        frozenset(table.states[state]): scanner(lexer.scanner.terminals, lexer.callback)
        for state, lexer in reference.parser.lexer.lexers.items()
    }
    assert ours == theirs


@pytest.mark.parametrize(("grammar", "ok"), [(ARITH_LARK, True), ("start: (", False)])
def test_lark_collision_check_switch_is_restored(grammar: str, ok: bool) -> None:
    import lark.lexer

    before = lark.lexer.has_interegular
    if ok:
        CompiledGrammar(grammar, VOCAB)
    else:
        with pytest.raises(InvalidConstraintError):
            CompiledGrammar(grammar, VOCAB)
    assert lark.lexer.has_interegular is before


def test_case_insensitive_literal() -> None:
    compiled = compile_grammar(CFG('start: "null"i'), VOCAB)
    assert [run(compiled, t) for t in (b"NuLL", b"null", b"nul", b"nulx")] == [
        "complete",
        "complete",
        "prefix",
        "rejected",
    ]


def test_not_a_cfg() -> None:
    with pytest.raises(TypeError, match="CFG"):
        compile_grammar("start: A", VOCAB)  # type: ignore[arg-type]


def test_compiled_is_cached_per_vocabulary() -> None:
    a = compile_grammar(CFG(JSON_LARK), VOCAB)
    assert compile_grammar(CFG(JSON_LARK), VOCAB) is a
    assert compile_grammar(CFG(JSON_LARK), make_vocab()) is not a


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b'{"a": {"b": [1, "x", null]}}', "complete"),
        (b" {} ", "complete"),
        (b"[1]", "rejected"),
        (b'"x"', "rejected"),
        (b"1", "rejected"),
        (b'{"a": 1', "prefix"),
    ],
)
def test_json_object_grammar(text: bytes, expected: str) -> None:
    compiled = compile_json_object(VOCAB)
    assert compiled is compile_grammar(CFG(JSON_OBJECT_GRAMMAR), VOCAB)
    assert run(compiled, text) == expected


def test_ebnf_grammar_goes_through_lark() -> None:
    compiled = compile_grammar(CFG('root ::= "a" [0-9]+', "ebnf"), VOCAB)
    assert [run(compiled, t) for t in (b"a12", b"a", b"b")] == ["complete", "prefix", "rejected"]


def test_matcher_is_independent_of_mask_order(json_grammar: CompiledGrammar) -> None:
    # advancing without asking for masks first gives the same states
    text = b'{"k": [1, {"z": "\\u00e9"}]}'
    a, b = json_grammar.matcher(), json_grammar.matcher()
    for t in greedy(text):
        a.advance(t)
        b.allowed_token_ids()
        b.advance(t)
    assert isinstance(a, GrammarMatcher)
    np.testing.assert_array_equal(a.allowed_token_ids(), b.allowed_token_ids())
    assert EOS_ID in a.allowed_token_ids()


@pytest.mark.parametrize("order", ["table", "copy", "shuffled"])
@pytest.mark.parametrize("lex", [0, 1, 2, 3])
def test_lexical_walk_is_independent_of_item_order(order: str, lex: int) -> None:
    """The whole-vocabulary shortcut and the unsorted fallback give the same walk."""
    from outlines_like.fsm._grammar_walk import byte_table, walk

    compiled = compile_grammar(CFG(JSON_LARK), VOCAB)
    m = compiled.matcher()
    for token in (TOKEN_ID[b'{"'], TOKEN_ID[b"a"]):  # inside a string: self-looping bytes
        m.advance(token)
    context = compiled._context(m._stack)
    table = byte_table(VOCAB)
    ids = {
        "table": table.text_ids,
        "copy": table.text_ids.copy(),
        "shuffled": np.random.default_rng(lex).permutation(table.text_ids),
    }[order]
    start = min(lex, context.n_states - 1)
    res = walk(table, context.flat, start, ids)
    ref = walk(table, context.flat, start, table.text_ids.copy())

    def outcome(r: Any, item_ids: Any) -> set[tuple[int, ...]]:
        ends = {(int(item_ids[i]), int(s)) for i, s in zip(r.end_items, r.end_states, strict=True)}
        stops = {
            (int(item_ids[i]), int(o), int(s), -1)
            for i, o, s in zip(r.stop_items, r.stop_offsets, r.stop_states, strict=True)
        }
        return ends | stops

    assert outcome(res, ids) == outcome(ref, table.text_ids)
    assert len(res.end_items) + len(res.stop_items) == len(ids)


@pytest.mark.parametrize("grammar", [JSON_LARK, ARITH_LARK])
def test_whole_vocabulary_first_column_matches_the_general_walk(grammar: str) -> None:
    """The whole-vocabulary walk (first column from the first bytes) is the general walk."""
    from outlines_like.fsm._grammar_walk import byte_table, walk

    compiled = compile_grammar(CFG(grammar), VOCAB)
    m = compiled.matcher()
    for token in greedy(b'{"a": [1, 2.5]}' if grammar == JSON_LARK else b"(1 + 2) * 3"):
        m.advance(token)
    table = byte_table(VOCAB)
    walked = 0
    for context in compiled._contexts:
        for lex in range(context.n_states):
            fast = walk(table, context.flat, lex, table.text_ids, accepting=context.accepting)
            ref = walk(table, context.flat, lex, table.text_ids.copy(), accepting=context.accepting)
            assert sorted(zip(fast.end_items.tolist(), fast.end_states.tolist(), strict=True)) == (
                sorted(zip(ref.end_items.tolist(), ref.end_states.tolist(), strict=True))
            )
            stops = [
                sorted(
                    zip(
                        r.stop_items.tolist(),
                        r.stop_offsets.tolist(),
                        r.stop_states.tolist(),
                        strict=True,
                    )
                )
                for r in (fast, ref)
            ]
            assert stops[0] == stops[1]
            walked += 1
    assert walked > 3
