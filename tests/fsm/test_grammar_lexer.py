"""The grammar lexer: the process-wide memo of terminal DFAs, and the contexts' rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.fsm import _accel, _context_products, _grammar_lexer
from outlines_like.fsm import grammar as grammar_module
from outlines_like.fsm._grammar_actions import ActionRows
from outlines_like.fsm._grammar_lexer import (
    ContextDFA,
    build_context,
    clear_terminal_dfas,
    terminal_dfa,
)
from outlines_like.fsm._grammar_parser import LALRParser
from outlines_like.fsm.compile import clear_caches
from outlines_like.fsm.grammar import CompiledGrammar
from outlines_like.fsm.regex_dfa import compile_regex
from tests.fsm import test_grammar as grammar_cases
from tests.fsm.test_grammar import VOCAB


def test_terminal_dfas_are_shared_and_read_only() -> None:
    clear_terminal_dfas()
    first = terminal_dfa("A", "re", "[0-9]+", ())
    assert terminal_dfa("B", "re", "[0-9]+", ()) is first  # the name plays no part
    assert terminal_dfa("C", "str", "[0-9]+", ()) is not first  # a literal of that text
    with pytest.raises(ValueError):
        first.transitions[0, 0] = 1
    expected = compile_regex("[0-9]+")
    np.testing.assert_array_equal(first.transitions[:-1], expected.transitions)
    np.testing.assert_array_equal(first.transitions[-1], -1)
    clear_caches()  # empties the memo too
    assert terminal_dfa("A", "re", "[0-9]+", ()) is not first


def test_errors_are_not_memoised_and_name_their_terminal() -> None:
    for name in ("FIRST", "SECOND"):
        with pytest.raises(UnsupportedConstraintError, match=name):
            terminal_dfa(name, "re", "a", ("s",))


# 70 literals and a regex in one context: more live terminals at its start than refinement takes
MANY_WORDS = "start: (w | NAME)+\nw: " + " | ".join(
    f'"{a}{b}x"' for a in "abcdefghij" for b in "klmnopq"
)
MANY_WORDS += '\nNAME: /[a-z]+y/\n%ignore " "\n'

# a JSON Schema's grammar in small: member names as literals beside a string regex they share
# prefixes with (never equal to one, so no retyping), and a free string value
MEMBERS = r"""
start: "{" [pair ("," pair)*] "}"
pair: NAME ":" VALUE | "\"alpha\"" ":" VALUE | "\"alps\"" ":" VALUE | "\"beta\"" ":" VALUE
NAME: /"[a-z]*[0-9]"/
VALUE: /"([^"\\]|\\.)*"/ | /-?[0-9]+/
%ignore /[ ]/
"""


# Retyping (Lark's UnlessCallback) in one context: keywords equal to NAMEs, quoted values equal
# to STRINGs (a JSON Schema's enum beside a free string: `anyOf: [{}, {enum: [...]}]`), one a
# prefix of another
RETYPED = r"""
start: stmt+
stmt: "let" NAME "=" value ";" | NAME ";"
value: NAME | NUM | "true" | "tru" | STRING | "\"on\"" | "\"off\"" | "\"of\""
NAME: /[a-z]+/
NUM: /[0-9]+/
STRING: /"[a-z]*"/
%ignore " "
"""


@pytest.mark.parametrize(
    "grammar",
    [
        RETYPED,
        grammar_cases.JSON_LARK,
        grammar_cases.ARITH_LARK,
        grammar_cases.KEYWORDS,
        grammar_cases.PRIORITY,
        grammar_cases.LARK_TUTORIAL_JSON,
        grammar_cases.ARITH_WS,
        grammar_cases.REDUCE_REDUCE,
        MANY_WORDS,
        MEMBERS,
    ],
)
def test_context_builds_agree(grammar: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three ways to build a context (rows by partition refinement, by ``np.unique`` over
    the members' rows, and the compiled kernel where it applies) give the same context, state
    numbers included."""
    built: list[tuple[Any, ...]] = []
    hooks: list[Any] = [None]
    if _accel.available():
        from outlines_like.fsm import _accel_lexer

        hooks.append(lambda: _accel_lexer)

    def each(*args: Any, **kwargs: Any) -> ContextDFA:
        contexts = []
        # (the kernel's hook, the most members refinement takes, the most states the kernel
        # makes: past it, the Python build takes over)
        ways = [(None, 10**9, 1 << 13), (None, 0, 1 << 13)]
        ways += [(h, 10**9, most) for h in hooks[1:] for most in (1 << 13, 2)]
        for hook, refine_max, kernel_max in ways:
            monkeypatch.setattr(_grammar_lexer, "_kernels_hook", hook)
            monkeypatch.setattr(_grammar_lexer, "_REFINE_MAX", refine_max)
            monkeypatch.setattr(_grammar_lexer, "_KERNEL_MAX_STATES", kernel_max)
            contexts.append(build_context(*args, **kwargs))
        a = contexts[0]
        for b in contexts[1:]:
            np.testing.assert_array_equal(a.transitions, b.transitions)
            np.testing.assert_array_equal(a.winner, b.winner)
            np.testing.assert_array_equal(a.reach, b.reach)
            assert a.rows == b.rows
            np.testing.assert_array_equal(a.flat, b.flat)
        built.append(args[0])
        return a

    kernel_built: list[bool] = []
    compiled_context = _grammar_lexer._compiled_context

    def counted(*args: Any) -> Any:
        out = compiled_context(*args)
        kernel_built.append(out is not None)
        return out

    monkeypatch.setattr(_grammar_lexer, "_compiled_context", counted)
    monkeypatch.setattr(grammar_module, "build_context", each)
    compiled = CompiledGrammar(grammar, VOCAB)
    compiled.matcher().fill_bitmask(np.zeros((1, VOCAB.mask_words), dtype=np.int32))
    if isinstance(compiled._parser, LALRParser):
        for state in compiled._parser.actions:
            compiled._state_context(state)
    assert built
    if len(hooks) > 1 and grammar in (MEMBERS, MANY_WORDS, grammar_cases.JSON_LARK, RETYPED):
        assert any(kernel_built)  # the kernel's way was taken, not only the Python builds


