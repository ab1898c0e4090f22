"""Our LALR(1) tables (Python and compiled builds) and plain-BNF reader against Lark's."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from outlines_like.fsm import _accel, _grammar_actions
from outlines_like.fsm._grammar_actions import END, ActionRows, Tables, action_arrays
from outlines_like.fsm._grammar_parser import LALRParser
from outlines_like.fsm._grammar_tables import PlainGrammar, lalr_tables, read_lark, read_plain
from outlines_like.fsm.grammar import CompiledGrammar
from outlines_like.fsm.vocabulary import Vocabulary
from outlines_like.types.json_schema_grammar import json_schema_to_grammar

SCHEMAS = Path(__file__).parent.parent / "types" / "schemas"
PIECES = [b'{"', b'":', b'","', b'"}', b"},{", b"[{", b"true", b"null", b"12", b", ", b'"a":{']
TOKENS = [bytes([i]) for i in range(256)] + PIECES + [b"<eos>"]
VOCAB = Vocabulary(TOKENS, [len(TOKENS) - 1])

needs_numba = pytest.mark.skipif(
    not _accel.available(), reason="numba is not installed (the accel extra)"
)

PLAIN = [
    # nullable chains, left and right recursion, empty alternatives, %ignore
    'start: a b c\na: A | \nb: b B | \nc: C c | C\nA: "a"\nB: /b+/\nC: "c"',
    'start: x\nx: y Q x | y\ny: z | \nz: Z\nZ: /z/\nQ: ";"',
    'start: s\ns: L s R s | \nL: "("\nR: ")"\nWS: /[ ]+/\n%ignore WS',
    "start: e\ne: e P t | t\nt: t M f | f\nf: N | L e R\n"
    'P: "+"\nM: "*"\nN: /[0-9]+/\nL: "("\nR: ")"',
    # keywords retyped from a name, as Lark's lexer does
    'start: k | n\nk: IF N2\nn: N2 N2\nIF: "if"\nN2: /[a-z]+/\nWS: " "\n%ignore WS',
    # literals with escaped quotes (read without Lark's escape evaluation), other escapes,
    # a flag, and an empty alternative written twice
    'start: k\nk: Q A | | Q B C | \nQ: "\\"key\\":"\nA: "it\'s"\nB: "a\\\\b\\t"\nC: "x"i',
]


def _schema_grammars() -> list[str]:
    grammars = []
    for name in ("bench_json_medium", "bench_json_large", "recursive_tree", "all_optional"):
        path = SCHEMAS / f"{name}.json"
        if path.exists():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                grammars.append(
                    json_schema_to_grammar(
                        json.loads(path.read_text()), whitespace_pattern="[ ]?", lenient=True
                    )
                )
    return grammars


def _same_automaton(text: str, tables: Tables, plain: PlainGrammar | None = None) -> None:
    """Map Lark's LALR states onto ours from the start state; every action must agree.

    ``plain``: the rules and terminals ``tables`` was built from (else read from ``text``).
    """
    import lark
    from lark.parsers.lalr_analysis import Shift

    reference = lark.Lark(text, parser="lalr", lexer="basic", start="start")
    table = reference.parser.parser._parse_table
    if plain is None:
        plain = read_plain(text)
    assert plain is not None

    def terminals(defs: list[Any]) -> dict[str, tuple[Any, ...]]:
        return {
            t.name: (type(t.pattern), t.pattern.value, t.pattern.flags, t.priority) for t in defs
        }

    assert terminals(plain.terminals) == terminals(reference.terminals)
    assert sorted(plain.ignore) == sorted(reference.ignore_tokens)
    mapping = {table.start_states["start"]: tables.start}
    todo = list(mapping)
    while todo:
        theirs = todo.pop()
        ours = tables.actions[mapping[theirs]]
        assert set(table.states[theirs]) == set(ours)
        for symbol, (action, arg) in table.states[theirs].items():
            mine = ours[symbol]
            if action is Shift:
                assert mine >= 0
                if arg not in mapping:
                    mapping[arg] = mine
                    todo.append(arg)
                assert mapping[arg] == mine
            else:
                rule = (arg.origin.name, tuple(s.name for s in arg.expansion))
                assert mine < 0
                assert plain.rules[~mine] == rule
    assert len(mapping) == len(table.states) == len(tables.actions)
    assert mapping[table.end_states["start"]] == tables.end


@pytest.mark.parametrize("text", PLAIN + _schema_grammars())
def test_tables_are_larks(text: str) -> None:
    plain = read_plain(text)
    assert plain is not None
    tables = lalr_tables(plain.rules)
    assert not tables.conflict
    _same_automaton(text, tables)


def _lark_grammars() -> list[str]:
    from tests.fsm.test_grammar import ARITH_LARK, JSON_LARK, KEYWORDS, LARK_TUTORIAL_JSON, PRIORITY

    return [JSON_LARK, ARITH_LARK, KEYWORDS, PRIORITY, LARK_TUTORIAL_JSON]


@pytest.mark.parametrize("text", _lark_grammars())
def test_grammars_lark_reads_get_larks_automaton(text: str) -> None:
    """Grammars only Lark reads (EBNF, inline literals, imports, priorities): Lark's loader
    writes their rules, our table is Lark's LALR(1) automaton."""
    assert read_plain(text) is None
    rules, terminals, ignore = read_lark(text)
    tables = lalr_tables(rules)
    assert not tables.conflict
    _same_automaton(text, tables, PlainGrammar(rules, terminals, ignore))


