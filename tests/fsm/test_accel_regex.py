"""The compiled minimisation (``_accel_regex``) against the pure one (``_dfa_minimize``).

Both give the same tables: the same blocks, numbered the same way (including the accepting /
non-accepting split's own numbering when nothing refines it), and the same merged classes.
Skipped without numba.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outlines_like.fsm import _accel
from outlines_like.fsm._dfa_minimize import merge_classes, minimize
from outlines_like.fsm.regex_dfa import _build, compile_regex

pytestmark = pytest.mark.skipif(
    not _accel.available(), reason="numba is not installed (the accel extra)"
)


def assert_same(table: np.ndarray, accepting: np.ndarray, start: int) -> None:
    from outlines_like.fsm import _accel_regex

    table = np.ascontiguousarray(table, dtype=np.int32)
    want = minimize(table, accepting.astype(bool), start)
    got = _accel_regex.minimize(table, accepting.astype(np.uint8), start)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1].astype(bool), want[1])
    assert got[2] == want[2]
    classes = np.sort(np.random.default_rng(0).integers(0, table.shape[1], 256)).astype(np.int32)
    classes[: table.shape[1]] = np.arange(table.shape[1])  # every class has a byte
    classes.sort()
    merged_want = merge_classes(want[0], classes)
    merged_got = _accel_regex.merge_classes(np.ascontiguousarray(want[0]), classes)
    np.testing.assert_array_equal(merged_got[0], merged_want[0])
    np.testing.assert_array_equal(merged_got[1], merged_want[1])


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 40),
    k=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
    density=st.sampled_from([0.2, 0.6, 1.0]),
)
def test_random_tables_minimise_the_same(n: int, k: int, seed: int, density: float) -> None:
    rng = np.random.default_rng(seed)
    table = rng.integers(0, n, (n, k))
    table[rng.random((n, k)) > density] = -1
    accepting = rng.random(n) < 0.3
    assert_same(table, accepting, int(rng.integers(0, n)))


def test_the_split_keeps_its_numbering_when_nothing_refines_it() -> None:
    # state 0 accepting, nothing to refine: blocks stay (accepting -> 1, others -> 0)
    table = np.array([[1], [1]])
    assert_same(table, np.array([True, False]), 0)
    assert_same(np.array([[0], [1]]), np.array([True, True]), 1)


@pytest.mark.parametrize(
    "pattern",
    [
        "(ab|cb)+d?",
        "[0-9]{1,5}",
        "(a|b)*abb",
        "x|y|z",
        "",
        "[^a]*a[^a]*",
        "(ab){3}c?",
        # long chains: the distinguishing paths as long as the DFA (a JSON Schema's bounded
        # string, a grammar terminal's), where Moore took a round per step
        r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,30}"',
        r"[0-9]{1,5}(\.[0-9]{0,20})?",
        r"(a|b)*abb[ab]{0,6}",
        r"(?:a{0,20}b|a{0,13}c){1,3}",
    ],
)
def test_regex_dfas_minimise_the_same(pattern: str) -> None:
    builder = _build(pattern, 1000)
    assert_same(builder.class_table(), builder.accepting_array(), 0)


def test_compile_regex_is_the_same_with_either_path() -> None:
    pattern = "(?:true|false|null|-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?)(?:,[ ]?(?:a|bc)){0,3}"
    try:
        _accel.set_enabled(False)
        pure = compile_regex(pattern)
        _accel.set_enabled(True)
        fast = compile_regex(pattern)
    finally:
        _accel.set_enabled(None)
    assert pure.start == fast.start
    np.testing.assert_array_equal(pure.transitions, fast.transitions)
    np.testing.assert_array_equal(pure.accepting, fast.accepting)
    np.testing.assert_array_equal(pure.byte_classes, fast.byte_classes)
    np.testing.assert_array_equal(pure.class_transitions, fast.class_transitions)


def given_tables(sizes: tuple[int, int], classes: int) -> Any:
    """Hypothesis's arguments for :func:`random_table`: ``n`` states, ``k`` classes, a seed."""
    return given(
        n=st.integers(*sizes),
        k=st.integers(1, classes),
        seed=st.integers(0, 2**32 - 1),
        chain=st.booleans(),
    )


@settings(max_examples=60, deadline=None)
@given_tables((40, 400), 8)
def test_larger_tables_minimise_the_same(n: int, k: int, seed: int, chain: bool) -> None:
    """Hundreds of states, random or chain-like (each state's successors mostly the next few
    states, so that blocks split late, one step of a long path at a time)."""
    rng = np.random.default_rng(seed)
    table = random_table(rng, n, k, chain, 0.7 if chain else 0.5)
    accepting = rng.random(n) < (0.05 if chain else 0.3)
    assert_same(table, accepting, int(rng.integers(0, n)))


def random_table(rng: np.random.Generator, n: int, k: int, chain: bool, kept: float) -> np.ndarray:
    """``int32[n, k]`` transitions, random or chain-like (each state's successors among the
    next two), each kept with probability ``kept`` (else -1)."""
    if chain:
        table = np.minimum(np.arange(n)[:, None] + rng.integers(0, 3, (n, k)), n - 1)
    else:
        table = rng.integers(0, n, (n, k))
    table[rng.random((n, k)) > kept] = -1
    return np.ascontiguousarray(table, dtype=np.int32)


@settings(max_examples=200, deadline=None)
@given_tables((1, 160), 6)
def test_hopcroft_and_moore_find_the_same_blocks(n: int, k: int, seed: int, chain: bool) -> None:
    """:func:`minimize` refines small DFAs by Moore's rounds and larger ones by Hopcroft's
    algorithm: on any table, the two write the same blocks, numbered the same way."""
    from outlines_like.fsm import _accel_regex

    rng = np.random.default_rng(seed)
    table = random_table(rng, n, k, chain, 0.6)
    accepting = (rng.random(n) < 0.2).astype(np.uint8)
    moore = np.empty(n, dtype=np.int64)
    hopcroft = np.empty(n, dtype=np.int64)
    assert _accel_regex._moore(table, accepting, moore) == _accel_regex._coarsest(
        table, accepting, hopcroft
    )
    np.testing.assert_array_equal(hopcroft, moore)
