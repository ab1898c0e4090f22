"""The compiled NFA build (``_accel_nfa``) against the Python one (``_regex_nfa``).

The two give the same NFA, int for int (states, edges in order, epsilon edges, the shared and
empty-set counts), the same ``nfa_states`` and ``dfa_blowup`` estimates and the same
refusals; the packed arrays
of the compiled subset construction are the ones numpy computed before. Skipped without numba.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlines_like.errors import ConstraintTooLargeError
from outlines_like.fsm import _accel
from outlines_like.fsm._regex_estimate import dfa_blowup, nfa_states
from outlines_like.fsm._regex_nfa import NFA
from outlines_like.fsm._subset import byte_classes, live_states
from outlines_like.types import JsonSchema, to_regex
from outlines_like.types._regex import parse_regex

pytestmark = pytest.mark.skipif(
    not _accel.available(), reason="numba is not installed (the accel extra)"
)

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "size": {"type": "number"},
        "kind": {"enum": ["a", "b", "ç"]},
    },
    "required": ["name"],
}
CASES = [
    "",
    "a",
    "a*",
    "(ab|cb)+d?",
    "(a|)",
    "(a*)*",
    "(?:x{2,5}y?){0,3}",
    "((a|b){2}|c{3,}){1,2}z",
    "é+[α-ω]{1,3}日",
    "[^\\x00-\\U0010FFFF]",
    "a[^\\x00-\\U0010FFFF]?b",
    "[\\ud800-\\udfff]x",
    ".{0,4}[^a]",
    to_regex(JsonSchema(SCHEMA)),
]
MATCH_NOTHING = ("[^\\x00-\\U0010FFFF]", "[\\ud800-\\udfff]x")


def python_build(pattern: str) -> tuple[NFA, int, int]:
    nfa = NFA()
    start, final = nfa.build(parse_regex(pattern, strip_anchors=True))
    nfa.freeze()
    return nfa, start, final


def compiled_build(pattern: str) -> tuple[NFA, int, int]:
    from outlines_like.fsm._accel_nfa import Program

    return Program(parse_regex(pattern, strip_anchors=True)).build()


def signature(built: tuple[NFA, int, int]) -> tuple[object, ...]:
    nfa, start, final = built
    arrays = (nfa.off, nfa.lo, nfa.hi, nfa.dst, nfa.eps_off, nfa.eps_dst)
    return (nfa.n, nfa.shared, nfa.has_empty_set, start, final, *(list(a) for a in arrays))


def assert_same(pattern: str) -> None:
    from outlines_like.fsm._accel_nfa import Program

    tree = parse_regex(pattern, strip_anchors=True)
    assert Program(tree).nfa_states() == nfa_states(tree)
    assert Program(tree).dfa_blowup() == dfa_blowup(tree)
    assert signature(compiled_build(pattern)) == signature(python_build(pattern))


@pytest.mark.parametrize("pattern", CASES)
def test_same_nfa_as_the_python_build(pattern: str) -> None:
    assert_same(pattern)


LEAVES = ["a", "b", "[a-c]", "[^a]", "\\d", "é", "[à-ÿ]", "日", ".", "[^\\x00-\\U0010FFFF]"]


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    quant = st.sampled_from(["*", "+", "?", "{2}", "{0,3}", "{1,2}", "{2,}", "{0}"])
    return st.one_of(
        st.tuples(children, children).map(lambda p: f"{p[0]}{p[1]}"),
        st.tuples(children, children).map(lambda p: f"(?:{p[0]}|{p[1]})"),
        st.tuples(children, quant).map(lambda p: f"(?:{p[0]}){p[1]}"),
        st.tuples(children, children).map(lambda p: f"(?:{p[0]})(?:{p[0]}){p[1]}"),  # shared
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=st.recursive(st.sampled_from(LEAVES), _combine, max_leaves=10))
def test_random_regexes_build_the_same_nfa(pattern: str) -> None:
    assert_same(pattern)


BLOWUPS = [
    ("[0-9]*1[0-9]{3}", 3),
    ("[0-9]*(?:1[0-9]{3})x", 3),
    ("(?:(?:[0-9]*1[0-9]{3})x)*y", 3),
    ("(a|b)*a(a|b){20}", 20),
    (".*a.{30}", 30),
    ("(?:é|日)*日(?:é|日|x)?[é-日]{4}", 5),
    ("x*(?:x?y?){5}x{3}", 0),
    ("[^\\x00-\\U0010FFFF]*x[^\\x00-\\U0010FFFF]{3}", 0),
    ("a*", 0),
]


@pytest.mark.parametrize(("pattern", "blowup"), BLOWUPS)
def test_blowup_estimate_is_the_python_one(pattern: str, blowup: int) -> None:
    from outlines_like.fsm._accel_nfa import Program

    tree = parse_regex(pattern, strip_anchors=True)
    assert dfa_blowup(tree) == blowup
    assert Program(tree).dfa_blowup() == blowup


def test_blowup_refused_as_the_python_build_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    from outlines_like.fsm.regex_dfa import compile_regex_auto

    messages = []
    for accel in ("1", "0"):
        monkeypatch.setenv("OUTLINES_LIKE_ACCEL", accel)
        with pytest.raises(ConstraintTooLargeError) as err:
            compile_regex_auto("(a|b)*a(a|b){20}", refuse_blowup=True)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "2**20" in messages[0]


def test_estimates_agree_where_they_saturate() -> None:
    from outlines_like.fsm._accel_nfa import Program

    for pattern in ("((a{1000}){1000}){1000}", "(((((a{100}){100}){100}){100}){100}){100}"):
        tree = parse_regex(pattern)
        assert Program(tree).nfa_states() == nfa_states(tree)


def test_too_many_states_refused_as_the_python_build_refuses() -> None:
    # the estimate lets it through (a set counts as two states), the states do not
    pattern = "[\u0080-\U0010ffff]{30000}"
    with pytest.raises(ConstraintTooLargeError) as python_err:
        python_build(pattern)
    with pytest.raises(ConstraintTooLargeError) as compiled_err:
        compiled_build(pattern)
    assert str(compiled_err.value) == str(python_err.value)


@pytest.mark.parametrize("pattern", [p for p in CASES if p not in MATCH_NOTHING])
def test_packed_arrays_are_the_numpy_ones(pattern: str) -> None:
    from outlines_like.fsm._accel_dfa import KernelSubsetBuilder
    from outlines_like.fsm._accel_dfa_kernels import MARK1, NFA_END, OFF, SCR_END

    nfa, start, final = python_build(pattern)
    built = KernelSubsetBuilder(nfa, start, final, 1000, pattern)
    classes, k = byte_classes(nfa)
    cstart = [*np.flatnonzero(np.diff(classes, prepend=-1)).tolist(), 256]
    np.testing.assert_array_equal(built.classes, classes)
    assert (built.k, built.cstart) == (k, cstart)
    lo, hi = np.frombuffer(nfa.lo, np.int32), np.frombuffer(nfa.hi, np.int32)
    live = live_states(nfa, start, final, pattern)
    parts = [
        np.frombuffer(nfa.off, np.int32),
        classes[lo],
        classes[hi],
        np.frombuffer(nfa.dst, np.int32),
        np.frombuffer(nfa.eps_off, np.int32),
        np.frombuffer(nfa.eps_dst, np.int32),
        np.frombuffer(live, np.uint8),
        np.array(cstart, dtype=np.int32),
        classes,
    ]
    np.testing.assert_array_equal(built._nfa32, np.concatenate(parts).astype(np.int32))
    n, n_edges = nfa.n, int(lo.shape[0])
    bufs = [n + 1] * 8 + [n_edges + 1] * 3 + [2 * n_edges + 2] * 4
    lay = built._lay
    assert lay[:4].tolist() == [n, n_edges, final, k]
    assert lay[OFF : NFA_END + 1].tolist() == np.cumsum([0, *(p.shape[0] for p in parts)]).tolist()
    assert lay[MARK1 : SCR_END + 1].tolist() == np.cumsum([0, *bufs]).tolist()


@pytest.mark.parametrize("pattern", ["a{3000000000}", "a{5,3000000000}", "(ab){2147483648,}"])
def test_counts_past_int32_are_refused_as_the_python_build_refuses(
    pattern: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python's re takes counts up to 2**32 - 2; the int32 program clamps them, and the size
    # estimate refuses the regex with the pure path's error (not an OverflowError)
    from outlines_like.fsm._accel_nfa import Program
    from outlines_like.fsm.regex_dfa import compile_regex_auto

    assert Program(parse_regex(pattern)).nfa_states() > 10**9
    messages = []
    for accel in ("1", "0"):
        monkeypatch.setenv("OUTLINES_LIKE_ACCEL", accel)
        with pytest.raises(ConstraintTooLargeError) as err:
            compile_regex_auto(pattern)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_programs_share_the_store_and_build_the_same_nfas() -> None:
    """A later regex's program numbers only the nodes the store has not met."""
    from outlines_like.fsm import _accel_program

    _accel_program.clear_programs()
    obj = '\\{"a":(?:[0-9]+|"[a-z]*")(?:,"b":\\[(?:[0-9]+(?:,[0-9]+){0,3})?\\])?\\}'
    first, second = f"(?:{obj})x*", f"y(?:{obj})(?:,(?:{obj})){{0,2}}"
    assert_same(first)
    size = len(_accel_program._store.code)
    assert_same(second)
    added = len(_accel_program._store.code) - size
    _accel_program.clear_programs()
    assert not _accel_program._store.code
    assert_same(second)
    assert added < len(_accel_program._store.code)  # the object's nodes were numbered once


def test_store_starts_again_past_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from outlines_like.fsm import _accel_program

    monkeypatch.setattr(_accel_program, "_STORE_LIMIT", 16)
    _accel_program.clear_programs()
    before = _accel_program._store
    assert_same("(?:ab|cd)*e{2,3}")
    assert_same("(?:ab|cd)+f")
    assert _accel_program._store is not before


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="()\\[]ab", max_size=60))
def test_compiled_pairing_of_parentheses_is_numpys(text: str) -> None:
    from outlines_like.fsm import _accel_program
    from outlines_like.types import _regex

    assert list(_accel_program._pairing(text)) == list(_regex._closing_parens_numpy(text))
    long = text * (1 + _regex._NUMPY_PARENS // max(len(text), 1))
    assert _regex._pairing is _accel_program._pairing  # the reader's, once loaded
    assert list(_regex._closing_parens(long)) == list(_regex._closing_parens_numpy(long))