@pytest.mark.parametrize(
    "text",
    [
        'start: "a"',  # an inline literal
        "start: A*\nA: /a/",  # EBNF
        "start: A\nA.2: /a/",  # a priority
        "start: a\n?a: A\nA: /a/",  # a modifier
        "start: A\n    | B\nA: /a/\nB: /b/",  # an alternative on its own line
        "start: A\nA: /a/ /b/",  # a terminal of two patterns
        "start: A\n%import common.WS\nA: /a/",
        "start: A A\nstart: A\nA: /a/",  # a rule defined twice
        "start: A | A\nA: /a/",  # the same alternative twice: Lark's error
        "start: B\nA: /a/",  # undefined
        "start: aB\naB: A\nA: /a/",  # not a name Lark reads
        "start: a\na: A\nA: /a/ // comment",
    ],
)
def test_only_plain_bnf_is_read(text: str) -> None:
    assert read_plain(text) is None


def test_grammars_share_the_patterns_of_their_literals() -> None:
    """Lark's pattern of a terminal text is made once, whichever grammar writes it."""
    first = read_plain('start: A B\nA: /[0-9]+/\nB: "b"')
    second = read_plain("start: C\nC: /[0-9]+/")
    assert first is not None
    assert second is not None
    assert second.terminals[0].pattern is first.terminals[0].pattern
    assert [t.name for t in second.terminals] == ["C"]
    assert first.terminals[0].pattern.min_width == 1


def test_conflicts_are_reported() -> None:
    plain = read_plain("start: a | b\na: X\nb: X\nX: /x/")
    assert plain is not None
    assert lalr_tables(plain.rules).conflict


def _walk_masks(compiled: CompiledGrammar, seed: int, steps: int = 40) -> list[bytes]:
    rng = random.Random(seed)
    matcher = compiled.matcher()
    masks = []
    for _ in range(steps):
        allowed = matcher.allowed_token_ids()
        masks.append(allowed.tobytes())
        if not len(allowed) or matcher.is_finished():
            break
        matcher.advance(int(rng.choice(allowed.tolist())))
    return masks


