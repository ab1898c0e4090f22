"""The subset construction's UTF-8 targets in compiled kernels (numba): see :mod:`._accel_dfa`.

Where every non-ASCII character leads from a DFA state, stepping the sets of NFA states inside
a character without making them DFA states (:meth:`KernelSubsetBuilder.utf8_target`, the
compiled form of :meth:`~outlines_like.fsm._subset.SubsetBuilder.utf8_target`), and the same
from a state whose row is built (:mod:`._accel_chain`'s chain steps: the row answers every
character's first byte). Over :mod:`._accel_dfa_kernels`' arrays and helpers.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from outlines_like.fsm._accel_dfa_kernels import (
    _STORE,
    BUF_A,
    BUF_B,
    BUF_C,
    BUF_E,
    CLS,
    CUTS,
    DST,
    EFIRST,
    ELAST,
    LIVE,
    OFF,
    OK,
    STATUS,
    Store,
    _closure,
    _copy,
    _cuts,
    _inner,
    _intern,
    _jit,
    _same,
    _union,
)

__all__ = ["sequence_arrays", "utf8_kernel", "utf8_row", "utf8_row_kernel"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


_last_sequences: tuple[object, tuple[I32, I32, I32]] | None = None


def sequence_arrays(sequences: list[list[tuple[int, int]]]) -> tuple[I32, I32, I32]:
    """``sequences`` as the kernels read them: offsets, range starts, range ends (int32).

    Every DFA's builder and chain memo takes the same list (the UTF-8 characters' byte
    ranges), so the arrays of the last list seen are kept and shared (the kernels only read
    them): ~20 us a compile.
    """
    global _last_sequences
    last = _last_sequences
    if last is not None and last[0] is sequences:
        return last[1]
    off = np.cumsum([0, *(len(seq) for seq in sequences)])
    flat = [r for seq in sequences for r in seq]
    arrays = (
        off.astype(np.int32),
        np.array([lo for lo, _ in flat], dtype=np.int32),
        np.array([hi for _, hi in flat], dtype=np.int32),
    )
    _last_sequences = (sequences, arrays)  # one assignment: a racing thread keeps either
    return arrays


@_inner
def _utf8_steps(
    store: Store, p0: int, p1: int, n_cur: int, seq_lo: I32, seq_hi: I32
) -> int:  # pragma: no cover - compiled
    """Step the set at ``lay[BUF_A]`` (``n_cur`` states) through the ranges ``p0 .. p1 - 1``.

    Each range must lead to one set (every class of the range live, every run's target the
    same set). Returns the size of the set it leads to (left at ``lay[BUF_A]``), ``-1`` when
    a range does not, ``-2`` when a closure did not fit its pool (``meta[STATUS]``).
    """
    nfa, lay, scr = store[0], store[1], store[10]
    o_cls, o_cuts = lay[CLS], lay[CUTS]
    o_cur, o_f, o_out = lay[BUF_A], lay[BUF_B], lay[BUF_C]
    for p in range(p0, p1):
        first = nfa[o_cls + seq_lo[p]]
        last = nfa[o_cls + seq_hi[p]]
        if n_cur == 1:  # one state inside a character, most often with one edge: its target
            got = _one_edge_step(store, scr[o_cur], first, last)
            if got != -3:
                if got < 0:
                    return got
                n_cur = got
                continue
        n_e, nu = _cuts(o_cur, n_cur, scr, store)
        if nu < 0:
            return -2
        n_out = -1
        covered = first
        for u in range(nu - 1):
            a = scr[o_cuts + u]
            b = scr[o_cuts + u + 1] - 1
            if b < first:
                continue
            if a > last:
                break
            m = _union(a, n_e, store, o_f)
            if m < 0:
                continue  # a dead run: the gap fails below
            if a > covered:
                return -1
            if n_out >= 0 and not _same(scr, o_f, m, o_out, n_out):
                return -1
            _copy(scr, o_f, scr, o_out, m)
            n_out = m
            covered = b + 1
        if n_out < 0 or covered <= last:
            return -1
        _copy(scr, o_out, scr, o_cur, n_out)
        n_cur = n_out
    return n_cur


@_inner
def _one_edge_step(store: Store, s: int, first: int, last: int) -> int:  # pragma: no cover
    """:func:`_utf8_steps`' step from the set ``{s}`` when ``s`` has one byte edge.

    The edge covers the classes ``first .. last``: the set it leads to is its target's
    closure (left at ``lay[BUF_A]``; its size returned); it misses some: -1 (a dead class);
    a dead target: -1; ``s`` has another number of edges: -3 (take the general step); a
    closure that did not fit its pool: -2.
    """
    nfa, lay, clo_idx, clo_pool, scr = store[0], store[1], store[2], store[3], store[10]
    k = nfa[lay[OFF] + s]
    if nfa[lay[OFF] + s + 1] != k + 1:
        return -3
    t = nfa[lay[DST] + k]
    if not nfa[lay[LIVE] + t] or nfa[lay[EFIRST] + k] > first or nfa[lay[ELAST] + k] < last:
        return -1
    if not _closure(t, store):
        return -2
    cs, cl = clo_idx[2 * t], clo_idx[2 * t + 1]
    _copy(clo_pool, cs, scr, lay[BUF_A], cl)
    return int(cl)


@_inner
def _utf8_agree(store: Store, n_cur: int, n_target: int) -> int:  # pragma: no cover - compiled
    """Keep the set at ``lay[BUF_A]`` as the target (``n_target < 0``), else compare with it.

    Returns the target's size, or ``-1`` when the two sets differ.
    """
    lay, scr = store[1], store[10]
    o_cur, o_tgt = lay[BUF_A], lay[BUF_E]
    if n_target < 0:
        _copy(scr, o_cur, scr, o_tgt, n_cur)
        return n_cur
    return n_target if _same(scr, o_cur, n_cur, o_tgt, n_target) else -1


def _utf8_target(
    store: Store, state: int, seq_off: I32, seq_lo: I32, seq_hi: I32, max_states: int
) -> int:  # pragma: no cover - compiled
    """The DFA state every byte sequence leads to from ``state``, else -1 (-2: see meta).

    Sequence ``q`` is the byte ranges ``seq_lo[p]..seq_hi[p]`` for ``p`` in
    ``seq_off[q] .. seq_off[q + 1] - 1``. Each range must lead to one set of NFA states
    (every class of the range live, every run's target the same set), every sequence to the
    same last set; only that one becomes a DFA state (the sets inside a character do not).
    """
    store[9][STATUS] = OK
    n_target = -1
    for q in range(seq_off.shape[0] - 1):
        n_target = _utf8_from(store, state, seq_off[q], seq_off[q + 1], n_target, seq_lo, seq_hi)
        if n_target < 0:
            return n_target
    return _utf8_intern(store, n_target, max_states)


def _utf8_row_target(
    store: Store,
    rows: I32,
    state: int,
    seq_off: I32,
    seq_lo: I32,
    seq_hi: I32,
    max_states: int,
) -> int:  # pragma: no cover - compiled
    """:func:`_utf8_target` from a state whose row is built (``rows[state]``).

    The same answer: a first byte range leads to one set exactly when its bytes share one
    live target in the row (a set is one DFA state), so the row answers the first range of
    every sequence and the sets are stepped from the second on; a sequence whose first range
    reaches the same state as an earlier one's, with the same ranges after it, reaches the
    same set and is not stepped again. ``-2``: stopped (``meta[STATUS]``).
    """
    store[9][STATUS] = OK
    n_target = -1
    for q in range(seq_off.shape[0] - 1):
        p0, p1 = seq_off[q], seq_off[q + 1]
        j = rows[state, seq_lo[p0]]
        if j < 0:
            return -1
        for x in range(seq_lo[p0] + 1, seq_hi[p0] + 1):
            if rows[state, x] != j:
                return -1
        if _seen_before(rows, state, q, seq_off, seq_lo, seq_hi):
            continue
        n_target = _utf8_from(store, j, p0 + 1, p1, n_target, seq_lo, seq_hi)
        if n_target < 0:
            return n_target
    return _utf8_intern(store, n_target, max_states)


@_inner
def _utf8_from(
    store: Store, j: int, p0: int, p1: int, n_target: int, seq_lo: I32, seq_hi: I32
) -> int:  # pragma: no cover - compiled
    """Step DFA state ``j``'s set through the ranges ``p0 .. p1 - 1``; agree with the target.

    Returns the target's size (the first set reached becomes it: ``n_target < 0``), -1 when a
    range leads to no one set or the set differs from the target, -2 when it stopped.
    """
    lay, set_off, set_pool, scr = store[1], store[4], store[5], store[10]
    base = set_off[j]
    n_cur = _load(set_pool, base, set_off[j + 1] - base, scr, lay)
    n_cur = _utf8_steps(store, p0, p1, n_cur, seq_lo, seq_hi)
    if n_cur < 0:
        return n_cur
    return _utf8_agree(store, n_cur, n_target)


@_inner
def _utf8_intern(store: Store, n_target: int, max_states: int) -> int:  # pragma: no cover
    """The DFA state of the target set (-1: none; -2: stopped, see ``meta[STATUS]``)."""
    if n_target < 0:
        return -1
    j = _intern(store[10], store[1][BUF_E], n_target, store, max_states)
    return -2 if j < 0 else j


@_inner
def _seen_before(
    rows: I32, state: int, q: int, seq_off: I32, seq_lo: I32, seq_hi: I32
) -> bool:  # pragma: no cover - compiled
    """Whether an earlier sequence's first range leads where ``q``'s does, the rest alike."""
    p0, p1 = seq_off[q], seq_off[q + 1]
    j = rows[state, seq_lo[p0]]
    for r in range(q):
        r0, r1 = seq_off[r], seq_off[r + 1]
        if r1 - r0 != p1 - p0 or rows[state, seq_lo[r0]] != j:
            continue
        alike = True
        for k in range(1, p1 - p0):
            if seq_lo[r0 + k] != seq_lo[p0 + k] or seq_hi[r0 + k] != seq_hi[p0 + k]:
                alike = False
                break
        if alike:
            return True
    return False


@_inner
def _load(pool: I32, base: int, n: int, scr: I32, lay: I64) -> int:  # pragma: no cover
    """Copy the set ``pool[base : base + n]`` to ``lay[BUF_A]``; returns ``n``."""
    _copy(pool, base, scr, lay[BUF_A], n)
    return n


_A = numba.types.Array
_i32, _rows = _A(numba.int32, 1, "C"), _A(numba.int32, 2, "C")
utf8_kernel = _jit(_utf8_target, _STORE, numba.int64, _i32, _i32, _i32, numba.int64)
utf8_row_kernel = _jit(_utf8_row_target, _STORE, _rows, numba.int64, _i32, _i32, _i32, numba.int64)
utf8_row = _inner(_utf8_row_target)  # the same, called from other kernels
