"""Subset construction (regex NFA -> DFA rows) in compiled kernels: the ``accel`` extra (numba).

The same construction as :class:`~outlines_like.fsm._subset.SubsetBuilder`, state for state:
the same epsilon closures (memoised per NFA state, in one pool), the same runs of byte classes
(cut at every edge's ends, each run's target the union of the closures of the edges covering
it), and the same numbering (the targets of a row are added in class order, the rows of a batch
built in the order given), so a DFA built here is the pure builder's, table for table. A set of
NFA states is a sorted run of ints in one pool, found again through an open-addressing hash
table kept in an array (equality checked on the ints). Nothing is a Python object per state:
a row costs well under a microsecond instead of ~8 us of Python.

Every array the kernels write grows in Python: a kernel that runs out of room stops before it
commits the row it was building, says what to grow (``meta[_STATUS]``), and is called again
(a row's work is deterministic, so building it again finds the sets it added). Past
``max_states`` a kernel stops the same way and the builder raises the pure builder's error,
at the same state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numba
import numpy as np
import numpy.typing as npt

from outlines_like.fsm._regex_nfa import NFA
from outlines_like.fsm._subset import byte_classes, live_states, too_many_states
from outlines_like.fsm.budget import check as _check

__all__ = ["KernelSubsetBuilder", "TrieArrays"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

# meta: counters and the status of the last call
_N, _POOL, _CLO, _STAMP, _STATUS, _BUILT = 0, 1, 2, 3, 4, 5
_OK, _GROW_STATES, _GROW_POOL, _GROW_CLO, _GROW_HASH, _TOO_MANY, _GROW_ROWS, _PAUSE = range(8)
# the budget's clock is read after every _CHECK_ROWS rows built, and a kernel pauses for it
# after _PAUSE_ROWS rows in one call
_CHECK_ROWS, _PAUSE_ROWS = 64, 4096
# lay: sizes, then where each static array starts in nfa32 (and ends: the next one's start),
# then where each scratch array starts in scr
_LN, _LE, _LFINAL, _LK = 0, 1, 2, 3
_OFF, _EFIRST, _ELAST, _DST, _EPS_OFF, _EPS_DST, _LIVE, _CSTART, _CLS = 4, 5, 6, 7, 8, 9, 10, 11, 12
_NFA_END = 13
_MARK1, _MARK2, _STACK, _BUF_A, _BUF_B, _BUF_C, _BUF_D, _BUF_E = 14, 15, 16, 17, 18, 19, 20, 21
_EA, _EB, _ET, _CUTS, _RA, _RB, _RJ = 22, 23, 24, 25, 26, 27, 28
_SCR_END = 29
_STAMP_LIMIT = 1 << 30

_F = TypeVar("_F", bound=Callable[..., Any])


# No reference counting (numba's NRT): every array is passed in, none is allocated, and the
# atomic count updates on each call of a helper with a dozen arrays cost more than its work.
_OPTIONS: dict[str, Any] = {"cache": True, "nogil": True, "boundscheck": False, "_nrt": False}


def _inner(func: _F) -> _F:
    """Compile a helper the kernels call (typed by its callers; cached with them)."""
    compiled: _F = numba.njit(**_OPTIONS)(func)
    return compiled


@_inner
def _sift(a: I32, lo: int, root: int, end: int) -> None:  # pragma: no cover - compiled
    """Move ``a[lo + root]`` down the max-heap ``a[lo : lo + end]``."""
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and a[lo + child] < a[lo + child + 1]:
            child += 1
        if a[lo + root] >= a[lo + child]:
            return
        a[lo + root], a[lo + child] = a[lo + child], a[lo + root]
        root = child


@_inner
def _isort(a: I32, lo: int, hi: int) -> None:  # pragma: no cover - compiled
    """Sort ``a[lo:hi]`` in place: insertion sort for the usual handful, else heapsort."""
    n = hi - lo
    if n > 32:
        for root in range(n // 2 - 1, -1, -1):
            _sift(a, lo, root, n)
        for end in range(n - 1, 0, -1):
            a[lo], a[lo + end] = a[lo + end], a[lo]
            _sift(a, lo, 0, end)
        return
    for i in range(lo + 1, hi):
        x = a[i]
        j = i - 1
        while j >= lo and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@_inner
def _new_stamp(meta: I64, scr: I32, lay: I64) -> int:  # pragma: no cover - compiled
    """A fresh mark value for the two mark arrays (cleared when the counter wraps)."""
    st = meta[_STAMP] + 1
    if st >= _STAMP_LIMIT:
        scr[lay[_MARK1] : lay[_STACK]] = 0
        st = 1
    meta[_STAMP] = st
    return int(st)


@_inner
def _closure(
    s: int, nfa: I32, lay: I64, clo_idx: I64, clo_pool: I32, meta: I64, scr: I32
) -> bool:  # pragma: no cover - compiled
    """Memoise the live epsilon closure of ``s`` (states with byte edges, or final), sorted.

    ``False`` when the pool is full (``meta[_STATUS]`` says so). Arrays are read at offsets
    (``nfa[lay[_OFF] + x]``) rather than through views: a view costs reference counting.
    """
    if clo_idx[2 * s] >= 0:
        return True
    o_off, o_eo, o_ed, o_live = lay[_OFF], lay[_EPS_OFF], lay[_EPS_DST], lay[_LIVE]
    o_mark, o_stack, o_buf = lay[_MARK1], lay[_STACK], lay[_BUF_D]
    final = lay[_LFINAL]
    st = _new_stamp(meta, scr, lay)
    scr[o_mark + s] = st
    scr[o_stack] = s
    sp = 1
    m = 0
    while sp:
        sp -= 1
        x = scr[o_stack + sp]
        if nfa[o_off + x] < nfa[o_off + x + 1] or x == final:
            scr[o_buf + m] = x
            m += 1
        for k in range(nfa[o_eo + x], nfa[o_eo + x + 1]):
            y = nfa[o_ed + k]
            if scr[o_mark + y] != st and nfa[o_live + y]:
                scr[o_mark + y] = st
                scr[o_stack + sp] = y
                sp += 1
    used = meta[_CLO]
    if used + m > clo_pool.shape[0]:
        meta[_STATUS] = _GROW_CLO
        return False
    _isort(scr, o_buf, o_buf + m)
    for q in range(m):
        clo_pool[used + q] = scr[o_buf + q]
    clo_idx[2 * s] = used
    clo_idx[2 * s + 1] = m
    meta[_CLO] = used + m
    return True


@_inner
def _cuts(
    o_sub: int,
    n_sub: int,
    sub: I32,
    nfa: I32,
    lay: I64,
    clo_idx: I64,
    clo_pool: I32,
    meta: I64,
    scr: I32,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Collect the live edges of the set ``sub[o_sub : o_sub + n_sub]`` and their cuts.

    The cuts (the classes where an edge starts or ends) go sorted and distinct at
    ``lay[_CUTS]``. Returns ``(edges, cuts)``; ``cuts = -1`` when a closure did not fit its pool.
    """
    o_off, o_ef, o_el, o_dst, o_live = lay[_OFF], lay[_EFIRST], lay[_ELAST], lay[_DST], lay[_LIVE]
    o_ea, o_eb, o_et, o_cuts = lay[_EA], lay[_EB], lay[_ET], lay[_CUTS]
    n_e = 0
    for p in range(o_sub, o_sub + n_sub):
        s = sub[p]
        for k in range(nfa[o_off + s], nfa[o_off + s + 1]):
            t = nfa[o_dst + k]
            if nfa[o_live + t]:
                scr[o_ea + n_e] = nfa[o_ef + k]
                scr[o_eb + n_e] = nfa[o_el + k]
                scr[o_et + n_e] = t
                n_e += 1
    for q in range(n_e):
        if not _closure(scr[o_et + q], nfa, lay, clo_idx, clo_pool, meta, scr):
            return n_e, -1
    for q in range(n_e):
        scr[o_cuts + 2 * q] = scr[o_ea + q]
        scr[o_cuts + 2 * q + 1] = scr[o_eb + q] + 1
    _isort(scr, o_cuts, o_cuts + 2 * n_e)
    nu = 0
    for q in range(2 * n_e):
        c = scr[o_cuts + q]
        if nu == 0 or c != scr[o_cuts + nu - 1]:
            scr[o_cuts + nu] = c
            nu += 1
    return n_e, nu