# JSON_LARK with a statement form in front: the same terminals' DFAs under other ids
JSON_AFTER_LET = r"""
start: "let" NAME "=" value | value
value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
array: "[" [value ("," value)*] "]"
NAME: /[a-z]+/
STRING: /"([^"\\\x00-\x1f]|\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/
NUMBER: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/
%ignore /[ \t\n\r]+/
"""


def _all_contexts(grammar: str) -> CompiledGrammar:
    compiled = CompiledGrammar(grammar, VOCAB)
    assert isinstance(compiled._parser, LALRParser)
    for state in compiled._parser.actions:
        compiled._state_context(state)
    return compiled


@pytest.mark.skipif(not _accel.available(), reason="the compiled context build needs numba")
def test_context_products_are_shared_across_grammars(monkeypatch: pytest.MonkeyPatch) -> None:
    """A context whose terminals' DFAs another grammar's context had, in the same order, takes
    that product from the memo: the same context as a fresh build, in this grammar's terminal
    and class ids (state numbers, winners, reach), without running the kernel again."""
    from outlines_like.fsm import _accel_lexer

    monkeypatch.setattr(_grammar_lexer, "_kernels_hook", lambda: _accel_lexer)
    runs: list[int] = []
    product = _accel_lexer.product

    def counted(*args: Any) -> Any:
        runs.append(1)
        return product(*args)

    monkeypatch.setattr(_accel_lexer, "product", counted)
    _context_products.clear_context_products()
    fresh = _all_contexts(JSON_AFTER_LET)
    fresh_runs = len(runs)
    _context_products.clear_context_products()
    _all_contexts(grammar_cases.JSON_LARK)
    runs.clear()
    shared = _all_contexts(JSON_AFTER_LET)
    assert fresh_runs > len(runs)  # some products came from JSON_LARK's contexts
    assert fresh._term_id == shared._term_id
    # (context and class ids follow the order states are first met in, which is not the same
    # from one compile to the next: contexts are matched by terminals, winners by terms)
    by_terminals = {c.terminals: c for c in fresh._contexts}
    assert len(by_terminals) == len(shared._contexts)
    for b in shared._contexts:
        a = by_terminals[b.terminals]
        np.testing.assert_array_equal(a.transitions, b.transitions)
        assert [fresh._classes[w] if w >= 0 else () for w in a.winner.tolist()] == [
            shared._classes[w] if w >= 0 else () for w in b.winner.tolist()
        ]
        np.testing.assert_array_equal(a.accepting, b.accepting)
        np.testing.assert_array_equal(a.reach, b.reach)
    # the shared contexts' terminal ids are not JSON_LARK's: the columns were mapped
    json_ids = CompiledGrammar(grammar_cases.JSON_LARK, VOCAB)._term_id
    assert json_ids["STRING"] != shared._term_id["STRING"]