@pytest.mark.parametrize("text", PLAIN + _schema_grammars())
def test_plain_path_masks_are_the_lark_paths(text: str) -> None:
    """The same grammar through Lark (a comment line keeps it off the plain path)."""
    ours = CompiledGrammar(text, VOCAB)
    theirs = CompiledGrammar(text + "\n// through lark\n", VOCAB)
    assert isinstance(ours._parser, LALRParser)
    assert isinstance(theirs._parser, LALRParser)
    for seed in range(4):
        assert _walk_masks(ours, seed) == _walk_masks(theirs, seed)
    assert np.array_equal(ours.matcher().allowed_token_ids(), theirs.matcher().allowed_token_ids())


def test_schema_grammar_takes_the_plain_path() -> None:
    grammars: list[Any] = _schema_grammars()
    assert grammars
    assert all(read_plain(g) is not None for g in grammars)


def test_shared_lexeme_walks_give_a_fresh_vocabularys_masks() -> None:
    """Walks one grammar cached on the vocabulary (inside a string ...) serve another alike."""
    from outlines_like.fsm._grammar_walk import _LEXEME_KEY

    def keyed(text: str) -> CompiledGrammar:
        compiled = CompiledGrammar(text, warm)
        compiled._trie_rows = False  # (accel) the keyed rows, whose lexical walks are shared
        return compiled

    warm = Vocabulary(TOKENS, [len(TOKENS) - 1])
    for seed in range(3):
        _walk_masks(keyed(PLAIN[2]), seed)
    grammars = [*_schema_grammars(), PLAIN[4]]
    for text in grammars:
        for seed in range(3):
            _walk_masks(keyed(text), seed)
    assert warm._cache[_LEXEME_KEY]
    for text in reversed(grammars):  # from the warm cache, and from a fresh vocabulary
        shared = keyed(text)
        fresh = CompiledGrammar(text, Vocabulary(TOKENS, [len(TOKENS) - 1]))
        for seed in range(4):
            assert _walk_masks(shared, seed) == _walk_masks(fresh, seed)


def _canonical(tables: Tables) -> tuple[Any, ...]:
    """The table with its states renumbered breadth first from the start (symbols sorted)."""
    number = {tables.start: 0}
    order = [tables.start]
    for state in order:
        row = tables.actions[state]
        for symbol in sorted(row):
            if row[symbol] >= 0 and row[symbol] not in number:
                number[row[symbol]] = len(order)
                order.append(row[symbol])
    rows = [
        sorted((sym, number[a] if a >= 0 else a) for sym, a in tables.actions[s].items())
        for s in order
    ]
    assert len(order) == len(tables.actions)
    return rows, number[tables.end], tables.rule_size, tables.rule_origin


def _both_builds(rules: list[tuple[str, tuple[str, ...]]]) -> tuple[Tables, Tables]:
    """The tables of the compiled build and of the Python build."""
    try:
        _accel.set_enabled(True)
        compiled = lalr_tables(rules)
        _accel.set_enabled(False)
        python = lalr_tables(rules)
    finally:
        _accel.set_enabled(None)
    return compiled, python


@needs_numba
@pytest.mark.parametrize("text", PLAIN + _schema_grammars())
def test_compiled_tables_are_the_python_ones(text: str) -> None:
    """The kernel's automaton is the Python build's (numbered in another order)."""
    plain = read_plain(text)
    assert plain is not None
    compiled, python = _both_builds(plain.rules)
    assert isinstance(compiled.actions, ActionRows)
    assert isinstance(python.actions, dict)
    assert compiled.start == 0
    assert _canonical(compiled) == _canonical(python)


@needs_numba
def test_compiled_build_leaves_conflicts_and_large_tables_to_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = read_plain("start: a | b\na: X\nb: X\nX: /x/")
    assert plain is not None
    compiled, python = _both_builds(plain.rules)
    assert compiled.conflicts == python.conflicts
    assert compiled.conflict
    plain = read_plain(PLAIN[3])
    assert plain is not None
    monkeypatch.setattr(_grammar_actions, "_MAX_COMPILED_STATES", 3)
    compiled, python = _both_builds(plain.rules)
    assert isinstance(compiled.actions, dict)
    assert _canonical(compiled) == _canonical(python)