@_inner
def _union(
    a: int, n_e: int, lay: I64, clo_idx: I64, clo_pool: I32, meta: I64, scr: I32, o_out: int
) -> int:  # pragma: no cover - compiled
    """The union of the closures of the edges covering class ``a``, sorted, at ``o_out``.

    Returns its size, or -1 when no edge covers ``a`` (a dead run).
    """
    o_ea, o_eb, o_et, o_mark = lay[_EA], lay[_EB], lay[_ET], lay[_MARK2]
    covering = 0
    m = 0
    st = 0
    for q in range(n_e):
        if scr[o_ea + q] <= a <= scr[o_eb + q]:
            t = scr[o_et + q]
            cs = clo_idx[2 * t]
            cl = clo_idx[2 * t + 1]
            if covering == 0:
                st = _new_stamp(meta, scr, lay)
            covering += 1
            for p in range(cs, cs + cl):
                x = clo_pool[p]
                if scr[o_mark + x] != st:
                    scr[o_mark + x] = st
                    scr[o_out + m] = x
                    m += 1
    if covering == 0:
        return -1
    if covering > 1:
        _isort(scr, o_out, o_out + m)
    return m


@_inner
def _hash(buf: I32, lo: int, m: int) -> int:  # pragma: no cover - compiled
    h = np.int64(m) * np.int64(-7046029254386353131)
    for q in range(lo, lo + m):
        h = (h ^ np.int64(buf[q])) * np.int64(-4658895280553007687)
    return int(h ^ (h >> np.int64(29)))