@pytest.mark.skipif(not _accel.available(), reason="the compiled context build needs numba")
def test_context_products_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its bytes the memo drops its oldest products (one is always kept)."""
    from outlines_like.fsm import _accel_lexer

    monkeypatch.setattr(_grammar_lexer, "_kernels_hook", lambda: _accel_lexer)
    monkeypatch.setattr(_context_products, "_PRODUCT_MEMO_BYTES", 1)
    _context_products.clear_context_products()
    _all_contexts(grammar_cases.JSON_LARK)
    assert len(_context_products._products) == 1
    monkeypatch.setattr(_context_products, "_PRODUCT_MEMO_BYTES", 32 << 20)
    _context_products.clear_context_products()
    _all_contexts(grammar_cases.JSON_LARK)
    assert len(_context_products._products) > 1
    held = sum(p.transitions.nbytes + p.reach.nbytes for p in _context_products._products.values())
    assert held == _context_products._products_bytes
    clear_caches()
    assert not _context_products._products
    assert _context_products._products_bytes == 0


@pytest.mark.skipif(not _accel.available(), reason="the compiled context build needs numba")
def test_context_products_do_not_keep_their_dfas_alive() -> None:
    """The memo holds its components weakly (a literal's DFA is ~1 KB a byte, and the terminal
    memo's bound evicts them): they are freed with their last user, and an entry whose DFAs
    are gone is not taken by other DFAs that got their ids."""
    import gc
    import weakref

    from outlines_like.fsm import _accel_lexer

    _context_products.clear_context_products()
    first = [_grammar_lexer.literal_dfa(b"alpha"), _grammar_lexer.literal_dfa(b"beta")]
    built = _context_products.context_product(_accel_lexer, first, 1 << 13)
    assert built is not None
    refs = [weakref.ref(d) for d in first]
    del first
    gc.collect()
    assert all(r() is None for r in refs)
    # other DFAs under the dead ones' key (as if they had taken the ids): a fresh product
    other = [_grammar_lexer.literal_dfa(b"gamma"), _grammar_lexer.literal_dfa(b"delta")]
    (key,) = _context_products._products
    _context_products._products[tuple(map(id, other))] = _context_products._products.pop(key)
    got = _context_products.context_product(_accel_lexer, other, 1 << 13)
    assert got is not None
    assert got is not built
    assert [r() for r in got.components] == other
    assert got.transitions.shape[0] > built.transitions.shape[0]  # "gamma", "delta"
    assert len(_context_products._products) == 1
    held = sum(p.transitions.nbytes + p.reach.nbytes for p in _context_products._products.values())
    assert held == _context_products._products_bytes
    _context_products.clear_context_products()


def _schema_grammar() -> str:
    """A JSON Schema's grammar (plain BNF: its tables are the compiled ones with the extra)."""
    from outlines_like.types import CFG
    from outlines_like.types.json_schema_grammar import json_schema_path

    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "kids": {"type": "array", "items": {"$ref": "#"}},
        },
    }
    _, grammar = json_schema_path(schema, whitespace_pattern="[ ]?", regex_budget=16_000)
    assert grammar is not None
    return CFG(grammar, "lark").lark


@pytest.mark.parametrize("accel", [False, True])
@pytest.mark.parametrize("which", ["lark", "schema"])
def test_scanner_read_from_the_state_key(which: str, accel: bool) -> None:
    """A state's scanner read from its key (the compiled tables': the symbols' ids as bytes;
    else their names) is the one read from its dict of actions."""
    if accel and not _accel.available():
        pytest.skip("the compiled tables need numba")
    _accel.set_enabled(accel)
    try:
        compiled = CompiledGrammar(JSON_AFTER_LET if which == "lark" else _schema_grammar(), VOCAB)
    finally:
        _accel.set_enabled(None)
    parser = compiled._parser
    assert isinstance(parser, LALRParser)
    # (every grammar's table is ours: compiled, as rows, with numba)
    assert isinstance(parser.actions, ActionRows) == accel
    by_key = {
        state: compiled._scanner(state, compiled._scanner_key(state)) for state in parser.actions
    }
    assert by_key == {state: compiled._scanner(state) for state in parser.actions}


