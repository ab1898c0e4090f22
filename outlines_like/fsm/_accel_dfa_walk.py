"""The compiled walks of a lazy DFA that build its rows as they read them (numba).

A token trie's walk (``_accel``'s, from one state) and a list of byte strings' walk (each
from its own state), fused with :mod:`._accel_dfa_kernels`' row building: one pass sets the
mask and builds, in the walk's order, every row it reads, instead of a pass that builds and
one that walks (or a round per depth of new states). A token index's first visit of a state
(:func:`_visit`) first tells, from the row it builds, whether the state is a string body's (the
index then reads its mask from the shared sets instead), in the same call.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from outlines_like.fsm._accel_dfa_kernels import (
    _OPTIONS,
    _STORE,
    BUILT,
    CHECK_ROWS,
    OK,
    STATUS,
    N,
    Store,
    _inner,
    _ready,
)
from outlines_like.fsm._subset import (
    VISIT_BODY,
    VISIT_CHECK,
    VISIT_GROW,
    VISIT_STOPPED,
    VISIT_WALKED,
)

__all__ = [
    "item_walk_kernel",
    "mark_kernel",
    "trie_walk_kernel",
    "visit_kernel",
    "walk_bytes",
]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
U32 = npt.NDArray[np.uint32]


def _trie_walk(
    store: Store,
    byte: U8,
    depth: I32,
    skip: I32,
    root_child: I32,
    node_tok: I32,
    stack: I32,
    state: int,
    rows: I32,
    done: U8,
    mask: U32 | I32,
    ends: I32,
    max_states: int,
) -> bool:  # pragma: no cover - compiled
    """``_accel``'s trie walk from ``state``, building each row as it first reads it.

    Depth first, a dead byte skips its subtree; ``mask`` gets ``node_tok[i]``'s bit for each
    live node (``uint32`` with a spare word for the sentinel's, or ``int32``, the row's words
    only), ``ends`` (when not empty) its end state. ``False`` when it stopped
    (``meta[STATUS]``: ``GROW_ROWS``, a state past ``rows``, or what :func:`_row` says);
    calling it again walks again (setting the same bits).
    """
    store[9][STATUS] = OK
    if not _ready(state, store, rows, done, max_states):
        return False
    want_ends = ends.shape[0] > 0
    stack[0] = state
    for b in range(256):
        c = root_child[b]
        if c < 0 or rows[state, b] < 0:
            continue
        i = c
        hi = skip[c]
        while i < hi:
            s = rows[stack[depth[i] - 1], byte[i]]
            if s < 0:
                i = skip[i]
                continue
            t = node_tok[i]
            if t >> 5 < mask.shape[0]:  # (a mask without the spare word: the sentinel's bit)
                mask[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
            if want_ends:
                ends[t] = s
            # a node with children: its row is read next (built here, in the walk's order)
            if i + 1 < skip[i]:
                if not _ready(s, store, rows, done, max_states):
                    return False
                stack[depth[i]] = s
            i += 1
    return True


_trie_walk_inner = _inner(_trie_walk)


def _visit(
    store: Store,
    rows: I32,
    done: U8,
    state: int,
    mask: I32,
    steps: I32,
    byte: U8,
    depth: I32,
    skip: I32,
    root_child: I32,
    node_tok: I32,
    stack: I32,
    ends: I32,
    eos: I32,
    max_states: int,
) -> int:  # pragma: no cover - compiled
    """A token index's first visit of ``state``: its row, then the trie walk, in one call.

    ``VISIT_BODY`` (nothing walked) when ``state`` is a string body's: its chain step is
    known already (``steps[state] >= 0``, the chain memo's), or its row, built here, lets
    the bytes ``0xC3`` and ``0xE4`` through (every non-ASCII character may step on); the
    caller reads such a row from the shared sets. Else :func:`_trie_walk` from ``state``
    into ``mask`` (``int32``, the row's words as the index keeps them: no slice, no view),
    plus the bits of the ``eos`` ids when ``state`` accepts: ``VISIT_WALKED``. Either way
    with ``VISIT_CHECK`` (the budget's clock is due) and ``VISIT_GROW`` (states past
    ``rows``) or-ed in. ``VISIT_STOPPED`` when it stopped (``meta[STATUS]``, as
    :func:`_trie_walk`; calling again goes on). The first visit was four calls and several
    array reads from Python before: ~half its cost.
    """
    meta = store[9]
    meta[STATUS] = OK
    code = VISIT_WALKED
    if state < steps.shape[0] and steps[state] >= 0:
        code = VISIT_BODY
    elif not _ready(state, store, rows, done, max_states):
        return VISIT_STOPPED
    elif rows[state, 0xC3] >= 0 and rows[state, 0xE4] >= 0:
        code = VISIT_BODY
    else:
        if not _trie_walk_inner(
            store, byte, depth, skip, root_child, node_tok, stack, state, rows, done, mask,
            ends, max_states,
        ):  # fmt: skip
            return VISIT_STOPPED
        if store[7][state] & 1:  # accepting: EOS too
            for t in eos:
                mask[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
    if meta[BUILT] >= CHECK_ROWS:
        code |= VISIT_CHECK
    if meta[N] > rows.shape[0]:
        code |= VISIT_GROW
    return code


@_inner
def walk_bytes(
    store: Store, rows: I32, done: U8, flat: U8, p: int, e: int, s: int, max_states: int
) -> int:  # pragma: no cover - compiled
    """Walk ``flat[p:e]`` from ``s``, building each row it first reads.

    Returns where it stopped: ``e`` when every byte lives, an earlier index at a dead byte,
    ``-1`` when the builder stopped (``meta[STATUS]``).
    """
    while p < e:
        if not _ready(s, store, rows, done, max_states):
            return -1
        s = rows[s, flat[p]]
        if s < 0:
            return p
        p += 1
    return p


def _item_walk(
    store: Store,
    flat: U8,
    begin: I64,
    end: I64,
    ids: I32,
    start: I32,
    chain: I32,
    resume: I64,
    rows: I32,
    done: U8,
    mask: U32,
    max_states: int,
) -> bool:  # pragma: no cover - compiled
    """Walk ``flat[begin[q]:end[q]]`` from ``chain[start[q]]``, building each row it first reads.

    ``mask`` gets ``ids[q]``'s bit when the item lives. Starts at item ``resume[0]``, leaves
    there the one it stopped in (``False``: see :func:`_trie_walk`).
    """
    store[9][STATUS] = OK
    for q in range(resume[0], begin.shape[0]):
        resume[0] = q
        e = end[q]
        p = walk_bytes(store, rows, done, flat, begin[q], e, chain[start[q]], max_states)
        if p < 0:
            return False
        if p == e:
            t = ids[q]
            mask[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
    resume[0] = begin.shape[0]
    return True


def _mark(rows: I32, done: U8, lo: int, hi: int, value: int) -> None:  # pragma: no cover
    """Set the rows of the states ``lo .. hi - 1`` not ``done`` to ``value``."""
    for s in range(lo, hi):
        if not done[s]:
            for x in range(rows.shape[1]):
                rows[s, x] = value


_A, _int = numba.types.Array, numba.int64
_u8, _i32, _i64, _u32 = (_A(t, 1, "C") for t in (numba.uint8, numba.int32, _int, numba.uint32))
_rows = _A(numba.int32, 2, "C")
trie_walk_kernel = numba.njit(
    (_STORE, _u8, _i32, _i32, _i32, _i32, _i32, _int, _rows, _u8, _u32, _i32, _int), **_OPTIONS
)(_trie_walk)
visit_kernel = numba.njit(
    (_STORE, _rows, _u8, _int, _i32, _i32, _u8, _i32, _i32, _i32, _i32, _i32, _i32, _i32, _int),
    **_OPTIONS,
)(_visit)
item_walk_kernel = numba.njit(
    (_STORE, _u8, _i64, _i64, _i32, _i32, _i32, _i64, _rows, _u8, _u32, _int), **_OPTIONS
)(_item_walk)
mark_kernel = numba.njit((_rows, _u8, _int, _int, _int), **_OPTIONS)(_mark)