@_inner
def _intern(
    buf: I32,
    lo: int,
    m: int,
    lay: I64,
    set_off: I64,
    set_pool: I32,
    set_hash: I64,
    acc: U8,
    htab: I32,
    meta: I64,
    max_states: int,
) -> int:  # pragma: no cover - compiled
    """The DFA state of the set ``buf[lo : lo + m]``, added if new; -1 when it must stop."""
    h = _hash(buf, lo, m)
    mask = htab.shape[0] - 1
    i = h & mask
    while True:
        j = htab[i]
        if j < 0:
            break
        if set_hash[j] == h and set_off[j + 1] - set_off[j] == m:
            base = set_off[j]
            same = True
            for q in range(m):
                if set_pool[base + q] != buf[lo + q]:
                    same = False
                    break
            if same:
                return int(j)
        i = (i + 1) & mask
    n = meta[_N]
    if n >= max_states:
        meta[_STATUS] = _TOO_MANY
        return -1
    if n + 2 > set_off.shape[0]:
        meta[_STATUS] = _GROW_STATES
        return -1
    used = meta[_POOL]
    if used + m > set_pool.shape[0]:
        meta[_STATUS] = _GROW_POOL
        return -1
    if 2 * (n + 1) > htab.shape[0]:
        meta[_STATUS] = _GROW_HASH
        return -1
    final = lay[_LFINAL]
    is_final = 0
    for q in range(m):
        x = buf[lo + q]
        set_pool[used + q] = x
        if x == final:
            is_final = 1
    set_off[n + 1] = used + m
    set_hash[n] = h
    acc[n] = is_final  # bit 0; bit 1 is :func:`_expand`'s, clear between its calls
    htab[i] = n
    meta[_N] = n + 1
    meta[_POOL] = used + m
    return int(n)


def _rehash(set_off: I64, set_hash: I64, n: int, htab: I32) -> None:  # pragma: no cover
    """Insert states ``0 .. n - 1`` into the empty table ``htab`` (after it grew)."""
    mask = htab.shape[0] - 1
    for j in range(n):
        i = set_hash[j] & mask
        while htab[i] >= 0:
            i = (i + 1) & mask
        htab[i] = j