@pytest.mark.parametrize("which", ["lark", "schema"])
def test_states_with_the_same_terminals_share_a_context(which: str) -> None:
    """A state found by its actions' terminals gets the context its scanner gives."""
    compiled = CompiledGrammar(JSON_AFTER_LET if which == "lark" else _schema_grammar(), VOCAB)
    compiled._wider_scanner = lambda terms: None  # type: ignore[method-assign]
    parser = compiled._parser
    assert isinstance(parser, LALRParser)
    got = [compiled._state_context(s) for s in parser.actions]
    n_contexts = len(compiled._contexts)
    assert 0 < len(compiled._context_by_terms) < len(got)
    if which == "schema" and _accel.enabled():
        assert isinstance(compiled._scanner_key(0), tuple)  # (the compiled tables' rows)
    # again, every state through its scanner (the contexts are found by their key)
    compiled._context_of.clear()
    compiled._context_by_terms.clear()
    keys = iter(range(-1, -(10**6), -1))
    compiled._scanner_key = lambda state: next(keys)  # type: ignore[method-assign]
    assert [compiled._state_context(s) for s in parser.actions] == got
    assert len(compiled._contexts) == n_contexts


def _members_grammar(n: int) -> str:
    """A JSON Schema's grammar of one object with ``n`` optional members, strings or null."""
    from outlines_like.types import CFG
    from outlines_like.types.json_schema_grammar import json_schema_path

    schema = {
        "type": "object",
        "properties": {f"k{i}": {"type": ["string", "null"]} for i in range(n)},
        "additionalProperties": False,
    }
    _, grammar = json_schema_path(schema, whitespace_pattern="[ ]?", regex_budget=0)
    assert grammar is not None
    return CFG(grammar, "lark").lark