def test_action_rows() -> None:
    """A state's row from the flat arrays, on first use; states outside are KeyErrors."""
    bounds = np.array([0, 2, 2, 3], dtype=np.int32)
    rows = ActionRows(
        bounds,
        np.array([1, 0, 2], dtype=np.int32),
        np.array([1, ~0, 2], dtype=np.int32),
        ["A", "b", END],
    )
    assert len(rows) == 3
    assert list(rows) == [0, 1, 2]
    assert rows[0] == {"b": 1, "A": ~0}
    assert rows[0] is rows[0]
    assert rows[1] == {}
    assert rows.get(2) == {END: 2}
    assert rows.get(3) is None
    assert rows.get(-1) is None
    bounds_, symbols, codes, names = action_arrays(rows)
    assert symbols is rows.symbols
    assert codes is rows.codes
    assert bounds_ is bounds
    assert names == ["A", "b", END]
    again = action_arrays({0: {"b": 1, "A": ~0}, 2: {END: 2}})
    assert again[0].tolist() == [0, 2, 2, 3]
    assert [again[3][i] for i in again[1]] == ["b", "A", END]
    assert again[2].tolist() == [1, ~0, 2]


def _terminal_defs(defs: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (t.name, type(t.pattern), t.pattern.value, t.pattern.flags, t.pattern.raw, t.priority)
        for t in defs
    ]


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.json")), ids=lambda p: p.stem)
def test_a_schema_grammars_parts_are_what_its_text_reads_as(path: Path) -> None:
    """``compile_constraint`` hands a JSON Schema grammar's rules and terminals over as the
    converter built them, instead of reading its text back: the same ``PlainGrammar`` that
    :func:`read_plain` gives for the text, rule for rule and terminal for terminal (every
    schema of tests/types/schemas, written for the grammar path however small)."""
    from outlines_like.fsm._grammar_tables import plain_from_parts
    from outlines_like.types.json_schema_grammar import GrammarParts, _grammar_of

    schema = json.loads(path.read_text())
    parts: list[GrammarParts] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            text = _grammar_of(schema, "[ ]?", True, 1 << 20, parts=parts)
        except Exception as exc:  # (a schema the grammar path refuses: nothing to compare)
            pytest.skip(f"{type(exc).__name__}: {exc}")
    (given,) = parts
    handed, read = plain_from_parts(given), read_plain(text)
    assert handed is not None
    assert read is not None
    assert handed.rules == read.rules
    assert handed.ignore == read.ignore
    assert _terminal_defs(handed.terminals) == _terminal_defs(read.terminals)


def test_parts_that_would_not_read_back_are_read_from_the_text() -> None:
    from outlines_like.fsm._grammar_tables import plain_from_parts
    from outlines_like.types.json_schema_grammar import GrammarParts

    rules = (("start", ("a",)), ("a", ("A",)))
    assert plain_from_parts(GrammarParts(rules, (("A", '"x"'),))) is not None
    assert plain_from_parts(GrammarParts(rules, (("A", "x"),))) is None  # not a definition
    twice = (*rules, ("a", ("A",)))
    assert plain_from_parts(GrammarParts(twice, (("A", '"x"'),))) is None