@_inner
def _row(
    s: int,
    nfa: I32,
    lay: I64,
    clo_idx: I64,
    clo_pool: I32,
    set_off: I64,
    set_pool: I32,
    set_hash: I64,
    acc: U8,
    htab: I32,
    meta: I64,
    scr: I32,
    rows: I32,
    done: U8,
    max_states: int,
) -> bool:  # pragma: no cover - compiled
    """Build the row of DFA state ``s`` into ``rows[s]`` (``False``: stopped, see meta).

    ``rows`` is ``int32[capacity, 256]`` (byte rows: a lazy DFA's table) or
    ``int32[capacity, k]`` (class rows: the eager build); -1 is dead. The row is written once
    its targets are all known, each cell once, with its final value (a reader without the
    lock never sees a wrong one), and only then marked ``done``.
    """
    o_cs, o_ra, o_rb, o_rj, o_buf = lay[_CSTART], lay[_RA], lay[_RB], lay[_RJ], lay[_BUF_A]
    o_cuts = lay[_CUTS]
    by_bytes = rows.shape[1] == 256  # (with 256 classes, class c is byte c)
    n_e, nu = _cuts(set_off[s], set_off[s + 1] - set_off[s], set_pool, nfa, lay, clo_idx,
                    clo_pool, meta, scr)  # fmt: skip
    if nu < 0:
        return False
    nr = 0
    for u in range(nu - 1):
        m = _union(scr[o_cuts + u], n_e, lay, clo_idx, clo_pool, meta, scr, o_buf)
        if m < 0:
            continue
        j = _intern(scr, o_buf, m, lay, set_off, set_pool, set_hash, acc, htab, meta, max_states)
        if j < 0:
            return False
        scr[o_ra + nr] = scr[o_cuts + u]
        scr[o_rb + nr] = scr[o_cuts + u + 1]  # exclusive
        scr[o_rj + nr] = j
        nr += 1
    pos = 0
    for r in range(nr):
        lo = scr[o_ra + r]
        hi = scr[o_rb + r]
        if by_bytes:
            lo, hi = nfa[o_cs + lo], nfa[o_cs + hi]
        j = scr[o_rj + r]
        for x in range(pos, lo):
            rows[s, x] = -1
        for x in range(lo, hi):
            rows[s, x] = j
        pos = hi
    for x in range(pos, rows.shape[1]):
        rows[s, x] = -1
    done[s] = 1
    built = meta[_BUILT] + 1
    meta[_BUILT] = built
    if built >= _PAUSE_ROWS:
        meta[_STATUS] = _PAUSE  # the row is built: calling again goes on after it
        return False
    return True


def _expand(
    nfa: I32,
    lay: I64,
    clo_idx: I64,
    clo_pool: I32,
    set_off: I64,
    set_pool: I32,
    set_hash: I64,
    acc: U8,
    htab: I32,
    meta: I64,
    scr: I32,
    todo: I32,
    ascending: bool,
    rows: I32,
    done: U8,
    max_states: int,
    order: I32,
) -> bool:  # pragma: no cover - compiled
    """Build the rows of the distinct states of ``todo`` not ``done`` yet (see :func:`_row`).

    In the order of ``todo``, or ascending (``order``: room for them). ``False`` when it
    stopped (``meta[_STATUS]``: an array must grow, or ``max_states`` is reached); calling
    it again goes on.
    """
    meta[_STATUS] = _OK
    cnt = 0
    for x in todo:  # bit 1 of acc: listed already
        if done[x] == 0 and acc[x] & 2 == 0:
            acc[x] |= 2
            order[cnt] = x
            cnt += 1
    for q in range(cnt):
        acc[order[q]] &= 1
    if ascending:
        _isort(order, 0, cnt)
    for q in range(cnt):
        if not _row(
            order[q], nfa, lay, clo_idx, clo_pool, set_off, set_pool, set_hash, acc, htab, meta,
            scr, rows, done, max_states,
        ):  # fmt: skip
            return False
    return True


def _expand_all(
    nfa: I32,
    lay: I64,
    clo_idx: I64,
    clo_pool: I32,
    set_off: I64,
    set_pool: I32,
    set_hash: I64,
    acc: U8,
    htab: I32,
    meta: I64,
    scr: I32,
    first: int,
    limit: int,
    rows: I32,
    done: U8,
    max_states: int,
) -> int:  # pragma: no cover - compiled
    """Build the rows of states ``first, first + 1, ...`` as they are found (the eager build).

    Stops at state ``limit``, past the last state, or when ``rows`` is full (``meta[_STATUS]``
    is then ``_GROW_ROWS``) or another array must grow; returns the first state not built.
    """
    meta[_STATUS] = _OK
    i = first
    while i < meta[_N] and i < limit:
        if i >= rows.shape[0]:
            meta[_STATUS] = _GROW_ROWS
            return i
        if not done[i] and not _row(
            i, nfa, lay, clo_idx, clo_pool, set_off, set_pool, set_hash, acc, htab, meta,
            scr, rows, done, max_states,
        ):  # fmt: skip
            return i
        i += 1
    return i