def _step_masks(compiled: CompiledGrammar, text: bytes) -> list[bytes]:
    from tests.fsm.test_grammar import greedy

    out = []
    m = compiled.matcher()
    row = np.zeros((1, VOCAB.mask_words), dtype=np.int32)
    for token in greedy(text):
        m.fill_bitmask(row)
        out.append(row.tobytes())
        if not (int(row[0, token // 32]) >> (token % 32)) & 1:
            break
        m.advance(token)
    m.fill_bitmask(row)
    return [*out, row.tobytes()]


MEMBER_DOCS = [
    b'{"k0": "a", "k3": null, "k7": "b c"}',
    b'{"k2": "x", "k2": "y"}',  # (rejected at the second k2: members in order, once)
    b'{"k11": null}',
    rb'{"k1": "\u00e9", "k4": "", "k5": null, "k6": "q", "k10": "z", "k11": "w"}',
    b'{"k5": "a", "k3": "b"}',  # (rejected: out of order)
    b"{}",
    b'{"k9": nul',
]


@pytest.mark.skipif(not _accel.available(), reason="the compiled tables need numba")
def test_member_positions_share_one_wider_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """The states after each member of an object take the terminals of the state after its
    ``{`` (the names still to come are a subset of them): one context, not one per position,
    and the same masks as the states' own contexts give."""
    grammar = _members_grammar(12)
    _accel.set_enabled(True)
    try:
        wide = CompiledGrammar(grammar, VOCAB)
        with monkeypatch.context() as patch:  # (in case a context is built in the compile)
            patch.setattr(CompiledGrammar, "_wider_scanner", lambda self, terms: None)
            narrow = CompiledGrammar(grammar, VOCAB)
        narrow._wider_scanner = lambda terms: None  # type: ignore[method-assign]
        for text in MEMBER_DOCS:
            assert _step_masks(wide, text) == _step_masks(narrow, text), text
        assert isinstance(narrow._parser, LALRParser)
        for state in narrow._parser.actions:
            narrow._state_context(state)
        assert isinstance(wide._parser, LALRParser)
        assert isinstance(wide._parser.actions, ActionRows)
        for state in wide._parser.actions:
            wide._state_context(state)
    finally:
        _accel.set_enabled(None)
    # the twelve name positions (and the state after the last member) share the first's
    assert len(narrow._contexts) - len(wide._contexts) >= 11


_NAMES = ["a", "ab", "b", "ba", "k0", "k1", "k10", "x y", "\u00e9"]
_VALUES: list[dict[str, Any]] = [
    {"type": "string"},
    {"type": ["string", "null"]},
    {"type": "integer"},
    {"enum": ["a", "ab", 1]},
    {"type": "boolean"},
    {"type": "array", "items": {"type": "integer"}},
]


@st.composite
def _objects(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    """A small object schema: names some of which prefix others (as text, not as quoted
    names), optional and required members, sometimes extra members by a pattern or freely."""
    names = draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=6, unique=True))
    choices: list[dict[str, Any] | None] = [*_VALUES, *([None] if depth < 1 else [])]
    props: dict[str, Any] = {}
    for name in names:
        value = draw(st.sampled_from(choices))
        props[name] = draw(_objects(depth + 1)) if value is None else value
    schema: dict[str, Any] = {"type": "object", "properties": props}
    schema["required"] = draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
    extra = draw(st.sampled_from(["none", "pattern", "any"]))
    if extra == "none":
        schema["additionalProperties"] = False
    elif extra == "pattern":
        schema["patternProperties"] = {"^k[0-9]$": {"type": "integer"}}
        schema["additionalProperties"] = False
    return schema


@pytest.mark.skipif(not _accel.available(), reason="the compiled tables need numba")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_objects(), data=st.data())
def test_wider_contexts_give_the_states_own_masks(schema: dict[str, Any], data: Any) -> None:
    """Along random walks of random object schemas' grammars, the masks with wider contexts
    are those of each state's own context."""
    from outlines_like.types import CFG
    from outlines_like.types.json_schema_grammar import json_schema_path

    try:
        _, text = json_schema_path(schema, whitespace_pattern="[ ]?", regex_budget=0)
    except InvalidConstraintError:  # (a member both a string and, by the pattern, an integer)
        return
    assert text is not None
    grammar = CFG(text, "lark").lark
    _accel.set_enabled(True)
    try:
        wide = CompiledGrammar(grammar, VOCAB)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(CompiledGrammar, "_wider_scanner", lambda self, terms: None)
            narrow = CompiledGrammar(grammar, VOCAB)
        narrow._wider_scanner = lambda terms: None  # type: ignore[method-assign]
        matchers = [wide.matcher(), narrow.matcher()]
        rows = np.zeros((2, VOCAB.mask_words), dtype=np.int32)
        for _ in range(40):
            for i, m in enumerate(matchers):
                m.fill_bitmask(rows[i])
            np.testing.assert_array_equal(rows[0], rows[1])
            allowed = np.flatnonzero(np.unpackbits(rows[0].view(np.uint8), bitorder="little"))
            token = int(data.draw(st.sampled_from(allowed.tolist())))
            if token in VOCAB.eos_token_ids:
                break
            for m in matchers:
                m.advance(token)
    finally:
        _accel.set_enabled(None)


# the state after "x" takes AB; the start state takes AB and ABC, of which AB matches a prefix
AB_THEN_ABC = r"""
start: "x" AB "c" | AB "z" | ABC
AB: "ab"
ABC: "abc"
"""


@pytest.mark.skipif(not _accel.available(), reason="the compiled tables need numba")
@pytest.mark.parametrize(
    ("grammar", "text"),
    [
        (AB_THEN_ABC, b"xabc"),
        # a regex (the taken one) that matches a prefix of a literal the start state takes
        ('start: "x" AB "c" | AB "z" | "abc"\nAB: /a[b]/\n', b"xabc"),
        # two regexes (refused where they begin with the same byte, without a closer look)
        ('start: "x" AB "c" | AB "z" | ABC\nAB: /ab/\nABC: /ab[c]/\n', b"xabc"),
    ],
)
def test_a_wider_context_that_would_lex_otherwise_is_not_taken(
    grammar: str, text: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without its check (a terminal a state does not take may not begin with a text one it
    takes matches), the wider context would read ``abc`` whole after ``x`` and reject it."""
    _accel.set_enabled(True)
    try:
        compiled = CompiledGrammar(grammar, VOCAB)
        assert compiled.accepts_text(text)
        assert _step_masks(compiled, text)[-1] != bytes(4 * VOCAB.mask_words)
        unchecked = CompiledGrammar.__dict__["_wide_key"]

        def every_key(self: CompiledGrammar, terminal_bits: int) -> tuple[int, ...]:
            monkeypatch.setattr(self, "_apart", lambda a, b: True)
            monkeypatch.setattr(self, "_literal_of", lambda name: None)
            return unchecked(self, terminal_bits)  # type: ignore[no-any-return]

        monkeypatch.setattr(CompiledGrammar, "_wide_key", every_key)
        widened = CompiledGrammar(grammar, VOCAB)
        assert not widened.accepts_text(text)
    finally:
        _accel.set_enabled(None)


@pytest.mark.skipif(not _accel.available(), reason="the compiled context build needs numba")
def test_retyping_in_the_kernel_is_lark_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A context with retyping takes the kernel with each string terminal placed before the
    first regex terminal retyping to it: the same context as the Python build, which tracks
    the strings beside the scanner's terminals; a string the regex's DFA does not accept whole
    (Lark's check and ours disagreeing) keeps the Python build."""
    from outlines_like.fsm import _accel_lexer

    name = terminal_dfa("NAME", "re", "[a-z]+", ())
    word = terminal_dfa("WORD", "re", "[a-z0-9]+", ())
    let, lets, up = (terminal_dfa("", "str", text, ()) for text in ("let", "lets", "Let"))
    dfas = [name, word, let, lets, up]
    classify: dict[tuple[int, ...], int] = {}

    def each_way(order: list[int], unless: dict[int, list[int]]) -> tuple[ContextDFA, bool]:
        out = []
        took_kernel = False
        for hook in (None, lambda: _accel_lexer):
            monkeypatch.setattr(_grammar_lexer, "_kernels_hook", hook)
            calls: list[int] = []
            real = _grammar_lexer._compiled_context

            def counted(*args: Any, real: Any = real, calls: list[int] = calls) -> Any:
                calls.append(1)
                return real(*args)

            monkeypatch.setattr(_grammar_lexer, "_compiled_context", counted)
            out.append(
                build_context(order, unless, dfas, lambda t: classify.setdefault(t, len(classify)))
            )
            monkeypatch.setattr(_grammar_lexer, "_compiled_context", real)
            took_kernel = took_kernel or bool(calls)
        a, b = out
        np.testing.assert_array_equal(a.transitions, b.transitions)
        np.testing.assert_array_equal(a.winner, b.winner)
        np.testing.assert_array_equal(a.reach, b.reach)
        assert a.terminals == b.terminals == tuple(order)
        return a, took_kernel

    def lexeme(ctx: ContextDFA, text: bytes) -> tuple[int, ...]:
        state = 0
        for byte in text:
            state = int(ctx.transitions[state, byte])
        winner = int(ctx.winner[state])
        return next(t for t, c in classify.items() if c == winner) if winner >= 0 else ()

    # NAME first: "let" and "lets" become the strings, other words NAME; WORD never wins a word
    ctx, kernel = each_way([0, 1], {0: [2, 3], 1: [2]})
    assert kernel
    words = (b"let", b"lets", b"le", b"letx", b"l3t")
    assert [lexeme(ctx, w) for w in words] == [(2,), (3,), (0,), (0,), (1,)]
    assert ctx.reach[0, [0, 1, 2, 3]].all()
    assert not ctx.reach[0, 4]
    # WORD first: WORD retypes "let" only; "lets" stays WORD (NAME's target, but NAME is second)
    ctx, kernel = each_way([1, 0], {0: [2, 3], 1: [2]})
    assert kernel
    assert [lexeme(ctx, w) for w in (b"let", b"lets", b"abc")] == [(2,), (1,), (1,)]
    # a string NAME's DFA does not accept: the Python build
    _, kernel = each_way([0], {0: [4]})
    assert not kernel
    # a string that is also one of the scanner's terminals: the Python build
    _, kernel = each_way([0, 2], {0: [2]})
    assert not kernel
