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


@numba.njit(numba.int64(numba.int64), cache=True, nogil=True)
def _table_size(n: int) -> int:  # pragma: no cover - compiled
    """A power of two at least ``2 * n`` (an open-addressing table's slots)."""
    size = 16
    while size < 2 * n:
        size *= 2
    return size


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
    size = _table_size(n)
    slots = np.empty(size, dtype=np.int64)  # the first state of a signature, or -1
    label = np.empty(size, dtype=np.int64)
    new = np.empty(n, dtype=np.int64)
    succ = np.empty((n, k), dtype=np.int64)  # the block of each successor (-1: dead)
    while True:
        for s in range(n):
            for c in range(k):
                t = table[s, c]
                succ[s, c] = block[t] if t >= 0 else -1
        slots[:] = -1
        m = 0
        for s in range(n):
            h = np.uint64(block[s] + 1) * np.uint64(0x9E3779B97F4A7C15)
            for c in range(k):
                h = (h ^ np.uint64(succ[s, c] + 1)) * np.uint64(1099511628211)
            j = int(h >> np.uint64(11)) & (size - 1)
            while True:
                r = slots[j]
                if r < 0:
                    slots[j] = s
                    label[j] = m
                    new[s] = m
                    m += 1
                    break
                same = block[r] == block[s]
                c = 0
                while same and c < k:
                    same = succ[r, c] == succ[s, c]
                    c += 1
                if same:
                    new[s] = label[j]
                    break
                j = (j + 1) & (size - 1)
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
    size = _table_size(k)
    slots = np.full(size, -1, dtype=np.int64)  # the first class of a column, or -1
    label = np.empty(size, dtype=np.int32)
    of = np.empty(k, dtype=np.int32)
    first = np.empty(k, dtype=np.int64)
    m = 0
    for c in range(k):
        h = np.uint64(14695981039346656037)
        for s in range(n):
            h = (h ^ np.uint64(table[s, c] + 1)) * np.uint64(1099511628211)
        j = int(h >> np.uint64(11)) & (size - 1)
        while True:
            r = slots[j]
            if r < 0:
                slots[j] = c
                label[j] = m
                of[c] = m
                first[m] = c
                m += 1
                break
            same = True
            s = 0
            while same and s < n:
                same = table[s, r] == table[s, c]
                s += 1
            if same:
                of[c] = label[j]
                break
            j = (j + 1) & (size - 1)
    if m == k:
        return table, classes
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