def _trie_paths(
    nfa: I32,
    lay: I64,
    clo_idx: I64,
    clo_pool: I32,
    set_off: I64,
    set_pool: I32,
    set_hash: I64,
    acc: U8,
    htab: I32,
    meta: I64,
    scr: I32,
    byte: U8,
    depth: I32,
    skip: I32,
    root_child: I32,
    stack: I32,
    state: int,
    rows: I32,
    done: U8,
    max_states: int,
) -> bool:  # pragma: no cover - compiled
    """Build every row a token trie's walk from ``state`` reads (the trie of ``_accel``).

    The walk's own order (depth first, a dead byte skips its subtree), minus its mask: so the
    walk then finds every row it reads built, in one pass instead of a round per depth of
    new states. ``False`` when it stopped: ``meta[_STATUS]`` is ``_GROW_ROWS`` (a state past
    ``rows``) or what :func:`_row` says; calling it again goes on.
    """
    meta[_STATUS] = _OK
    if state >= rows.shape[0]:
        meta[_STATUS] = _GROW_ROWS
        return False
    if not done[state] and not _row(
        state, nfa, lay, clo_idx, clo_pool, set_off, set_pool, set_hash, acc, htab, meta,
        scr, rows, done, max_states,
    ):  # fmt: skip
        return False
    stack[0] = state
    for b in range(256):
        c = root_child[b]
        if c < 0 or rows[state, b] < 0:
            continue
        i = c
        hi = skip[c]
        while i < hi:
            d = depth[i]
            parent = stack[d - 1]
            if parent >= rows.shape[0]:
                meta[_STATUS] = _GROW_ROWS
                return False
            if not done[parent] and not _row(
                parent, nfa, lay, clo_idx, clo_pool, set_off, set_pool, set_hash, acc, htab,
                meta, scr, rows, done, max_states,
            ):  # fmt: skip
                return False
            s = rows[parent, byte[i]]
            if s < 0:
                i = skip[i]
                continue
            stack[d] = s
            i += 1
    return True


def _item_paths(
    nfa: I32,
    lay: I64,
    clo_idx: I64,
    clo_pool: I32,
    set_off: I64,
    set_pool: I32,
    set_hash: I64,
    acc: U8,
    htab: I32,
    meta: I64,
    scr: I32,
    flat: U8,
    begin: I64,
    end: I64,
    starts: I32,
    rows: I32,
    done: U8,
    max_states: int,
) -> bool:  # pragma: no cover - compiled
    """Build every row the walk of the byte strings ``flat[begin[q]:end[q]]`` reads.

    Item ``q`` from ``starts[q]``, each up to its first dead byte. ``False`` when it stopped
    (see :func:`_trie_paths`).
    """
    meta[_STATUS] = _OK
    for q in range(begin.shape[0]):
        s = starts[q]
        for p in range(begin[q], end[q]):
            if s >= rows.shape[0]:
                meta[_STATUS] = _GROW_ROWS
                return False
            if not done[s] and not _row(
                s, nfa, lay, clo_idx, clo_pool, set_off, set_pool, set_hash, acc, htab, meta,
                scr, rows, done, max_states,
            ):  # fmt: skip
                return False
            s = rows[s, flat[p]]
            if s < 0:
                break
    return True


def _utf8_target(
    nfa: I32,
    lay: I64,
    clo_idx: I64,
    clo_pool: I32,
    set_off: I64,
    set_pool: I32,
    set_hash: I64,
    acc: U8,
    htab: I32,
    meta: I64,
    scr: I32,
    state: int,
    seq_off: I32,
    seq_lo: I32,
    seq_hi: I32,
    max_states: int,
) -> int:  # pragma: no cover - compiled
    """The DFA state every byte sequence leads to from ``state``, else -1 (-2: see meta).

    Sequence ``q`` is the byte ranges ``seq_lo[p]..seq_hi[p]`` for ``p`` in
    ``seq_off[q] .. seq_off[q + 1] - 1``. Each range must lead to one set of NFA states
    (every class of the range live, every run's target the same set), every sequence to the
    same last set; only that one becomes a DFA state (the sets inside a character do not).
    """
    meta[_STATUS] = _OK
    o_cls, o_cuts = lay[_CLS], lay[_CUTS]
    o_cur, o_f, o_out, o_tgt = lay[_BUF_A], lay[_BUF_B], lay[_BUF_C], lay[_BUF_E]
    n_target = -1
    for q in range(seq_off.shape[0] - 1):
        base = set_off[state]
        n_cur = set_off[state + 1] - base
        _copy(set_pool, base, scr, o_cur, n_cur)
        for p in range(seq_off[q], seq_off[q + 1]):
            first = nfa[o_cls + seq_lo[p]]
            last = nfa[o_cls + seq_hi[p]]
            n_e, nu = _cuts(o_cur, n_cur, scr, nfa, lay, clo_idx, clo_pool, meta, scr)
            if nu < 0:
                return -2
            n_out = -1
            covered = first
            ok = True
            for u in range(nu - 1):
                a = scr[o_cuts + u]
                b = scr[o_cuts + u + 1] - 1
                if b < first:
                    continue
                if a > last:
                    break
                m = _union(a, n_e, lay, clo_idx, clo_pool, meta, scr, o_f)
                if m < 0:
                    continue  # a dead run: the gap fails below
                if a > covered:
                    ok = False
                    break
                if n_out >= 0 and not _same(scr, o_f, m, o_out, n_out):
                    ok = False
                    break
                _copy(scr, o_f, scr, o_out, m)
                n_out = m
                covered = b + 1
            if not ok or n_out < 0 or covered <= last:
                return -1
            _copy(scr, o_out, scr, o_cur, n_out)
            n_cur = n_out
        if n_target < 0:
            _copy(scr, o_cur, scr, o_tgt, n_cur)
            n_target = n_cur
        elif not _same(scr, o_cur, n_cur, o_tgt, n_target):
            return -1
    if n_target < 0:
        return -1
    j = _intern(scr, o_tgt, n_target, lay, set_off, set_pool, set_hash, acc, htab, meta, max_states)
    return -2 if j < 0 else j


