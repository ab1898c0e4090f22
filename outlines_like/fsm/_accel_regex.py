"""Compiled minimisation of a small regex's eager DFA (the ``accel`` extra: numba).

The same results as :func:`~outlines_like.fsm._dfa_minimize.minimize` and
:func:`~outlines_like.fsm._dfa_minimize.merge_classes`, table for table: Moore refinement from
the accepting / non-accepting split to its fixed point (blocks numbered by the first state of
each, the split's own numbering kept when no round refines it), then byte classes with equal
columns merged (numbered by their first class). The pure functions spend most of their time
in numpy calls per round (~0.6 ms for a 50-state DFA); here a round is one pass over the table.

Imported by :func:`~outlines_like.fsm.regex_dfa.compile_regex` while the compiled subset
construction is on, and loaded by :func:`outlines_like.fsm._accel.warm_up`.
"""

from __future__ import annotations

from collections.abc import Callable

import numba
import numpy as np
import numpy.typing as npt

from outlines_like.fsm._accel_kernels import _i32, _i64, _jit, _trans, _u8

__all__ = ["merge_classes", "minimize"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

_rows = numba.types.Array(numba.int64, 2, "C")


@numba.njit(numba.int64(numba.int64), cache=True, nogil=True)
def _table_size(n: int) -> int:  # pragma: no cover - compiled
    """A power of two at least ``2 * n`` (an open-addressing table's slots)."""
    size = 16
    while size < 2 * n:
        size *= 2
    return size


@numba.njit(numba.int64(_rows, _i64), cache=True, nogil=True, boundscheck=False)
def _label_rows(rows: I64, out: I64) -> int:  # pragma: no cover - compiled
    """Number the rows of ``rows`` by first occurrence (equal rows, equal numbers) into ``out``.

    Returns how many distinct rows there are. An open-addressing table of each distinct
    row's first index, rows compared whole.
    """
    n, w = rows.shape
    size = _table_size(n)
    slots = np.full(size, -1, dtype=np.int64)  # the first row of a number, or -1
    label = np.empty(size, dtype=np.int64)
    m = 0
    for s in range(n):
        h = np.uint64(14695981039346656037)
        for c in range(w):
            h = (h ^ np.uint64(rows[s, c] + 1)) * np.uint64(1099511628211)
        j = int(h >> np.uint64(11)) & (size - 1)
        while True:
            r = slots[j]
            if r < 0:
                slots[j] = s
                label[j] = m
                out[s] = m
                m += 1
                break
            same = True
            c = 0
            while same and c < w:
                same = rows[r, c] == rows[s, c]
                c += 1
            if same:
                out[s] = label[j]
                break
            j = (j + 1) & (size - 1)
    return m


@numba.njit(numba.int64(_trans, _u8, _i64), cache=True, nogil=True, boundscheck=False)
def _moore(table: I32, accepting: U8, block: I64) -> int:  # pragma: no cover - compiled
    """Write the coarsest stable partition into ``block``; return its number of blocks."""
    n, k = table.shape
    n_blocks = 1
    for s in range(n):
        block[s] = accepting[s]
        if accepting[s] != accepting[0]:
            n_blocks = 2
    if n_blocks == 1:
        block[:] = 0
    new = np.empty(n, dtype=np.int64)
    sig = np.empty((n, k + 1), dtype=np.int64)  # a state's block, then its successors'
    while True:
        for s in range(n):
            sig[s, 0] = block[s]
            for c in range(k):
                t = table[s, c]
                sig[s, c + 1] = block[t] if t >= 0 else -1
        m = _label_rows(sig, new)
        if m == n_blocks:
            return n_blocks
        block[:] = new
        n_blocks = m


def _minimize(table: I32, accepting: U8, start: int) -> tuple[I32, U8, int]:  # pragma: no cover
    n, k = table.shape
    if n <= 1:
        return table, accepting, start
    block = np.empty(n, dtype=np.int64)
    n_blocks = _moore(table, accepting, block)
    if n_blocks == n:
        return table, accepting, start
    rep = np.full(n_blocks, -1, dtype=np.int64)
    for s in range(n):
        if rep[block[s]] < 0:
            rep[block[s]] = s
    out = np.empty((n_blocks, k), dtype=np.int32)
    acc = np.empty(n_blocks, dtype=np.uint8)
    for b in range(n_blocks):
        r = rep[b]
        acc[b] = accepting[r]
        for c in range(k):
            t = table[r, c]
            out[b, c] = block[t] if t >= 0 else -1
    return out, acc, block[start]


def _merge_classes(table: I32, classes: I32) -> tuple[I32, I32]:  # pragma: no cover - compiled
    n, k = table.shape
    if n == 0:
        return table, classes
    columns = np.empty((k, n), dtype=np.int64)
    for s in range(n):
        for c in range(k):
            columns[c, s] = table[s, c]
    of = np.empty(k, dtype=np.int64)
    m = _label_rows(columns, of)
    if m == k:
        return table, classes
    first = np.full(m, -1, dtype=np.int64)
    for c in range(k):
        if first[of[c]] < 0:
            first[of[c]] = c
    out = np.empty((n, m), dtype=np.int32)
    for s in range(n):
        for b in range(m):
            out[s, b] = table[s, first[b]]
    new_cls = np.empty(classes.shape[0], dtype=np.int32)
    for x in range(classes.shape[0]):
        new_cls[x] = of[classes[x]]
    return out, new_cls


minimize: Callable[[I32, U8, int], tuple[I32, U8, int]] = _jit(_minimize, _trans, _u8, numba.int64)
merge_classes: Callable[[I32, I32], tuple[I32, I32]] = _jit(_merge_classes, _trans, _i32)