def test_a_json_schema_compile_reads_no_grammar_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """The grammar path of ``compile_constraint`` takes the converter's parts; the masks are
    those of the grammar read from its text."""
    from outlines_like.fsm import _grammar_tables
    from outlines_like.fsm import compile as compile_module
    from outlines_like.types import JsonSchema

    schema = json.loads((SCHEMAS / "recursive_tree.json").read_text())
    compile_module.clear_caches()
    reads: list[str] = []
    real = _grammar_tables.read_plain

    def counted(text: str, start: str = "start") -> Any:
        reads.append(text)
        return real(text, start)

    monkeypatch.setattr("outlines_like.fsm.grammar.read_plain", counted)
    handed = compile_module.compile_constraint(JsonSchema(schema, whitespace_pattern="[ ]?"), VOCAB)
    assert isinstance(handed, CompiledGrammar)
    assert reads == []
    from_text = CompiledGrammar(handed.grammar, VOCAB)
    assert reads == [handed.grammar]
    for seed in range(4):
        assert _walk_masks(handed, seed) == _walk_masks(from_text, seed)
    compile_module.clear_caches()


CONFLICTED = [
    # reduce/reduce: two rules take the same token
    "start: a E | b E | b Q\na: X\nb: X\nX: /x/\nE: /!/\nQ: /[?]/",
    # shift/reduce: the dangling else
    "start: s\ns: I s | I s E s | X\nI: /i/\nE: /e/\nX: /x/",
]


@pytest.mark.parametrize("text", CONFLICTED)
def test_a_plain_grammar_with_conflicts_runs_its_own_table_without_lark(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lark is not asked; the masks are those of the grammar read by Lark's loader."""
    import outlines_like.fsm.grammar as grammar_module
    from outlines_like.fsm._grammar_parser import GLRParser

    plain = read_plain(text)
    assert plain is not None
    assert lalr_tables(plain.rules).conflict
    theirs = CompiledGrammar(text + "\n// through lark\n", VOCAB)
    calls: list[str] = []
    real = read_lark  # (the name the grammar module calls, patched there)
    monkeypatch.setattr(
        grammar_module,
        "read_lark",
        lambda t: calls.append(t) or real(t),  # type: ignore[func-returns-value]
    )
    ours = CompiledGrammar(text, VOCAB)
    assert calls == []
    assert isinstance(ours._parser, GLRParser)
    assert isinstance(theirs._parser, GLRParser)
    for seed in range(6):
        assert _walk_masks(ours, seed) == _walk_masks(theirs, seed)


def test_a_plain_grammar_the_glr_parser_cannot_run_is_refused_either_way() -> None:
    from outlines_like.errors import UnsupportedConstraintError

    text = "start: a\na: b a X | X\nb: Y | \nX: /x/\nY: /y/"  # `a` after an empty `b`
    plain = read_plain(text)
    assert plain is not None
    assert lalr_tables(plain.rules).conflict
    for source in (text, text + "\n// through lark\n"):
        with pytest.raises(UnsupportedConstraintError, match="rule 'a' is left-recursive"):
            CompiledGrammar(source, VOCAB)


def test_a_lenient_overlapping_one_of_compiles_to_the_glr_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import outlines_like.fsm.grammar as grammar_module
    from outlines_like.fsm._grammar_parser import GLRParser
    from outlines_like.fsm.compile import compile_constraint
    from outlines_like.types import JsonSchema

    def no_lark(text: str) -> Any:
        raise AssertionError("Lark was asked to analyse a plain grammar")

    monkeypatch.setattr(grammar_module, "read_lark", no_lark)
    item = {"type": "object", "properties": {"v": {"type": "integer"}}}
    schema = {  # recursive: the grammar path; both branches accept {"v":1}
        "$defs": {
            "node": {
                "oneOf": [
                    item,
                    {
                        **item,
                        "properties": {**item["properties"], "next": {"$ref": "#/$defs/node"}},
                    },
                ]
            }
        },
        "$ref": "#/$defs/node",
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_constraint(JsonSchema(schema, lenient=True), VOCAB)
    assert isinstance(compiled, CompiledGrammar)
    assert isinstance(compiled._parser, GLRParser)
    for text in ('{"v":1}', '{"v":1,"next":{"v":2}}', "{}"):
        matcher = compiled.matcher()
        for byte in text.encode():
            matcher.advance(byte)
        matcher.advance(len(TOKENS) - 1)
        assert matcher.is_finished()