def _start(
    nfa: I32,
    lay: I64,
    clo_idx: I64,
    clo_pool: I32,
    set_off: I64,
    set_pool: I32,
    set_hash: I64,
    acc: U8,
    htab: I32,
    meta: I64,
    scr: I32,
    start: int,
    max_states: int,
) -> int:  # pragma: no cover - compiled
    """Add the closure of the NFA state ``start`` as a DFA state (-1: see meta)."""
    meta[_STATUS] = _OK
    if not _closure(start, nfa, lay, clo_idx, clo_pool, meta, scr):
        return -1
    cs, m = clo_idx[2 * start], clo_idx[2 * start + 1]
    return _intern(clo_pool, cs, m, lay, set_off, set_pool, set_hash, acc, htab, meta, max_states)


@_inner
def _same(a: I32, lo: int, m: int, lo2: int, n: int) -> bool:  # pragma: no cover - compiled
    """Whether ``a[lo : lo + m]`` equals ``a[lo2 : lo2 + n]``."""
    if m != n:
        return False
    for q in range(m):  # noqa: SIM110 - a plain loop compiles; a generator does not
        if a[lo + q] != a[lo2 + q]:
            return False
    return True


@_inner
def _copy(src: I32, lo: int, dst: I32, lo2: int, m: int) -> None:  # pragma: no cover
    for q in range(m):
        dst[lo2 + q] = src[lo + q]


_A = numba.types.Array
_i32, _i64, _u8 = _A(numba.int32, 1, "C"), _A(numba.int64, 1, "C"), _A(numba.uint8, 1, "C")
_rows = _A(numba.int32, 2, "C")
_STORE = (_i32, _i64, _i64, _i32, _i64, _i32, _i64, _u8, _i32, _i64, _i32)


