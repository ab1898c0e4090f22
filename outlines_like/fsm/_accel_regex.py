"""Compiled minimisation of a small regex's eager DFA (the ``accel`` extra: numba).

The same results as :func:`~outlines_like.fsm._dfa_minimize.minimize` and
:func:`~outlines_like.fsm._dfa_minimize.merge_classes`, table for table: the coarsest
partition refining the accepting / non-accepting split (Hopcroft's algorithm here, Moore's
rounds there; blocks numbered by the first state of each, the split's own numbering kept when
nothing refines it), then byte classes with equal columns merged (numbered by their first
class). The pure functions spend most of their time in numpy calls per round (~0.6 ms for a
50-state DFA).

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

_HOPCROFT_FROM = 128
"""States from which :func:`minimize` refines by Hopcroft's algorithm rather than Moore's rounds
(same blocks; on smaller DFAs Moore's few cheap rounds cost ~half Hopcroft's set-up: a
35-state JSON Schema DFA 16 vs 36 us; past it a long chain's rounds add up: 290 states
0.6 vs 0.2 ms, a 50-character bounded string's 653 states 3.8 vs 1.0 ms)."""


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
def _coarsest(table: I32, accepting: U8, block: I64) -> int:  # pragma: no cover - compiled
    """Write the coarsest stable partition into ``block``; return its number of blocks.

    Hopcroft's refinement (a worklist of splitter blocks, each taken for every class; of a
    split block not waiting, the smaller part waits), O(k n log n): Moore's rounds, one per
    step of the longest distinguishing path, cost k n each (a 50-character string's 653
    states took hundreds of rounds, 3.8 ms). A missing transition (-1) goes to a sink of its own
    that no state joins, as Moore's -1 signature. Blocks come numbered as Moore numbers them:
    by their first state, or as the accepting / non-accepting split when nothing refines it.
    """
    n, k = table.shape
    m = n + 1  # states, and the sink (state n)
    # predecessors by class: pred[pred_off[c * m + t] : pred_off[c * m + t + 1]]
    pred_off = np.zeros(k * m + 1, dtype=np.int64)
    for s in range(n):
        for c in range(k):
            t = table[s, c]
            pred_off[c * m + (t if t >= 0 else n) + 1] += 1
    for c in range(k):  # (the sink's own transitions lead to the sink)
        pred_off[c * m + n + 1] += 1
    for i in range(k * m):
        pred_off[i + 1] += pred_off[i]
    fill = pred_off[:-1].copy()
    pred = np.empty(k * m, dtype=np.int64)
    for s in range(m):
        for c in range(k):
            t = n if s == n else table[s, c]
            j = c * m + (t if t >= 0 else n)
            pred[fill[j]] = s
            fill[j] += 1
    # the partition: elems grouped by block, blocks as [first, end) ranges of elems
    blk = np.empty(m, dtype=np.int64)
    elems = np.empty(m, dtype=np.int64)
    loc = np.empty(m, dtype=np.int64)
    first = np.empty(m, dtype=np.int64)
    end = np.empty(m, dtype=np.int64)
    marked = np.zeros(m, dtype=np.int64)  # per block: its members marked so far (at its front)
    waiting = np.zeros(m, dtype=np.uint8)
    work = np.empty(m, dtype=np.int64)
    n_work = 0
    # initial blocks: non-accepting, accepting (either may be empty), the sink
    n_acc = 0
    for s in range(n):
        n_acc += accepting[s] != 0
    sizes = (n - n_acc, n_acc)
    n_blocks = 0
    pos = 0
    for a in range(2):
        if sizes[a] == 0:
            continue
        first[n_blocks] = pos
        for s in range(n):
            if (accepting[s] != 0) == (a == 1):
                blk[s] = n_blocks
                elems[pos] = s
                loc[s] = pos
                pos += 1
        end[n_blocks] = pos
        n_blocks += 1
    initial = n_blocks
    blk[n] = n_blocks
    elems[pos] = n
    loc[n] = pos
    first[n_blocks] = pos
    end[n_blocks] = pos + 1
    n_blocks += 1
    for b in range(n_blocks):
        work[n_work] = b
        n_work += 1
        waiting[b] = 1
    splitter = np.empty(m, dtype=np.int64)
    touched = np.empty(m, dtype=np.int64)
    while n_work:
        n_work -= 1
        b = work[n_work]
        waiting[b] = 0
        size = end[b] - first[b]
        splitter[:size] = elems[first[b] : end[b]]  # (the block as taken: it may split below)
        for c in range(k):
            n_touched = 0
            for i in range(size):
                t = splitter[i]
                for j in range(pred_off[c * m + t], pred_off[c * m + t + 1]):
                    s = pred[j]
                    y = blk[s]
                    here = loc[s]
                    front = first[y] + marked[y]
                    if here < front:
                        continue  # marked already
                    if marked[y] == 0:
                        touched[n_touched] = y
                        n_touched += 1
                    other = elems[front]  # swap s to the front part
                    elems[front] = s
                    loc[s] = front
                    elems[here] = other
                    loc[other] = here
                    marked[y] += 1
            for i in range(n_touched):
                y = touched[i]
                count = marked[y]
                marked[y] = 0
                if count == end[y] - first[y]:
                    continue  # all of it: no split
                z = n_blocks  # the marked front part becomes block z
                n_blocks += 1
                first[z] = first[y]
                end[z] = first[y] + count
                first[y] = end[z]
                for q in range(first[z], end[z]):
                    blk[elems[q]] = z
                if waiting[y]:
                    work[n_work] = z
                    n_work += 1
                    waiting[z] = 1
                else:
                    smaller = z if count <= end[y] - first[y] else y
                    work[n_work] = smaller
                    n_work += 1
                    waiting[smaller] = 1
    n_real = n_blocks - 1  # (the sink's block stays alone)
    if n_real == initial:  # nothing refined the split: its own numbering
        for s in range(n):
            block[s] = accepting[s] if initial == 2 else 0
        return n_real
    label = np.full(n_blocks, -1, dtype=np.int64)
    count = 0
    for s in range(n):
        if label[blk[s]] < 0:
            label[blk[s]] = count
            count += 1
        block[s] = label[blk[s]]
    return n_real


@numba.njit(numba.int64(_trans, _u8, _i64), cache=True, nogil=True, boundscheck=False)
def _moore(table: I32, accepting: U8, block: I64) -> int:  # pragma: no cover - compiled
    """:func:`_coarsest`'s partition by Moore's rounds (for DFAs below :data:`_HOPCROFT_FROM`).

    A round per step of the longest distinguishing path, k n each: on small DFAs cheaper than
    Hopcroft's set-up.
    """
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
    if n < _HOPCROFT_FROM:
        n_blocks = _moore(table, accepting, block)
    else:
        n_blocks = _coarsest(table, accepting, block)
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
