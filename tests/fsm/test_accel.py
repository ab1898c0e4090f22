"""The compiled walk (the ``accel`` extra): its switch, its trie, masks equal to the pure walk's.

The pure walk has its own tests (``test_index.py`` runs each of them on both walks); here the
two are compared state by state: random regexes (Hypothesis), JSON Schemas on lazy DFAs, a
vocabulary with repeated tokens. Tests that need numba are skipped without it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlines_like.fsm import Vocabulary, _accel, prepare_vocabulary
from outlines_like.fsm.index import TokenIndex, token_table, token_trie
from outlines_like.fsm.regex_dfa import ByteDFA, LazyByteDFA, compile_regex, compile_regex_auto
from outlines_like.types import JsonSchema, to_regex

needs_numba = pytest.mark.skipif(
    not _accel.available(), reason="numba is not installed (the accel extra)"
)

TOKENS = [
    *(bytes([b]) for b in range(0x20, 0x7F)),
    b'{"',
    b'":',
    b'",',
    b' "',
    b'"}',
    b'"]',
    b'["',
    b', "',
    b'\\"',
    b"\\n",
    b"\\u00",
    b"name",
    b"age",
    b"tags",
    b"true",
    b"false",
    b"null",
    b"123",
    b"0.",
    b"e+",
    b"ab",
    b"abc",
    b"ab",  # the same bytes as another token: both ids are allowed together
    b"\xc3\xa9",
    b"\xc3",
    b"\xa9",
    b"\xa9s",
    b"\xe6\x97\xa5\xe6\x9c\xac",
    b"\xe6\x97",
    b"caf\xc3\xa9",
    b"  ",
    b"\n",
    b"\t",
    b"x" * 20,
    b"a" * 40,
    b"<eos>",
    b"<pad>",
    b"",
]
EOS = TOKENS.index(b"<eos>")
AB = TOKENS.index(b"ab")
AB_AGAIN = TOKENS.index(b"ab", AB + 1)
VOCAB = Vocabulary(TOKENS, [EOS], [TOKENS.index(b"<pad>")])


@pytest.fixture(autouse=True)
def _reset_switch() -> Iterator[None]:
    yield
    _accel.set_enabled(None)


def index(dfa: ByteDFA | LazyByteDFA, vocab: Vocabulary, *, accel: bool, **kw: int) -> TokenIndex:
    _accel.set_enabled(accel)
    return TokenIndex(dfa, vocab, **kw)


def assert_same_rows(make_dfa: object, vocab: Vocabulary, max_states: int = 400) -> int:
    """Walk the pure and the compiled index in lockstep over every allowed token; count rows."""
    pure = index(make_dfa(), vocab, accel=False)  # type: ignore[operator]
    fast = index(make_dfa(), vocab, accel=True)  # type: ignore[operator]
    assert fast._trie is not None
    assert pure._trie is None
    todo = [(pure.dfa.start, fast.dfa.start)]
    seen = set(todo)
    while todo and len(seen) < max_states:
        ps, fs = todo.pop()
        pr, fr = pure.row(ps), fast.row(fs)
        np.testing.assert_array_equal(pr.mask, fr.mask)
        for tok in pr.ids(vocab.size).tolist():
            if tok in vocab.eos_token_ids:
                continue
            pair = (pr.next_state(tok), fr.next_state(tok))
            assert (pair[0] < 0) == (pair[1] < 0)
            if pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return len(seen)


def same_rows_on(pattern: str, *, lazy: bool) -> None:
    """:func:`assert_same_rows` on the eager DFA of ``pattern`` (shared), or on lazy ones."""
    if lazy:
        assert_same_rows(lambda: compile_regex_auto(pattern, eager_nfa_limit=0), VOCAB)
    else:
        dfa = compile_regex(pattern)
        assert_same_rows(lambda: dfa, VOCAB)


def test_switch_environment_and_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_accel.ENV_VAR, raising=False)
    assert _accel.enabled() is _accel.available()
    for off in ("0", "false", "OFF", "no"):
        monkeypatch.setenv(_accel.ENV_VAR, off)
        assert not _accel.enabled()
    monkeypatch.setenv(_accel.ENV_VAR, "1")
    assert _accel.enabled() is _accel.available()
    _accel.set_enabled(False)
    assert not _accel.enabled()
    monkeypatch.setenv(_accel.ENV_VAR, "0")
    _accel.set_enabled(True)
    assert _accel.enabled() is _accel.available()
    _accel.set_enabled(None)
    assert not _accel.enabled()


def test_without_numba_the_pure_walk_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_accel, "_kernels", None)
    monkeypatch.setattr(_accel, "_import_failed", True)
    assert not _accel.available()
    _accel.set_enabled(True)  # forcing it on does nothing without numba
    assert not _accel.enabled()
    assert _accel.warm_up() == 0.0
    vocab = Vocabulary(TOKENS, [EOS])
    prepare_vocabulary(vocab)
    assert "token_trie" not in vocab._cache
    ix = TokenIndex(compile_regex(r"ab(c|é)?"), vocab)
    assert ix._trie is None
    assert ix.row(ix.dfa.start).ids(vocab.size).tolist() == [
        TOKENS.index(b"a"),
        AB,
        TOKENS.index(b"abc"),
        AB_AGAIN,
    ]


@needs_numba
def test_prepare_vocabulary_loads_the_kernels_and_the_trie() -> None:
    vocab = Vocabulary(TOKENS, [EOS])
    _accel.set_enabled(True)
    prepare_vocabulary(vocab)
    assert _accel.warm_up() == 0.0  # once per process
    assert vocab._cache["token_trie"] is token_trie(vocab)
    _accel.set_enabled(False)
    other = Vocabulary(TOKENS, [EOS])
    prepare_vocabulary(other)
    assert "token_trie" not in other._cache


@needs_numba
def test_trie_layout() -> None:
    table = token_table(VOCAB)
    trie = token_trie(VOCAB)
    assert trie.depth[0] == 0
    assert trie.skip[0] == trie.n_nodes
    # every node's subtree is the nodes after it up to the next one at its depth or above
    for i in range(1, trie.n_nodes):
        inside = trie.depth[i + 1 : trie.skip[i]]
        assert (inside > trie.depth[i]).all()
        assert trie.skip[i] == trie.n_nodes or trie.depth[trie.skip[i]] <= trie.depth[i]
    # every text token ends on the node its bytes spell; the repeated one is listed
    spelled: dict[bytes, int] = {}
    path: list[int] = []
    for i in range(1, trie.n_nodes):
        del path[int(trie.depth[i]) - 1 :]
        path.append(int(trie.byte[i]))
        if trie.node_tok[i] != trie.sentinel:
            spelled[bytes(path)] = int(trie.node_tok[i])
    assert sorted(spelled.values()) == sorted(
        int(t) for t in table.ids if int(t) not in trie.dup_of[:, 1]
    )
    for word, tok in spelled.items():
        assert VOCAB.tokens[tok] == word
    assert trie.dup_of.tolist() == [[AB, AB_AGAIN]]
    # the slots: every node's tokens (both ids of the repeated one) in trie order, so a
    # subtree's tokens are the run of slots from its first node to the node past it
    for i in range(trie.n_nodes):
        own = trie.slot_tok[trie.slot_first[i] : trie.slot_first[i + 1]].tolist()
        expected = [] if trie.node_tok[i] == trie.sentinel else [int(trie.node_tok[i])]
        expected += [int(b) for a, b in trie.dup_of.tolist() if a == trie.node_tok[i]]
        assert own == expected
        assert trie.node_one[i] == (trie.node_tok[i] if len(own) <= 1 else -1)
        inside = trie.slot_tok[trie.slot_first[i] : trie.slot_first[trie.skip[i]]].tolist()
        below = trie.node_tok[i : trie.skip[i]]
        assert set(inside) - set(trie.dup_of[:, 1].tolist()) == set(
            below[below != trie.sentinel].tolist()
        )
    assert sorted(trie.slot_tok.tolist()) == sorted(int(t) for t in table.ids)


PATTERNS = [
    r"[ab]+",
    r"-?[0-9]+(\.[0-9]+)?",
    r"(ab|ba)c?",
    r"café?s?",
    r"a{0,25}b?",
    r"x*",
    r"[^\x00-\x1f]*",
    r'"[^"\\]{0,3}"',
    r'"([^"\\]|\\.)*"',
    r"(é|[a-c1-3 ]){1,3}-",
    r"[^\x00-\x1f\\]{2,30}",
    r"[a-zA-Z0-9._%+-]+@[a-z]+\.[a-z]{2,}",
    r"日本?|ab",
]


@needs_numba
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("lazy", [False, True])
def test_rows_equal_the_pure_walk(pattern: str, lazy: bool) -> None:
    same_rows_on(pattern, lazy=lazy)


@needs_numba
@pytest.mark.parametrize("pattern", PATTERNS)
def test_lookahead_successors_equal_the_pure_walk(pattern: str) -> None:
    dfa = compile_regex(pattern)
    pure = index(dfa, VOCAB, accel=False, lookahead=2)
    fast = index(dfa, VOCAB, accel=True, lookahead=2)
    pure.row(dfa.start)
    fast.row(dfa.start)
    assert sorted(pure.rows) == sorted(fast.rows)
    for state, row in pure.rows.items():
        np.testing.assert_array_equal(row.mask, fast.rows[state].mask)
        assert sorted(row.successors or ()) == sorted(fast.rows[state].successors or ())


SCHEMAS = [
    {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "label": {"type": "string", "maxLength": 20},
                "n": {"type": "integer", "minimum": 0},
                "flags": {"type": "array", "items": {"enum": [True, None, "x"]}},
            },
            "required": ["label", "n"],
            "additionalProperties": False,
        },
    },
    {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "kind": {"enum": ["a", "b c", "é"]},
            "score": {"type": "number"},
            "note": {"type": "string", "minLength": 2, "maxLength": 6},
            "ok": {"type": "boolean"},
            "nested": {
                "type": "object",
                "properties": {"x": {"type": "string", "pattern": "^[a-z]{1,3}$"}},
                "required": ["x"],
            },
        },
        "required": ["id", "kind", "nested"],
    },
]


@needs_numba
@pytest.mark.parametrize("schema", SCHEMAS, ids=["array", "mixed"])
def test_json_schema_rows_on_lazy_dfas_equal_the_pure_walk(schema: dict[str, object]) -> None:
    pattern = to_regex(JsonSchema(json.dumps(schema), whitespace_pattern="[ ]?"))
    n = assert_same_rows(lambda: compile_regex_auto(pattern, eager_nfa_limit=0), VOCAB)
    assert n > 20


ALPHABET = ["a", "b", "é", "[ab]", "[^a]", '"', "[0-9]", ".", r"\\", "x{1,3}", "日"]


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    quant = st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}"])
    return st.one_of(
        st.tuples(children, children).map(lambda p: f"(?:{p[0]})(?:{p[1]})"),
        st.tuples(children, children).map(lambda p: f"(?:{p[0]}|{p[1]})"),
        st.tuples(children, quant).map(lambda p: f"(?:{p[0]}){p[1]}"),
    )


@needs_numba
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(pattern=st.recursive(st.sampled_from(ALPHABET), _combine, max_leaves=6), lazy=st.booleans())
def test_random_regexes_rows_equal_the_pure_walk(pattern: str, lazy: bool) -> None:
    same_rows_on(pattern, lazy=lazy)


@needs_numba
@pytest.mark.parametrize(
    "tokens",
    [[b"<eos>"], [b"<eos>", b""], [b"<eos>", b"a" * 300, b"a", b"\x00", b"\xff\xfe"]],
    ids=["no-text", "empty-token", "long-and-odd"],
)
def test_edge_vocabularies(tokens: list[bytes]) -> None:
    vocab = Vocabulary(tokens, [0])
    for pattern in ("a*", r"[\x00-\xff]*", "b"):
        dfa = compile_regex(pattern)
        assert_same_rows(lambda: dfa, vocab)  # noqa: B023 - called before the next loop
        assert_same_rows(lambda: compile_regex_auto(pattern, eager_nfa_limit=0), vocab)  # noqa: B023