def _jit(func: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    compiled: Callable[..., Any] = numba.njit(args, **_OPTIONS)(func)
    return compiled


expand_kernel = _jit(_expand, *_STORE, _i32, numba.boolean, _rows, _u8, numba.int64, _i32)
expand_all_kernel = _jit(_expand_all, *_STORE, numba.int64, numba.int64, _rows, _u8, numba.int64)
utf8_kernel = _jit(_utf8_target, *_STORE, numba.int64, _i32, _i32, _i32, numba.int64)
rehash_kernel = _jit(_rehash, _i64, _i64, numba.int64, _i32)
start_kernel = _jit(_start, *_STORE, numba.int64, numba.int64)
trie_paths_kernel = _jit(
    _trie_paths, *_STORE, _u8, _i32, _i32, _i32, _i32, numba.int64, _rows, _u8, numba.int64
)
item_paths_kernel = _jit(_item_paths, *_STORE, _u8, _i64, _i64, _i32, _rows, _u8, numba.int64)

TrieArrays = tuple[U8, I32, I32, I32, I32]
"""A token trie's ``(byte, depth, skip, root_child, stack)`` (see ``_accel.TokenTrie``)."""

_CHUNK = 1024  # rows per call of the eager build (the budget is checked between calls)


class KernelSubsetBuilder:
    """:class:`~outlines_like.fsm._subset.SubsetBuilder`'s construction, in the kernels above.

    Same interface for :class:`~outlines_like.fsm.regex_dfa.LazyByteDFA` and the eager build,
    same states in the same order, same errors.
    """

    compiled = True

    def __init__(self, nfa: NFA, start: int, final: int, max_states: int, pattern: str) -> None:
        self.nfa = nfa
        self.final = final
        self.max_states = max_states
        self.pattern = pattern
        self.classes, self.k = byte_classes(nfa)
        cstart = np.flatnonzero(np.diff(self.classes, prepend=-1))
        self.cstart: list[int] = [*cstart.tolist(), 256]
        self.live = live_states(nfa, start, final, pattern)
        lo, hi = np.frombuffer(nfa.lo, np.int32), np.frombuffer(nfa.hi, np.int32)
        parts: list[npt.NDArray[Any]] = [
            np.frombuffer(nfa.off, np.int32),
            self.classes[lo],
            self.classes[hi],
            np.frombuffer(nfa.dst, np.int32),
            np.frombuffer(nfa.eps_off, np.int32),
            np.frombuffer(nfa.eps_dst, np.int32),
            np.frombuffer(self.live, np.uint8),
            np.array(self.cstart, dtype=np.int32),
            self.classes,
        ]
        n, n_edges = nfa.n, int(lo.shape[0])
        bufs = [n + 1] * 8 + [n_edges + 1] * 3 + [2 * n_edges + 2] * 4
        sizes = [p.shape[0] for p in parts] + bufs
        lay = np.zeros(_SCR_END + 1, dtype=np.int64)
        lay[_LN], lay[_LE], lay[_LFINAL], lay[_LK] = n, n_edges, final, self.k
        lay[_OFF : _NFA_END + 1] = np.cumsum([0, *sizes[: len(parts)]])
        lay[_MARK1 : _SCR_END + 1] = np.cumsum([0, *bufs])
        self._lay = lay
        self._nfa32 = np.concatenate(parts).astype(np.int32)
        self._scr = np.zeros(int(lay[_SCR_END]), dtype=np.int32)
        self._clo_idx = np.full(2 * n, -1, dtype=np.int64)
        self._clo_pool = np.empty(max(1024, n), dtype=np.int32)
        self._set_off = np.zeros(257, dtype=np.int64)
        self._set_pool = np.empty(4096, dtype=np.int32)
        self._set_hash = np.zeros(256, dtype=np.int64)
        self._acc = np.zeros(256, dtype=np.uint8)
        self._htab = np.full(1024, -1, dtype=np.int32)
        self._meta = np.zeros(8, dtype=np.int64)
        self._sequences: tuple[object, I32, I32, I32] | None = None
        while start_kernel(*self._store(), start, max_states) < 0:
            self._grow()

    def _store(self) -> tuple[Any, ...]:
        return (
            self._nfa32,
            self._lay,
            self._clo_idx,
            self._clo_pool,
            self._set_off,
            self._set_pool,
            self._set_hash,
            self._acc,
            self._htab,
            self._meta,
            self._scr,
        )

    def _checked(self) -> None:
        """Check the budget's clock (raises past it) when enough rows were built since."""
        if self._meta[_BUILT] >= _CHECK_ROWS:
            self._meta[_BUILT] = 0
            _check("regex DFA")

    def _grow(self) -> None:
        """Grow what the last kernel call ran out of (or raise past ``max_states``)."""
        status = int(self._meta[_STATUS])
        n = int(self._meta[_N])
        room = self.nfa.n + 1  # the largest set
        if status == _TOO_MANY:
            raise too_many_states(self.pattern, self.max_states)
        if status == _PAUSE:
            self._checked()
            return
        if status == _GROW_STATES:
            cap = 2 * self._set_hash.shape[0]
            self._set_off = _resized(self._set_off, cap + 1)
            self._set_hash = _resized(self._set_hash, cap)
            self._acc = _resized(self._acc, cap)
        elif status == _GROW_POOL:
            self._set_pool = _resized(self._set_pool, 2 * self._set_pool.shape[0] + room)
        elif status == _GROW_CLO:
            self._clo_pool = _resized(self._clo_pool, 2 * self._clo_pool.shape[0] + room)
        elif status == _GROW_HASH:
            self._htab = np.full(2 * self._htab.shape[0], -1, dtype=np.int32)
            rehash_kernel(self._set_off, self._set_hash, n, self._htab)
        else:  # pragma: no cover - a kernel stopped without saying why
            raise AssertionError(f"subset kernel stopped with status {status}")

    @property
    def n_states(self) -> int:
        """DFA states discovered so far."""
        return int(self._meta[_N])

    def is_accepting(self, i: int) -> bool:
        """Whether DFA state ``i`` is accepting."""
        return bool(self._acc[i] & 1)

    def accepting_array(self) -> npt.NDArray[np.bool_]:
        """``bool[n_states]``."""
        return (self._acc[: self.n_states] & 1).astype(bool)

    def subset(self, i: int) -> tuple[int, ...]:
        """The NFA states of DFA state ``i``, ascending (tests)."""
        lo, hi = int(self._set_off[i]), int(self._set_off[i + 1])
        return tuple(self._set_pool[lo:hi].tolist())

    def fill_rows(self, todo: I32, ascending: bool, rows: I32, done: U8) -> None:
        """Write the rows of the states of ``todo`` not ``done`` yet (``ascending``: sorted).

        ``rows`` is ``int32[capacity, 256]`` (byte rows) or ``int32[capacity, k]`` (class
        rows), its capacity at least the states of ``todo``; states added on the way get no
        row. Raises past ``max_states`` at the state the pure builder raises at.
        """
        while True:
            order = np.empty_like(todo)
            if expand_kernel(*self._store(), todo, ascending, rows, done, self.max_states, order):
                self._checked()
                return
            self._grow()

    def _paths(self, kernel: Callable[..., bool], *args: Any) -> bool:
        """Run a path kernel to the end, growing arrays; ``False``: ``rows`` must grow first."""
        while True:
            if kernel(*self._store(), *args, self.max_states):
                self._checked()
                return True
            if self._meta[_STATUS] == _GROW_ROWS:
                return False
            self._grow()

    def trie_paths(self, trie: TrieArrays, state: int, rows: I32, done: U8) -> bool:
        """Build the rows a token trie's walk from ``state`` reads (see :func:`_trie_paths`).

        ``trie``: its ``(byte, depth, skip, root_child, stack)`` arrays. ``False`` when a
        state falls past ``rows`` (grow it and call again).
        """
        return self._paths(trie_paths_kernel, *trie, state, rows, done)

    def item_paths(self, flat: U8, begin: I64, end: I64, starts: I32, rows: I32, done: U8) -> bool:
        """Build the rows the walk of byte strings reads (see :func:`_item_paths`).

        ``False`` when a state falls past ``rows`` (grow it and call again).
        """
        return self._paths(item_paths_kernel, flat, begin, end, starts, rows, done)

    def class_table(self) -> I32:
        """Build every state (eagerly): ``int32[n_states, k]``, the class-indexed rows."""
        rows = np.empty((64, self.k), dtype=np.int32)
        done = np.zeros(64, dtype=np.uint8)
        i = 0
        while i < self.n_states:
            i = int(expand_all_kernel(*self._store(), i, i + _CHUNK, rows, done, self.max_states))
            if self._meta[_STATUS] == _GROW_ROWS:
                cap = 2 * rows.shape[0]
                rows, done = _resized(rows, cap), _resized(done, cap)
            elif self._meta[_STATUS] != _OK:
                self._grow()
            self._checked()
        return rows[: self.n_states]

    def utf8_target(self, i: int, sequences: list[list[tuple[int, int]]]) -> int:
        """The DFA state every byte sequence of ``sequences`` leads to from ``i``, else ``-1``.

        As :meth:`~outlines_like.fsm._subset.SubsetBuilder.utf8_target`: only the last set
        becomes a DFA state.
        """
        known = self._sequences
        if known is None or known[0] is not sequences:
            off = np.cumsum([0, *(len(seq) for seq in sequences)], dtype=np.int64)
            flat = [r for seq in sequences for r in seq]
            known = (
                sequences,
                off.astype(np.int32),
                np.array([lo for lo, _ in flat], dtype=np.int32),
                np.array([hi for _, hi in flat], dtype=np.int32),
            )
            self._sequences = known
        _, off32, lo, hi = known
        while True:
            got = int(utf8_kernel(*self._store(), i, off32, lo, hi, self.max_states))
            if got != -2:
                return got
            self._grow()

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_sequences"] = None  # compared by identity: rebuilt on first use
        return state


def _resized(a: npt.NDArray[Any], n: int) -> npt.NDArray[Any]:
    """``a`` with ``n`` rows (the first ones kept; new ones uninitialised or -1 / 0)."""
    out = np.empty((n, *a.shape[1:]), dtype=a.dtype)
    k = min(n, a.shape[0])
    out[:k] = a[:k]
    if a.dtype == np.uint8:
        out[k:] = 0
    return out
