"""The compiled subset construction (``_accel_dfa``) against the pure one (``_subset``).

Eagerly, the two build the same DFA state for state (same numbering, same rows, same NFA
sets); lazily, the compiled walk builds a walk's rows ahead in another order, so there the
languages are compared (a lockstep walk over both DFAs), and so are the masks, the state
counts after each mask, and where ``max_states`` runs out. A compiled lazy DFA travels
between processes in ``test_transfer`` (its "lazy-regex" case). Tests that need numba are
skipped without it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlines_like.errors import ConstraintTooLargeError
from outlines_like.fsm import Vocabulary, _accel
from outlines_like.fsm._lexemes import NON_ASCII
from outlines_like.fsm._regex_nfa import NFA
from outlines_like.fsm._subset import SubsetBuilder
from outlines_like.fsm.index import TokenIndex
from outlines_like.fsm.regex_dfa import LazyByteDFA, _build, compile_regex, compile_regex_auto
from outlines_like.types import JsonSchema, to_regex
from outlines_like.types._regex import parse_regex

pytestmark = pytest.mark.skipif(
    not _accel.available(), reason="numba is not installed (the accel extra)"
)

SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "kind": {"enum": ["a", "b", "ç"]},
        },
        "required": ["name"],
    },
    {"type": "array", "items": {"type": "number"}},
    {"type": "string", "pattern": "^[a-z]{2,5}-[0-9]{1,3}$"},
]
TOKENS = [
    *(bytes([b]) for b in range(0x20, 0x7F)),
    *(
        b'{"',
        b'":',
        b'",',
        b' "',
        b'"}',
        b"name",
        b"age",
        b"tags",
        b"\xc3\xa7",
        b"\xc3",
        b"\xa7",
        b"caf\xc3\xa9",
        b"\xe6\x97\xa5",
        b"abc",
        b"123",
        b"x" * 9,
    ),
    b"<eos>",
]
VOCAB = Vocabulary(TOKENS, [len(TOKENS) - 1])


@pytest.fixture(autouse=True)
def _reset_switch() -> Iterator[None]:
    yield
    _accel.set_enabled(None)


def builders(pattern: str, max_states: int = 20_000) -> tuple[SubsetBuilder, object]:
    """The pure and the compiled builder over one NFA of ``pattern``."""
    from outlines_like.fsm._accel_dfa import KernelSubsetBuilder

    nfa = NFA()
    start, final = nfa.build(parse_regex(pattern, strip_anchors=True))
    nfa.freeze()
    return (
        SubsetBuilder(nfa, start, final, max_states, pattern),
        KernelSubsetBuilder(nfa, start, final, max_states, pattern),
    )


def assert_same_construction(pattern: str) -> None:
    pure, fast = builders(pattern)
    table = pure.class_table()
    np.testing.assert_array_equal(table, fast.class_table())  # type: ignore[attr-defined]
    np.testing.assert_array_equal(pure.accepting_array(), fast.accepting_array())  # type: ignore[attr-defined]
    for i in range(pure.n_states):
        assert fast.subset(i) == pure.order[i]  # type: ignore[attr-defined]
    for i in range(pure.n_states):  # may add states: the same ones, in the same order
        want = pure.utf8_target(i, NON_ASCII)
        assert fast.utf8_target(i, NON_ASCII) == want  # type: ignore[attr-defined]
    assert fast.n_states == pure.n_states  # type: ignore[attr-defined]


LEAVES = ["a", "b", "[a-c]", "[^a]", "\\d", "é", "[à-ÿ]", "日", ".", "[^\\x00-\\U0010FFFF]"]


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    quant = st.sampled_from(["*", "+", "?", "{2}", "{0,3}", "{1,2}", "{2,}"])
    return st.one_of(
        st.tuples(children, children).map(lambda p: f"{p[0]}{p[1]}"),
        st.tuples(children, children).map(lambda p: f"(?:{p[0]}|{p[1]})"),
        st.tuples(children, quant).map(lambda p: f"(?:{p[0]}){p[1]}"),
    )


patterns = st.recursive(st.sampled_from(LEAVES), _combine, max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=patterns)
def test_random_regexes_build_the_same_dfa(pattern: str) -> None:
    try:
        compile_regex(pattern)
    except Exception:  # matches nothing: both refuse it the same way (below)
        with pytest.raises(Exception) as pure_err:
            builders(pattern)
        assert "matches no string" in str(pure_err.value)
        return
    assert_same_construction(pattern)


@pytest.mark.parametrize("k", range(len(SCHEMAS)))
def test_json_schema_regexes_build_the_same_dfa(k: int) -> None:
    assert_same_construction(to_regex(JsonSchema(SCHEMAS[k])))


def test_growth_and_pauses_keep_the_construction() -> None:
    # 2**12 states: every array grows several times and the kernel pauses for the budget
    assert_same_construction("(a|b)*a(a|b){12}")


def test_eager_dfa_is_the_same_with_either_builder() -> None:
    pattern = to_regex(JsonSchema(SCHEMAS[0]))
    _accel.set_enabled(False)
    assert isinstance(_build(pattern, 100), SubsetBuilder)
    pure = compile_regex(pattern)
    _accel.set_enabled(True)
    assert not isinstance(_build(pattern, 100), SubsetBuilder)
    fast = compile_regex(pattern)
    np.testing.assert_array_equal(pure.transitions, fast.transitions)
    np.testing.assert_array_equal(pure.accepting, fast.accepting)
    assert pure.start == fast.start


@pytest.mark.parametrize("max_states", [3, 40, 200])
def test_max_states_raises_the_same_error(max_states: int) -> None:
    pattern = "(a|b)*a(a|b){8}"
    errors = []
    for accel in (False, True):
        _accel.set_enabled(accel)
        with pytest.raises(ConstraintTooLargeError) as err:
            compile_regex(pattern, max_states=max_states)
        errors.append((str(err.value), err.value.limit, err.value.where))
    assert errors[0] == errors[1]


def lazy(pattern: str, accel: bool, max_states: int = 20_000) -> LazyByteDFA:
    _accel.set_enabled(accel)
    dfa = compile_regex_auto(pattern, eager_nfa_limit=0, max_states=max_states)
    assert isinstance(dfa, LazyByteDFA)
    return dfa


def assert_same_language(a: LazyByteDFA, b: LazyByteDFA, limit: int = 3000) -> None:
    """Walk both DFAs in lockstep over every byte: paired states agree (a bisimulation)."""
    todo = [(a.start, b.start)]
    pairs = {a.start: b.start}
    seen = set(todo)
    while todo and len(seen) < limit:
        x, y = todo.pop()
        assert a.is_accepting(x) == b.is_accepting(y)
        a.expand_one(x)
        b.expand_one(y)
        ra, rb = a.transitions[x], b.transitions[y]
        np.testing.assert_array_equal(ra < 0, rb < 0)
        for byte in np.flatnonzero(ra >= 0).tolist():
            nx, ny = int(ra[byte]), int(rb[byte])
            assert pairs.setdefault(nx, ny) == ny
            if (nx, ny) not in seen:
                seen.add((nx, ny))
                todo.append((nx, ny))


def walk_masks(dfa: LazyByteDFA, accel: bool, text: bytes) -> tuple[list[bytes], list[int]]:
    """Masks and state counts along the tokens of ``text`` (greedy longest tokens)."""
    _accel.set_enabled(accel)
    ix = TokenIndex(dfa, VOCAB)
    state, masks, counts = dfa.start, [], []
    by_bytes = {t: i for i, t in enumerate(TOKENS[:-1])}
    pos = 0
    while pos < len(text):
        row = ix.row(state)
        masks.append(row.mask.tobytes())
        counts.append(dfa.n_states)
        n = max(k for k in range(1, 10) if text[pos : pos + k] in by_bytes)
        state = row.next_state(by_bytes[text[pos : pos + n]])
        assert state >= 0
        pos += n
    return masks, counts


DOCS = [
    (0, b'{"name":"caf\xc3\xa9 \xe6\x97\xa5","age":-12,"tags":["x","yy"],"kind":"\xc3\xa7"}'),
    (1, b"[1.5,-2e10,3]"),
    (2, b'"abc-123"'),
]


@pytest.mark.parametrize(("k", "text"), DOCS)
def test_lazy_dfas_built_ahead_keep_language_masks_and_counts(k: int, text: bytes) -> None:
    pattern = to_regex(JsonSchema(SCHEMAS[k]))
    pure, fast = lazy(pattern, False), lazy(pattern, True)
    assert pure.fullmatch(text)
    assert fast.fullmatch(text)
    pure_masks, pure_counts = walk_masks(pure, False, text)
    fast_masks, fast_counts = walk_masks(fast, True, text)
    assert pure_masks == fast_masks
    assert pure_counts == fast_counts  # the same states discovered by each mask
    assert_same_language(lazy(pattern, False), lazy(pattern, True))


def test_lazy_max_states_runs_out_at_the_same_mask() -> None:
    pattern = to_regex(JsonSchema(SCHEMAS[0]))
    text = DOCS[0][1]
    _, counts = walk_masks(lazy(pattern, False), False, text)
    limit = counts[len(counts) // 2]  # runs out halfway
    seen = []
    for accel in (False, True):
        dfa = lazy(pattern, accel, max_states=limit)
        with pytest.raises(ConstraintTooLargeError) as err:
            walk_masks(dfa, accel, text)
        seen.append((str(err.value), dfa.n_states))
    assert seen[0] == seen[1]


def test_unbuilt_rows_read_unknown_and_spare_rows_stay_untouched() -> None:
    dfa = lazy(to_regex(JsonSchema(SCHEMAS[0])), True)
    assert dfa.fullmatch(DOCS[0][1])
    built = dfa._expanded[: dfa.n_states]
    rows = dfa.transitions
    assert (rows[~built] == -2).all()
    assert (rows[built] != -2).all()


@pytest.mark.parametrize("pattern", [r"[a-z]{0,40}x", r"(ab|a)*c", r'"[^"\\]{0,30}"'])
def test_regexes_in_lockstep(pattern: str) -> None:
    assert_same_language(lazy(pattern, False), lazy(pattern, True))


def assert_row_targets_agree(pattern: str) -> None:
    """The chain's target from a built row (``utf8_row_kernel``) is the builder's, everywhere."""
    from outlines_like.fsm._accel_utf8 import sequence_arrays, utf8_row_kernel

    pure, _ = builders(pattern)
    dfa = compile_regex_auto(pattern, eager_nfa_limit=0)
    assert isinstance(dfa, LazyByteDFA)
    b = dfa._b
    off, lo, hi = sequence_arrays(NON_ASCII)  # the sequences as the builder reads them
    s = 0
    while s < min(dfa.n_states, 400):
        dfa.expand_one(s)
        got = utf8_row_kernel(b._store(), dfa._table, s, off, lo, hi, b.max_states)
        want = b.utf8_target(s, NON_ASCII)
        assert got == want, (pattern, s)
        # the same set of NFA states as the pure builder's answer
        i = pure.intern(b.subset(s))
        pure_want = pure.utf8_target(i, NON_ASCII)
        assert (want < 0) == (pure_want < 0), (pattern, s)
        if want >= 0:
            assert b.subset(want) == pure.order[pure_want], (pattern, s)
        s += 1


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=patterns)
def test_utf8_targets_from_built_rows(pattern: str) -> None:
    try:
        compile_regex(pattern)
    except Exception:
        return  # matches nothing (above)
    assert_row_targets_agree(pattern)


@pytest.mark.parametrize(
    "pattern",
    [
        r'"[^"\\\x00-\x1f]{0,40}"',
        r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])*"',
        r"[^a]{2,5}x|é{3}",
        r"(?:[à-ÿ]|日|\d){0,6}",
        "[^\\x00-\\U0010FFFF]?a",
        "[^日]{0,3}",  # every character but one of three bytes
        "(?:[^\\U0001F600]|\\U0001F600b)*x",  # one of four bytes leads elsewhere
    ],
)
def test_utf8_targets_from_built_rows_on_string_bodies(pattern: str) -> None:
    assert_row_targets_agree(pattern)


def test_kernels_called_past_the_dispatcher_refuse_strided_arrays_under_checks() -> None:
    # the tests run with OUTLINES_LIKE_ACCEL_CHECKS=1 (conftest): a strided view, which the
    # compiled function would read and write as if contiguous, is refused as numba's
    # dispatcher refuses it; every kernel call of the suite goes through this check
    from outlines_like.fsm._accel_dfa_kernels import entry_point
    from outlines_like.fsm._accel_dfa_walk import mark_kernel

    rows = np.zeros((8, 256), dtype=np.int32)
    done = np.zeros(8, dtype=np.uint8)
    entry_point(mark_kernel)(rows, done, 0, 4, -1)
    assert (rows[:4] == -1).all()
    assert (rows[4:] == 0).all()
    with pytest.raises(TypeError, match="not C-contiguous"):
        entry_point(mark_kernel)(rows[::2], done, 0, 2, 7)
    assert not (rows == 7).any()


@pytest.mark.parametrize("reserve", [64, 1 << 15])
def test_visit_and_walk_rows_run_a_kernel_as_walk_does(
    reserve: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the first visit's call (LazyByteDFA.visit) and walk_compiled's one-frame call
    # (walk_rows) against walk's: the same masks (the EOS bit in accepting states) and rows
    # from every state the walks reach; with a reserve of 64 rows the table grows inside walks
    import itertools

    import outlines_like.fsm.regex_dfa as regex_dfa
    from outlines_like.fsm._accel_dfa_walk import visit_kernel
    from outlines_like.fsm._subset import VISIT_WALKED
    from outlines_like.fsm.index import token_trie

    monkeypatch.setattr(regex_dfa, "_RESERVE_ROWS", reserve)
    words = [bytes(w) for n in range(1, 9) for w in itertools.product(b"ab", repeat=n)]
    vocab = Vocabulary([*words, b"<eos>"], [len(words)])
    eos = np.array([len(words)], dtype=np.int32)
    pattern = "(a|b)*a(a|b){8}"
    one, two, three = lazy(pattern, True), lazy(pattern, True), lazy(pattern, True)
    grown = []
    sync = one._sync

    def counted(n: int = -1, mark: bool = True) -> None:
        grown.append(n)
        sync(n, mark)

    monkeypatch.setattr(one, "_sync", counted)
    trie = token_trie(vocab)
    arrays = (trie.byte, trie.depth, trie.skip, trie.root_child, trie.node_tok)
    no_ends = np.zeros(0, dtype=np.int32)
    no_steps = np.zeros(0, dtype=np.int32)
    todo, seen = [0], {0}
    accepting = 0
    while todo:
        s = todo.pop()
        got = []
        for dfa, how in ((one, "visit"), (two, "walk_compiled"), (three, "walk")):
            mask = np.zeros(trie.words, dtype=np.int32)  # (the row's words, as kept)
            stack = np.empty(trie.stack_size, dtype=np.int32)
            fixed = (*arrays, stack, no_ends, eos)
            args = (s, mask, no_steps, *fixed)
            if how == "visit":
                assert dfa.visit(s, mask, no_steps, fixed) == VISIT_WALKED  # no string body here
            elif how == "walk_compiled":
                assert dfa.walk_compiled(visit_kernel, args)
            else:
                b = dfa._b
                while not b.walk(visit_kernel, (dfa._table, dfa._done(), *args)):
                    dfa._sync()
                dfa._sync()
            got.append(mask.tobytes())
        assert got[0] == got[1] == got[2]
        accepting += int(one.is_accepting(s))
        assert bool(got[0][eos[0] // 8] >> (eos[0] % 8) & 1) == one.is_accepting(s)
        assert one.n_states == two.n_states == three.n_states
        rows = one.transitions
        np.testing.assert_array_equal(rows, two.transitions)
        np.testing.assert_array_equal(rows, three.transitions)
        for t in np.unique(rows[s][rows[s] >= 0]).tolist():
            if t not in seen and len(seen) < 300:
                seen.add(t)
                todo.append(t)
    assert accepting > 0  # the EOS bit was set by the kernel
    assert len(seen) > 64
    if reserve == 64:
        assert -1 in grown  # a walk stopped for the table to grow, and went on


def test_compiled_walks_set_new_rows_unknown_when_the_table_is_read() -> None:
    # a compiled walk finds states it does not build (most of a JSON Schema walk's: inside
    # characters); their rows are set to UNKNOWN when the table is next read through
    # transitions (or pickled), not after every walk
    import itertools

    from outlines_like.fsm.index import token_trie
    from outlines_like.fsm.regex_dfa import UNKNOWN

    words = [bytes(w) for n in range(1, 5) for w in itertools.product(b"ab", repeat=n)]
    vocab = Vocabulary([*words, b"<eos>"], [len(words)])
    trie = token_trie(vocab)
    dfa = lazy("(a|b)*a(a|b){6}", True)
    mask = np.zeros(trie.words, dtype=np.int32)
    arrays = (trie.byte, trie.depth, trie.skip, trie.root_child, trie.node_tok)
    stack = np.empty(trie.stack_size, dtype=np.int32)
    no = np.zeros(0, dtype=np.int32)
    dfa.visit(dfa.start, mask, no, (*arrays, stack, no, no))
    n = dfa.n_states
    done = dfa._done8[:n].astype(bool)
    assert not done.all()  # states found, not built
    assert dfa._filled < n  # not set yet
    state = dfa.__getstate__()  # a pickle sets them first
    assert state["_table"].shape == (n, 256)  # type: ignore[attr-defined]
    rows = dfa.transitions
    assert dfa._filled == n
    assert (rows[~done] == UNKNOWN).all()
    assert (rows[done] >= -1).all()
    np.testing.assert_array_equal(state["_table"], rows)  # type: ignore[call-overload]
    for word in words:  # the rows set later are the rows stepped through
        assert dfa.fullmatch(word) == bool(re.fullmatch("(a|b)*a(a|b){6}", word.decode()))
